// Canonical number and identifier formatting (Note [Canonical numbers] in fk/gen/format.h).
#include "fk/gen/format.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "fk/gen/diag.h"
#include "fk/gen/value.h"

namespace fk::gen {

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string canonical_double(double x) {
  if (x == 0) return "0";  // also folds -0.0, which has no meaning in a config
  if (!std::isfinite(x)) throw GenError{"non-finite number"};
  // Shortest round-trip digits (std::to_chars), laid out like Python's repr without a trailing
  // ".0": positional for 1e-4 <= |x| < 1e16, else d.ddde[+-]XX.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci = sci.substr(1);
  }
  size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  int exp = std::stoi(sci.substr(e + 1));
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  if (exp < -4 || exp >= 16) return sign + sci;
  if (exp < 0) return sign + "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  if (digits.size() <= static_cast<size_t>(exp) + 1) return sign + digits + std::string(exp + 1 - digits.size(), '0');
  return sign + digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
}

std::string name_double(double x) {
  std::string s = canonical_double(x);
  std::string out;
  for (char c : s)
    if (c != '+') out += c;
  return out;
}

std::string to_ident(const std::string& s) {
  std::string out = s;
  for (char& c : out) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) c = '_';
  }
  return out;
}

std::string cpp_string_literal(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string json_quote(const std::string& s) { return nlohmann::json(s).dump(); }

const char* value_type_name(const Value& v) {
  switch (v.index()) {
    case 0: return "null";
    case 1: return "boolean";
    case 2: return "integer";
    case 3: return "number";
    default: return "string";
  }
}

std::string value_to_display(const Value& v) {
  switch (v.index()) {
    case 0: return "null";
    case 1: return std::get<bool>(v) ? "true" : "false";
    case 2: return std::to_string(std::get<int64_t>(v));
    case 3: return canonical_double(std::get<double>(v));
    default: return json_quote(std::get<std::string>(v));
  }
}

bool is_numeric(const Value& v) { return v.index() == 2 || v.index() == 3; }

double as_double(const Value& v) {
  if (v.index() == 2) return static_cast<double>(std::get<int64_t>(v));
  if (v.index() == 3) return std::get<double>(v);
  throw GenError{std::string("expected a number, got ") + value_to_display(v)};
}

std::vector<std::string> split_list(const std::string& joined) {
  std::vector<std::string> items;
  for (size_t start = 0; !joined.empty();) {
    const size_t comma = joined.find(',', start);
    items.push_back(joined.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return items;
}

}  // namespace fk::gen
