// The safetensors reader/writer (fk/runtime/safetensors.h), host-only: round trips over dtypes and
// shapes (scalar and 0-element included), deterministic bytes pinned against a golden header, and
// one test per malformed-file rule with its exact message. Bad files are built here from a raw
// header and buffer, so each case shows exactly what it breaks.
#include "fk/runtime/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <numeric>

#include "test_util.h"

namespace fk {
namespace {

using fk::gen::testing::slurp;
using fk::gen::testing::TempDir;
namespace fs = std::filesystem;

/// 8-byte little-endian length + header + buffer, exactly as given (no padding, no checks).
std::string raw_file(const std::string& header, const std::string& buffer, uint64_t declared_len) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(declared_len >> (8 * i));
  return out + header + buffer;
}
std::string raw_file(const std::string& header, const std::string& buffer) {
  return raw_file(header, buffer, header.size());
}

void write_bytes(const fs::path& p, const std::string& bytes) { fk::gen::testing::spit(p, bytes); }

/// The message SafetensorsFile::open throws for `bytes`, or "" when it accepts them.
std::string open_error(const fs::path& p, const std::string& bytes) {
  write_bytes(p, bytes);
  try {
    SafetensorsFile::open(p.string());
  } catch (const SafetensorsError& e) {
    return e.what();
  }
  return "";
}

std::string writer_error(const std::function<void(SafetensorsWriter&)>& f) {
  SafetensorsWriter w;
  try {
    f(w);
  } catch (const SafetensorsError& e) {
    return e.what();
  }
  return "";
}

template <class T> std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

struct Sample {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
};

/// Several dtypes and shapes, added in unsorted order: a scalar, 0-element tensors, a 4-d one.
std::vector<Sample> samples() {
  std::vector<float> f32(6);
  std::iota(f32.begin(), f32.end(), -2.5f);
  std::vector<uint16_t> bf16 = {0x3f80, 0xbf80, 0x7f80, 0x0001};  // 1, -1, inf, denormal
  std::vector<int64_t> i64 = {INT64_MIN, -1, 0, INT64_MAX};
  std::vector<double> f64 = {3.141592653589793};
  std::vector<uint16_t> f16 = {0x3c00, 0x4000, 0x4200, 0x4400, 0x7bff};
  std::vector<uint8_t> boolean = {1, 0, 1};
  return {
      {"model.layers.1.mlp.down_proj.weight", "F32", {2, 3}, bytes_of(f32)},
      {"model.embed_tokens.weight", "BF16", {4}, bytes_of(bf16)},
      {"blk.0.positions", "I64", {2, 2}, bytes_of(i64)},
      {"empty_u8", "U8", {0}, {}},
      {"scalar", "F64", {}, bytes_of(f64)},
      {"mask", "BOOL", {3}, boolean},
      {"empty_i8_2x0x3", "I8", {2, 0, 3}, {}},
      {"model.layers.0.input_layernorm.weight", "F16", {1, 1, 1, 5}, bytes_of(f16)},
  };
}

SafetensorsWriter writer_of(const std::vector<Sample>& s) {
  SafetensorsWriter w;
  for (const Sample& t : s) w.add(t.name, t.dtype, t.shape, t.data.data(), t.data.size());
  return w;
}

// ------------------------------------------------------------------------------------------------
// Round trips and determinism

TEST(Safetensors, RoundTripsDtypesAndShapes) {
  TempDir dir;
  const std::string path = (dir.path() / "w.safetensors").string();
  const std::vector<Sample> in = samples();
  SafetensorsWriter w = writer_of(in);
  w.set_metadata("format", "pt");
  w.set_metadata("fk.seed", "1234");
  w.write(path);

  SafetensorsFile f = SafetensorsFile::open(path);
  ASSERT_EQ(f.tensors().size(), in.size());
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"fk.seed", "1234"}}));
  for (const Sample& s : in) {
    SCOPED_TRACE(s.name);
    ASSERT_TRUE(f.contains(s.name));
    const StTensorInfo& t = f.info(s.name);
    EXPECT_EQ(t.name, s.name);
    EXPECT_EQ(t.dtype, s.dtype);
    EXPECT_EQ(t.shape, s.shape);
    EXPECT_EQ(t.nbytes(), s.data.size());
    EXPECT_EQ(f.read(s.name), s.data);
  }
  EXPECT_EQ(f.info("scalar").numel(), 1);
  EXPECT_EQ(f.info("scalar").shape.size(), 0u);
  EXPECT_EQ(f.info("empty_i8_2x0x3").numel(), 0);

  // Buffer = the tensors in sorted-name order, back to back, nothing after the last.
  std::vector<std::string> names;
  uint64_t cursor = 0;
  for (const StTensorInfo& t : f.tensors()) {
    names.push_back(t.name);
    EXPECT_EQ(t.begin, cursor) << t.name;
    cursor = t.end;
  }
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_EQ(cursor, f.buffer_size());
  EXPECT_EQ(f.buffer_offset() % 8, 0u);
  EXPECT_EQ(f.buffer_offset() + f.buffer_size(), fs::file_size(path));

  std::vector<float> back(6);
  f.read_into("model.layers.1.mlp.down_proj.weight", back.data(), back.size() * sizeof(float));
  EXPECT_EQ(back[0], -2.5f);
  EXPECT_EQ(back[5], 2.5f);
}

