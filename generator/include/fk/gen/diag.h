// Diagnostics: every pass appends errors here instead of stopping at the first one, so a run
// reports all problems at once (STYLE habit 2). Callers check `ok()` before the next pass; the
// write pass refuses to run when any error was recorded.
#pragma once

#include <string>
#include <vector>

namespace fk::gen {

/// A JSON parser's message without its "[json.exception.<kind>.<id>] " prefix (nlohmann's), so
/// that every "invalid JSON" error reads the same; other text is returned unchanged.
inline std::string json_error_text(const std::string& what) {
  const auto end = what.find("] ");
  return what.rfind("[json.exception", 0) == 0 && end != std::string::npos ? what.substr(end + 2) : what;
}

/// Collected error messages, each already complete (`<file>: <where>: <what>`), in the order found.
class Diagnostics {
 public:
  void error(std::string message) { errors_.push_back(std::move(message)); }
  /// An I/O failure (read/write/remove); reported like an error but mapped to exit code 4.
  void io_error(std::string message) {
    errors_.push_back(std::move(message));
    io_failed_ = true;
  }
  bool ok() const { return errors_.empty(); }
  bool io_failed() const { return io_failed_; }
  const std::vector<std::string>& errors() const { return errors_; }
  /// All messages joined with '\n' (each line ends with '\n').
  std::string text() const;

 private:
  std::vector<std::string> errors_;
  bool io_failed_ = false;
};

/// Thrown for a single, self-contained failure inside a pass (caught and recorded by the pass).
struct GenError {
  std::string message;
};

}  // namespace fk::gen
