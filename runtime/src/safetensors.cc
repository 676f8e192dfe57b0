// The safetensors reader and writer (see Note [Safetensors layout] in fk/runtime/safetensors.h).
// Host-only on purpose: built into `fk_safetensors` with a plain C++ compiler, no CUDA.
#include "fk/runtime/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <utility>

namespace fk {
namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

// The format's own limit (the reference implementation refuses larger headers too).
constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;
constexpr const char* kMetadataKey = "__metadata__";

const std::map<std::string, size_t>& dtype_sizes() {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1},    {"U8", 1},          {"I8", 1},  {"F8_E4M3", 1}, {"F8_E4M3FNUZ", 1},
      {"F8_E5M2", 1}, {"F8_E5M2FNUZ", 1}, {"F8_E8M0", 1}, {"I16", 2}, {"U16", 2},
      {"F16", 2},     {"BF16", 2},        {"I32", 4}, {"U32", 4},     {"F32", 4},
      {"I64", 8},     {"U64", 8},         {"F64", 8}, {"C64", 8},
  };
  return sizes;
}

std::string key_path(const std::string& name) { return name.empty() ? "$.\"\"" : "$." + name; }
std::string key_path(const std::string& name, const char* field) { return key_path(name) + "." + field; }

/// A JSON value for a message, shortened so a huge bad header cannot flood the error.
std::string show(const json& j) {
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

std::string show_shape(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string show_range(uint64_t b, uint64_t e) {
  return "[" + std::to_string(b) + ", " + std::to_string(e) + "]";
}

/// numel * element size, or false on overflow (or a negative dimension).
bool byte_size(const std::vector<int64_t>& shape, size_t elem, uint64_t* out) {
  uint64_t n = elem;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  }
  *out = n;
  return true;
}

[[noreturn]] void fail(const std::string& file, const std::string& msg) {
  throw SafetensorsError(file + ": " + msg);
}

std::string errno_text() { return std::strerror(errno); }

uint64_t load_le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void store_le64(uint64_t v, unsigned char* p) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

/// Parses the header, rejecting duplicate keys (nlohmann would silently keep the last one).
json parse_header(const std::string& file, const std::string& text) {
  struct Frame {
    std::set<std::string> keys;
    std::string current;  // the key whose value is being parsed
  };
  std::vector<Frame> stack;
  std::string duplicate;  // path of the first duplicate key
  auto cb = [&](int /*depth*/, json::parse_event_t ev, json& parsed) {
    switch (ev) {
      case json::parse_event_t::object_start: stack.emplace_back(); break;
      case json::parse_event_t::object_end: if (!stack.empty()) stack.pop_back(); break;
      case json::parse_event_t::key: {
        Frame& f = stack.back();
        f.current = parsed.get<std::string>();
        if (!f.keys.insert(f.current).second && duplicate.empty()) {
          duplicate = "$";
          for (const Frame& g : stack) duplicate += "." + g.current;
        }
        break;
      }
      default: break;
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text, cb);
  } catch (const json::exception& e) {
    std::string what = e.what();
    // Drop nlohmann's "[json.exception.parse_error.101] " prefix; keep the position and reason.
    if (!what.empty() && what[0] == '[') {
      size_t close = what.find("] ");
      if (close != std::string::npos) what = what.substr(close + 2);
    }
    fail(file, "$: header is not valid JSON: " + what);
  }
  if (!duplicate.empty()) fail(file, duplicate + ": duplicate key");
  return j;
}

/// Validates one tensor entry against the buffer size; the coverage check comes later.
StTensorInfo parse_entry(const std::string& file, const std::string& name, const json& v, uint64_t buffer_size) {
  if (name.empty()) fail(file, key_path(name) + ": tensor name is empty");
  if (!v.is_object()) {
    fail(file, key_path(name) + ": expected an object {\"dtype\", \"shape\", \"data_offsets\"}, got " + show(v));
  }
  for (const auto& [k, _] : v.items()) {
    if (k != "dtype" && k != "shape" && k != "data_offsets") {
      fail(file, key_path(name) + "." + k + ": unknown key; expected dtype, shape, data_offsets");
    }
  }
  for (const char* k : {"dtype", "shape", "data_offsets"}) {
    if (!v.contains(k)) fail(file, key_path(name, k) + ": missing");
  }
  StTensorInfo t;
  t.name = name;

  const json& dt = v["dtype"];
  if (!dt.is_string()) fail(file, key_path(name, "dtype") + ": expected a string, got " + show(dt));
  t.dtype = dt.get<std::string>();
  const size_t elem = st_dtype_size(t.dtype);
  if (elem == 0) {
    fail(file, key_path(name, "dtype") + ": unknown dtype \"" + t.dtype + "\"; known: " + st_known_dtypes());
  }

  const json& sh = v["shape"];
  bool shape_ok = sh.is_array();
  if (shape_ok) {
    for (const json& d : sh) {
      if (!d.is_number_integer() || (d.is_number_unsigned() ? d.get<uint64_t>() > INT64_MAX : d.get<int64_t>() < 0)) {
        shape_ok = false;
        break;
      }
      t.shape.push_back(d.get<int64_t>());
    }
  }
  if (!shape_ok) fail(file, key_path(name, "shape") + ": expected a list of non-negative integers, got " + show(sh));

  const json& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
    fail(file, key_path(name, "data_offsets") + ": expected [begin, end] of two non-negative integers, got " + show(off));
  }
  t.begin = off[0].get<uint64_t>();
  t.end = off[1].get<uint64_t>();
  if (t.begin > t.end) {
    fail(file, key_path(name, "data_offsets") + ": expected [begin, end] with begin <= end, got " +
                   show_range(t.begin, t.end));
  }
  if (t.end > buffer_size) {
    fail(file, key_path(name, "data_offsets") + ": expected [begin, end] within the " + std::to_string(buffer_size) +
                   "-byte buffer, got " + show_range(t.begin, t.end));
  }
  uint64_t need = 0;
  const bool fits = byte_size(t.shape, elem, &need);
  if (!fits || need != t.nbytes()) {
    fail(file, key_path(name, "data_offsets") + ": " + show_range(t.begin, t.end) + " holds " +
                   std::to_string(t.nbytes()) + " bytes, but " + t.dtype + " " + show_shape(t.shape) + " needs " +
                   (fits ? std::to_string(need) : std::string("more than 2^64")));
  }
  return t;
}