TEST(Safetensors, EmptyFileRoundTrips) {
  TempDir dir;
  const std::string path = (dir.path() / "empty.safetensors").string();
  SafetensorsWriter().write(path);
  EXPECT_EQ(slurp(path), raw_file("{}      ", ""));
  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_TRUE(f.metadata().empty());
}

TEST(Safetensors, GoldenBytes) {
  // The exact bytes, so any change to the header layout shows up here first.
  SafetensorsWriter w;
  const float one = 1.0f;
  const uint16_t h[2] = {0x3c00, 0x4000};
  w.add("b", "F16", {2}, h, sizeof h);
  w.add("a", "F32", {1}, &one, sizeof one);
  w.set_metadata("format", "pt");
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
      R"("b":{"dtype":"F16","shape":[2],"data_offsets":[4,8]}})";
  ASSERT_EQ(header.size(), 138u);  // padded to 144
  const std::string expected = raw_file(header + "      ", std::string("\x00\x00\x80\x3f\x00\x3c\x00\x40", 8));
  const std::vector<uint8_t> got = w.serialize();
  EXPECT_EQ(std::string(got.begin(), got.end()), expected);
}

TEST(Safetensors, DeterministicBytesAndPaddedHeader) {
  TempDir dir;
  const fs::path a = dir.path() / "a.safetensors", b = dir.path() / "b.safetensors";
  std::vector<Sample> s = samples();
  writer_of(s).write(a.string());
  std::reverse(s.begin(), s.end());  // insertion order must not matter
  SafetensorsWriter w = writer_of(s);
  w.write(b.string());
  const std::string bytes = slurp(a);
  EXPECT_EQ(bytes, slurp(b));
  w.write(b.string());  // overwrite in place: same bytes again
  EXPECT_EQ(bytes, slurp(b));
  const std::vector<uint8_t> ser = w.serialize();
  EXPECT_EQ(std::string(ser.begin(), ser.end()), bytes);

  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
  EXPECT_EQ(n % 8, 0u);
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.front(), '{');
  const size_t close = header.find_last_of('}');
  EXPECT_EQ(header.find_first_not_of(' ', close + 1), std::string::npos);
  EXPECT_LT(header.size() - close - 1, 8u);
  // No stray temporary files.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 2);
}

