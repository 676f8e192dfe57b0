// Shared helpers for the generator's CPU tests: fixture paths, temp directories, file trees.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>

namespace fk::gen::testing {

namespace fs = std::filesystem;

inline fs::path source_dir() { return fs::path(FK_SOURCE_DIR); }
inline fs::path fixtures() { return source_dir() / "tests" / "fixtures"; }
/// The fastkernels binary under test, and a path quoted for the shell.
inline std::string bin() { return FK_FASTKERNELS_BIN; }
inline std::string q(const fs::path& p) { return "'" + p.string() + "'"; }

/// FK_UPDATE_GOLDEN=1 rewrites expected files instead of comparing (then review the diff!).
inline bool update_golden() {
  const char* v = std::getenv("FK_UPDATE_GOLDEN");
  return v && std::string(v) == "1";
}

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void spit(const fs::path& p, const std::string& s) {
  fs::create_directories(p.parent_path());
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << s;
}

/// A fresh directory under the system temp dir, removed when the object dies.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = fs::temp_directory_path() / ("fk_gen_test_" + std::to_string(::getpid()) + "_" + std::to_string(rd()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

/// Relative path -> bytes of every regular file under `dir`.
inline std::map<std::string, std::string> read_tree(const fs::path& dir) {
  std::map<std::string, std::string> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).generic_string()] = slurp(e.path());
  return out;
}

/// A minimal repository under `dst`: the fixture root `src` (hf_configs/, templates/) plus the
/// real generator/descriptors/ of this checkout.
inline void make_repo(const fs::path& src, const fs::path& dst) {
  fs::copy(src, dst, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  fs::create_directories(dst / "generator" / "descriptors");
  fs::copy(source_dir() / "generator" / "descriptors", dst / "generator" / "descriptors",
           fs::copy_options::recursive | fs::copy_options::overwrite_existing);
}

/// Runs a shell command, returning its exit status and stdout+stderr.
inline int run(const std::string& cmd, std::string* output) {
  std::string full = cmd + " 2>&1";
  FILE* p = popen(full.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  std::string out;
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int status = pclose(p);
  if (output) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace fk::gen::testing