/// The tensors must tile the buffer: sorted by offset, each begins where the previous ended,
/// and the last ends at the buffer's end.
void check_coverage(const std::string& file, const std::vector<StTensorInfo>& tensors, uint64_t buffer_size) {
  std::vector<const StTensorInfo*> order;
  for (const StTensorInfo& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const StTensorInfo* a, const StTensorInfo* b) {
    return std::tie(a->begin, a->end, a->name) < std::tie(b->begin, b->end, b->name);
  });
  uint64_t cursor = 0;
  const StTensorInfo* prev = nullptr;  // the tensor that ends at `cursor`
  for (const StTensorInfo* t : order) {
    if (t->begin < cursor) {
      fail(file, key_path(t->name, "data_offsets") + ": " + show_range(t->begin, t->end) + " overlaps " +
                     key_path(prev->name, "data_offsets") + " " + show_range(prev->begin, prev->end));
    }
    if (t->begin > cursor) {
      fail(file, key_path(t->name, "data_offsets") + ": " + show_range(t->begin, t->end) + " leaves a hole: bytes [" +
                     std::to_string(cursor) + ", " + std::to_string(t->begin) + ") of the buffer belong to no tensor");
    }
    if (t->end > cursor || prev == nullptr) {
      cursor = t->end;
      prev = t;
    }
  }
  if (cursor != buffer_size) {
    fail(file, "bytes [" + std::to_string(cursor) + ", " + std::to_string(buffer_size) + ") at the end of the " +
                   std::to_string(buffer_size) + "-byte buffer belong to no tensor");
  }
}