TEST(Safetensors, WriteIntoMissingDirectoryFailsCleanly) {
  TempDir dir;
  const std::string path = (dir.path() / "no_such_dir" / "w.safetensors").string();
  SafetensorsWriter w = writer_of(samples());
  try {
    w.write(path);
    FAIL() << "expected SafetensorsError";
  } catch (const SafetensorsError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path + ": cannot create " + path + ".tmp.", 0), 0u) << e.what();
  }
  EXPECT_FALSE(fs::exists(path));
}

TEST(Safetensors, LookupErrors) {
  TempDir dir;
  const std::string path = (dir.path() / "w.safetensors").string();
  writer_of(samples()).write(path);
  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_FALSE(f.contains("nope"));
  try {
    f.info("nope");
    FAIL();
  } catch (const SafetensorsError& e) {
    EXPECT_EQ(std::string(e.what()), path + ": $.nope: no such tensor (the file has 8)");
  }
  std::vector<uint8_t> small(3);
  try {
    f.read_into("scalar", small.data(), small.size());
    FAIL();
  } catch (const SafetensorsError& e) {
    EXPECT_EQ(std::string(e.what()), path + ": $.scalar: destination holds 3 bytes, the tensor has 8");
  }
  try {
    SafetensorsFile::open(path + ".missing");
    FAIL();
  } catch (const SafetensorsError& e) {
    EXPECT_EQ(std::string(e.what()), path + ".missing: cannot open: No such file or directory");
  }
}

// ------------------------------------------------------------------------------------------------
// Malformed files: one rule each, exact message (after "<path>: ").

struct BadFile {
  const char* rule;
  std::string bytes;
  std::string message;
};

std::string entry(const std::string& name, const std::string& body) { return "\"" + name + "\":" + body; }

