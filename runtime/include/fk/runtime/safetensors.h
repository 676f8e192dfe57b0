// Reading and writing the safetensors format, so that seeded random weights saved here under
// their stable tensor names can be loaded, byte for byte, by an independent implementation
// (HF transformers through the `safetensors` Python package), and the other way round.
//
// Host-only: no CUDA in this header or in safetensors.cc (the `fk_safetensors` library builds
// with a plain C++ compiler and is tested without a GPU).
//
// Note [Safetensors layout]
//   bytes [0, 8)        N, the header length, unsigned 64-bit little-endian
//   bytes [8, 8+N)      UTF-8 JSON object: an optional "__metadata__": {str: str} and, per
//                       tensor, "<name>": {"dtype": "F32", "shape": [2, 3],
//                       "data_offsets": [begin, end]}
//   bytes [8+N, EOF)    the byte buffer; offsets are relative to its start, tensors are
//                       row-major and little-endian, and together they cover the buffer
//                       exactly (no overlaps, no holes, nothing after the last tensor).
// The writer pads the header with spaces to a multiple of 8 bytes, writes the tensors in
// sorted-name order (byte-wise), contiguous, and no timestamps: the same tensors and metadata
// always give the same bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace fk {

/// Any malformed file, invalid argument or I/O failure. Messages start with the file name and,
/// where one applies, the JSON key path: `w.safetensors: $.blk.0.w.dtype: unknown dtype "Q4"; ...`.
class SafetensorsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Bytes per element of a safetensors dtype string ("BF16" -> 2); 0 when the dtype is unknown.
/// Known: BOOL U8 I8 F8_E4M3 F8_E4M3FNUZ F8_E5M2 F8_E5M2FNUZ F8_E8M0 I16 U16 F16 BF16 I32 U32 F32
/// I64 U64 F64 C64 (sub-byte F4 is not supported).
size_t st_dtype_size(const std::string& dtype);
/// The known dtype strings, sorted, comma-separated (for messages).
std::string st_known_dtypes();

/// One tensor of a file: `begin`/`end` are byte offsets relative to the start of the buffer.
struct StTensorInfo {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;

  int64_t numel() const;                         ///< 1 for the scalar shape []
  uint64_t nbytes() const { return end - begin; }
};

/// A validated safetensors file. `open` reads and checks the header only; `read` fetches one
/// tensor's bytes from disk, so large files are not held in memory.
class SafetensorsFile {
 public:
  /// Reads and strictly validates the header (see Note [Safetensors layout]); throws
  /// SafetensorsError naming the file and the offending key.
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return path_; }
  /// All tensors, sorted by name.
  const std::vector<StTensorInfo>& tensors() const { return tensors_; }
  bool contains(const std::string& name) const;
  /// Throws SafetensorsError when there is no tensor of that name.
  const StTensorInfo& info(const std::string& name) const;
  /// The tensor's raw bytes (little-endian, row-major), exactly info(name).nbytes() of them.
  std::vector<uint8_t> read(const std::string& name) const;
  /// Copies the tensor's bytes into `dst`, which must hold exactly `nbytes` = info(name).nbytes().
  void read_into(const std::string& name, void* dst, size_t nbytes) const;
  /// The "__metadata__" object (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  /// Absolute file offset of the byte buffer (8 + header length).
  uint64_t buffer_offset() const { return buffer_offset_; }
  uint64_t buffer_size() const { return buffer_size_; }

 private:
  SafetensorsFile() = default;

  std::string path_;
  std::vector<StTensorInfo> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
  uint64_t buffer_offset_ = 0;
  uint64_t buffer_size_ = 0;
};

/// Collects tensors (copying their bytes) and writes one safetensors file with deterministic
/// bytes. `add` validates eagerly; `write` never leaves a half-written file at `path`.
class SafetensorsWriter {
 public:
  /// Throws SafetensorsError on an empty or reserved name ("__metadata__"), a name added twice,
  /// an unknown dtype, a negative dimension, or nbytes != numel * dtype size.
  void add(std::string name, std::string dtype, std::vector<int64_t> shape, const void* data, size_t nbytes);
  /// Sets (or replaces) one "__metadata__" entry.
  void set_metadata(std::string key, std::string value);
  /// Writes to a temporary file in the same directory, then renames it over `path`.
  void write(const std::string& path) const;
  /// The exact bytes `write` would put in the file.
  std::vector<uint8_t> serialize() const;

  size_t size() const { return tensors_.size(); }

 private:
  struct Entry {
    std::string dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> data;
  };
  std::map<std::string, Entry> tensors_;  // sorted by name: the buffer order
  std::map<std::string, std::string> metadata_;
};

}  // namespace fk