/// The header bytes the writer emits: compact JSON, "__metadata__" first, then tensors in
/// sorted-name order with keys dtype, shape, data_offsets (the reference's own key order),
/// padded with spaces to a multiple of 8.
std::string build_header(const std::map<std::string, std::string>& metadata,
                         const std::vector<std::tuple<std::string, std::string, std::vector<int64_t>, uint64_t>>& entries) {
  ordered_json h = ordered_json::object();
  if (!metadata.empty()) {
    ordered_json m = ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h[kMetadataKey] = std::move(m);
  }
  uint64_t offset = 0;
  for (const auto& [name, dtype, shape, nbytes] : entries) {
    ordered_json e = ordered_json::object();
    e["dtype"] = dtype;
    e["shape"] = shape;
    e["data_offsets"] = {offset, offset + nbytes};
    h[name] = std::move(e);
    offset += nbytes;
  }
  std::string s = h.dump();
  s.append((8 - s.size() % 8) % 8, ' ');
  return s;
}

bool valid_utf8(const std::string& s) {
  try {
    (void)json(s).dump();
    return true;
  } catch (const json::exception&) {
    return false;
  }
}

}  // namespace

size_t st_dtype_size(const std::string& dtype) {
  auto it = dtype_sizes().find(dtype);
  return it == dtype_sizes().end() ? 0 : it->second;
}

std::string st_known_dtypes() {
  std::string s;
  for (const auto& [k, _] : dtype_sizes()) s += (s.empty() ? "" : ", ") + k;
  return s;
}

int64_t StTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// ------------------------------------------------------------------------------------------------
// Reader

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open: " + errno_text());
  in.seekg(0, std::ios::end);
  const uint64_t file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0, std::ios::beg);
  if (file_size < 8) {
    fail(path, "file is " + std::to_string(file_size) + " bytes, too short for the 8-byte header length");
  }
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  const uint64_t n = load_le64(len_bytes);
  if (n > kMaxHeaderBytes) {
    fail(path, "header length " + std::to_string(n) + " exceeds the limit of " + std::to_string(kMaxHeaderBytes) +
                   " bytes");
  }
  if (n > file_size - 8) {
    fail(path, "header length " + std::to_string(n) + " runs past the end of the " + std::to_string(file_size) +
                   "-byte file");
  }
  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  if (!in) fail(path, "short read of the " + std::to_string(n) + "-byte header");

  const json h = parse_header(path, text);
  if (!h.is_object()) fail(path, "$: expected the header to be a JSON object, got " + show(h));

  SafetensorsFile f;
  f.path_ = path;
  f.buffer_offset_ = 8 + n;
  f.buffer_size_ = file_size - 8 - n;
  for (const auto& [name, v] : h.items()) {  // nlohmann objects iterate in sorted key order
    if (name == kMetadataKey) {
      if (!v.is_object()) fail(path, key_path(name) + ": expected an object of strings, got " + show(v));
      for (const auto& [mk, mv] : v.items()) {
        if (!mv.is_string()) fail(path, key_path(name) + "." + mk + ": expected a string, got " + show(mv));
        f.metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    f.index_[name] = f.tensors_.size();
    f.tensors_.push_back(parse_entry(path, name, v, f.buffer_size_));
  }
  check_coverage(path, f.tensors_, f.buffer_size_);
  return f;
}

bool SafetensorsFile::contains(const std::string& name) const { return index_.count(name) != 0; }

const StTensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    fail(path_, key_path(name) + ": no such tensor (the file has " + std::to_string(tensors_.size()) + ")");
  }
  return tensors_[it->second];
}

std::vector<uint8_t> SafetensorsFile::read(const std::string& name) const {
  const StTensorInfo& t = info(name);
  std::vector<uint8_t> out(t.nbytes());
  read_into(name, out.data(), out.size());
  return out;
}

void SafetensorsFile::read_into(const std::string& name, void* dst, size_t nbytes) const {
  const StTensorInfo& t = info(name);
  if (nbytes != t.nbytes()) {
    fail(path_, key_path(name) + ": destination holds " + std::to_string(nbytes) + " bytes, the tensor has " +
                    std::to_string(t.nbytes()));
  }
  if (nbytes == 0) return;
  std::ifstream in(path_, std::ios::binary);
  if (!in) fail(path_, "cannot open: " + errno_text());
  in.seekg(static_cast<std::streamoff>(buffer_offset_ + t.begin));
  in.read(static_cast<char*>(dst), static_cast<std::streamsize>(nbytes));
  if (!in || static_cast<size_t>(in.gcount()) != nbytes) {
    fail(path_, key_path(name) + ": short read (was the file changed after it was opened?)");
  }
}