std::vector<BadFile> bad_files() {
  const std::string b16(16, '\x01');
  return {
      {"file_too_short", std::string("\x05\x00\x00", 3), "file is 3 bytes, too short for the 8-byte header length"},
      {"header_over_limit", raw_file("{}", "", 100000001), "header length 100000001 exceeds the limit of 100000000 bytes"},
      {"header_past_eof", raw_file("{}", "", 64), "header length 64 runs past the end of the 10-byte file"},
      {"invalid_json", raw_file(R"({"a": )", ""),
       "$: header is not valid JSON: parse error at line 1, column 7: syntax error while parsing value - unexpected "
       "end of input; expected '[', '{', or a literal"},
      {"header_not_object", raw_file("[1, 2]", ""), "$: expected the header to be a JSON object, got [1,2]"},
      {"duplicate_name",
       raw_file(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                "ab"),
       "$.w: duplicate key"},
      {"duplicate_field", raw_file(R"({"w":{"dtype":"U8","dtype":"I8","shape":[1],"data_offsets":[0,1]}})", "a"),
       "$.w.dtype: duplicate key"},
      {"empty_name", raw_file(R"({"":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "a"),
       "$.\"\": tensor name is empty"},
      {"entry_not_object", raw_file(R"({"w": 3})", ""),
       "$.w: expected an object {\"dtype\", \"shape\", \"data_offsets\"}, got 3"},
      {"unknown_field", raw_file(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"offset":0}})", "a"),
       "$.w.offset: unknown key; expected dtype, shape, data_offsets"},
      {"missing_dtype", raw_file(R"({"w":{"shape":[1],"data_offsets":[0,1]}})", "a"), "$.w.dtype: missing"},
      {"missing_data_offsets", raw_file(R"({"w":{"dtype":"U8","shape":[1]}})", "a"), "$.w.data_offsets: missing"},
      {"dtype_not_string", raw_file(R"({"w":{"dtype":4,"shape":[1],"data_offsets":[0,1]}})", "a"),
       "$.w.dtype: expected a string, got 4"},
      {"unknown_dtype", raw_file(R"({"w":{"dtype":"Q4_K","shape":[1],"data_offsets":[0,1]}})", "a"),
       "$.w.dtype: unknown dtype \"Q4_K\"; known: BF16, BOOL, C64, F16, F32, F64, F8_E4M3, F8_E4M3FNUZ, F8_E5M2, "
       "F8_E5M2FNUZ, F8_E8M0, I16, I32, I64, I8, U16, U32, U64, U8"},
      {"shape_not_list", raw_file(R"({"w":{"dtype":"U8","shape":1,"data_offsets":[0,1]}})", "a"),
       "$.w.shape: expected a list of non-negative integers, got 1"},
      {"shape_negative", raw_file(R"({"w":{"dtype":"U8","shape":[2,-1],"data_offsets":[0,2]}})", "ab"),
       "$.w.shape: expected a list of non-negative integers, got [2,-1]"},
      {"shape_float", raw_file(R"({"w":{"dtype":"U8","shape":[2.0],"data_offsets":[0,2]}})", "ab"),
       "$.w.shape: expected a list of non-negative integers, got [2.0]"},
      {"offsets_not_pair", raw_file(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0]}})", "a"),
       "$.w.data_offsets: expected [begin, end] of two non-negative integers, got [0]"},
      {"offsets_negative", raw_file(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}})", "a"),
       "$.w.data_offsets: expected [begin, end] of two non-negative integers, got [-1,0]"},
      {"offsets_reversed", raw_file(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[8,4]}})", b16),
       "$.w.data_offsets: expected [begin, end] with begin <= end, got [8, 4]"},
      {"offsets_beyond_buffer",
       raw_file(R"({"model.layers.0.mlp.down_proj.weight":{"dtype":"BF16","shape":[32,32],"data_offsets":[0,2048]}})",
                std::string(1024, '\0')),
       "$.model.layers.0.mlp.down_proj.weight.data_offsets: expected [begin, end] within the 1024-byte buffer, got "
       "[0, 2048]"},
      {"size_mismatch", raw_file(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,6]}})", "abcdef"),
       "$.w.data_offsets: [0, 6] holds 6 bytes, but F32 [2, 2] needs 16"},
      {"size_overflow",
       raw_file(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", ""),
       "$.w.data_offsets: [0, 0] holds 0 bytes, but F32 [4294967296, 4294967296] needs more than 2^64"},
      {"overlap",
       raw_file(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}})",
                std::string(12, 'x')),
       "$.b.data_offsets: [4, 12] overlaps $.a.data_offsets [0, 8]"},
      {"hole",
       raw_file(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[4],"data_offsets":[12,16]}})",
                b16),
       "$.b.data_offsets: [12, 16] leaves a hole: bytes [8, 12) of the buffer belong to no tensor"},
      {"hole_at_start", raw_file(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[8,16]}})", b16),
       "$.a.data_offsets: [8, 16] leaves a hole: bytes [0, 8) of the buffer belong to no tensor"},
      {"trailing_bytes", raw_file(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", b16),
       "bytes [8, 16) at the end of the 16-byte buffer belong to no tensor"},
      {"buffer_without_tensors", raw_file("{}", "abc"), "bytes [0, 3) at the end of the 3-byte buffer belong to no tensor"},
      {"metadata_not_object", raw_file(R"({"__metadata__":["format"]})", ""),
       "$.__metadata__: expected an object of strings, got [\"format\"]"},
      {"metadata_value_not_string", raw_file(R"({"__metadata__":{"step":7}})", ""),
       "$.__metadata__.step: expected a string, got 7"},
  };
}

class SafetensorsBadFile : public ::testing::TestWithParam<BadFile> {};

TEST_P(SafetensorsBadFile, ReportsExactMessage) {
  const BadFile& c = GetParam();
  TempDir dir;
  const fs::path p = dir.path() / "weights.safetensors";
  EXPECT_EQ(open_error(p, c.bytes), p.string() + ": " + c.message);
}

INSTANTIATE_TEST_SUITE_P(Rules, SafetensorsBadFile, ::testing::ValuesIn(bad_files()),
                         [](const ::testing::TestParamInfo<BadFile>& i) { return std::string(i.param.rule); });