// ------------------------------------------------------------------------------------------------
// Writer

void SafetensorsWriter::add(std::string name, std::string dtype, std::vector<int64_t> shape, const void* data,
                            size_t nbytes) {
  const std::string who = "safetensors writer";
  if (name.empty()) fail(who, key_path(name) + ": tensor name is empty");
  if (name == kMetadataKey) fail(who, key_path(name) + ": the name is reserved for the metadata");
  if (!valid_utf8(name)) fail(who, "tensor name is not valid UTF-8");
  if (tensors_.count(name)) fail(who, key_path(name) + ": added twice");
  const size_t elem = st_dtype_size(dtype);
  if (elem == 0) fail(who, key_path(name, "dtype") + ": unknown dtype \"" + dtype + "\"; known: " + st_known_dtypes());
  for (int64_t d : shape) {
    if (d < 0) fail(who, key_path(name, "shape") + ": negative dimension in " + show_shape(shape));
  }
  uint64_t need = 0;
  const bool fits = byte_size(shape, elem, &need);
  if (!fits || need != nbytes) {
    fail(who, key_path(name) + ": " + std::to_string(nbytes) + " bytes given, but " + dtype + " " + show_shape(shape) +
                  " needs " + (fits ? std::to_string(need) : std::string("more than 2^64")));
  }
  if (nbytes > 0 && data == nullptr) fail(who, key_path(name) + ": null data for " + std::to_string(nbytes) + " bytes");
  Entry e{std::move(dtype), std::move(shape), {}};
  if (nbytes > 0) {
    const auto* p = static_cast<const uint8_t*>(data);
    e.data.assign(p, p + nbytes);
  }
  tensors_.emplace(std::move(name), std::move(e));
}

void SafetensorsWriter::set_metadata(std::string key, std::string value) {
  if (!valid_utf8(key) || !valid_utf8(value)) fail("safetensors writer", "metadata is not valid UTF-8");
  metadata_[std::move(key)] = std::move(value);
}

namespace {
template <class Tensors>
std::string writer_header(const std::map<std::string, std::string>& metadata, const Tensors& tensors) {
  std::vector<std::tuple<std::string, std::string, std::vector<int64_t>, uint64_t>> entries;
  for (const auto& [name, e] : tensors) entries.emplace_back(name, e.dtype, e.shape, e.data.size());
  return build_header(metadata, entries);
}
}  // namespace

std::vector<uint8_t> SafetensorsWriter::serialize() const {
  const std::string header = writer_header(metadata_, tensors_);
  size_t total = 8 + header.size();
  for (const auto& [_, e] : tensors_) total += e.data.size();
  std::vector<uint8_t> out(total);
  store_le64(header.size(), out.data());
  std::memcpy(out.data() + 8, header.data(), header.size());
  size_t pos = 8 + header.size();
  for (const auto& [_, e] : tensors_) {
    if (!e.data.empty()) std::memcpy(out.data() + pos, e.data.data(), e.data.size());
    pos += e.data.size();
  }
  return out;
}

void SafetensorsWriter::write(const std::string& path) const {
  const std::string header = writer_header(metadata_, tensors_);
  unsigned char len_bytes[8];
  store_le64(header.size(), len_bytes);

  // Same directory, so the rename is atomic and never crosses file systems.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(path, "cannot create " + tmp + ": " + errno_text());
  auto put = [&](const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      ssize_t w = ::write(fd, c, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return false;
      c += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  };
  bool ok = put(len_bytes, 8) && put(header.data(), header.size());
  for (auto it = tensors_.begin(); ok && it != tensors_.end(); ++it) ok = put(it->second.data.data(), it->second.data.size());
  ok = ok && ::fsync(fd) == 0;
  const std::string err = ok ? "" : errno_text();
  ok = (::close(fd) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = err.empty() ? errno_text() : err;
    ::unlink(tmp.c_str());
    fail(path, "cannot write: " + why);
  }
}

}  // namespace fk