TEST(Safetensors, AcceptsValidHandWrittenFiles) {
  // What the format allows and the reference writer produces: any key order, offsets not in
  // name order, zero-size tensors at any boundary, leading/trailing header whitespace.
  TempDir dir;
  const fs::path p = dir.path() / "ok.safetensors";
  const std::string h =
      R"( {"z":{"data_offsets":[0,4],"shape":[4],"dtype":"U8"},"a":{"dtype":"U8","shape":[0],"data_offsets":[4,4]},)"
      R"("m":{"dtype":"I16","shape":[2],"data_offsets":[4,8]},"__metadata__":{}}   )";
  EXPECT_EQ(open_error(p, raw_file(h, "abcdefgh")), "");
  SafetensorsFile f = SafetensorsFile::open(p.string());
  EXPECT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.read("z"), (std::vector<uint8_t>{'a', 'b', 'c', 'd'}));
  EXPECT_EQ(f.read("m"), (std::vector<uint8_t>{'e', 'f', 'g', 'h'}));
  EXPECT_TRUE(f.read("a").empty());
}

// ------------------------------------------------------------------------------------------------
// Writer argument checks

TEST(SafetensorsWriter, RejectsBadArguments) {
  const float x[4] = {};
  EXPECT_EQ(writer_error([&](SafetensorsWriter& w) { w.add("", "F32", {1}, x, 4); }),
            "safetensors writer: $.\"\": tensor name is empty");
  EXPECT_EQ(writer_error([&](SafetensorsWriter& w) { w.add("__metadata__", "F32", {1}, x, 4); }),
            "safetensors writer: $.__metadata__: the name is reserved for the metadata");
  EXPECT_EQ(writer_error([&](SafetensorsWriter& w) {
              w.add("w", "F32", {1}, x, 4);
              w.add("w", "F32", {1}, x, 4);
            }),
            "safetensors writer: $.w: added twice");
  EXPECT_EQ(writer_error([&](SafetensorsWriter& w) { w.add("w", "float32", {1}, x, 4); }),
            "safetensors writer: $.w.dtype: unknown dtype \"float32\"; known: " + st_known_dtypes());
  EXPECT_EQ(writer_error([&](SafetensorsWriter& w) { w.add("w", "F32", {2, -2}, x, 16); }),
            "safetensors writer: $.w.shape: negative dimension in [2, -2]");
  EXPECT_EQ(writer_error([&](SafetensorsWriter& w) { w.add("w", "F32", {2, 2}, x, 12); }),
            "safetensors writer: $.w: 12 bytes given, but F32 [2, 2] needs 16");
  EXPECT_EQ(writer_error([&](SafetensorsWriter& w) { w.add("w", "F32", {2}, nullptr, 8); }),
            "safetensors writer: $.w: null data for 8 bytes");
  EXPECT_EQ(writer_error([&](SafetensorsWriter& w) { w.add("bad\xff", "F32", {1}, x, 4); }),
            "safetensors writer: tensor name is not valid UTF-8");
  EXPECT_EQ(writer_error([&](SafetensorsWriter& w) { w.set_metadata("k", "\xc3"); }),
            "safetensors writer: metadata is not valid UTF-8");
  EXPECT_EQ(writer_error([&](SafetensorsWriter& w) { w.add("empty", "F32", {0, 7}, nullptr, 0); }), "");
}

TEST(Safetensors, DtypeSizes) {
  EXPECT_EQ(st_dtype_size("BF16"), 2u);
  EXPECT_EQ(st_dtype_size("F32"), 4u);
  EXPECT_EQ(st_dtype_size("I64"), 8u);
  EXPECT_EQ(st_dtype_size("BOOL"), 1u);
  EXPECT_EQ(st_dtype_size("F4"), 0u);
  EXPECT_EQ(st_dtype_size("bf16"), 0u);
}

}  // namespace
}  // namespace fk
