// Value: the scalar a resolved constant or a task parameter holds. The typed model of a config
// (fields, constants, task parameters) is built from these; no raw JSON travels past the parser.
#pragma once

#include <cstdint>
#include <string>
#include <variant>

namespace fk::gen {

/// null (an absent optional), bool, integer, floating-point number or string.
using Value = std::variant<std::monostate, bool, int64_t, double, std::string>;

/// "null", "boolean", "integer", "number" or "string".
const char* value_type_name(const Value& v);
/// Canonical text for messages and `parse` output: strings quoted, floats canonical.
std::string value_to_display(const Value& v);
/// True when `v` is an integer or a number.
bool is_numeric(const Value& v);
/// Integer or number as double (throws GenError otherwise).
double as_double(const Value& v);

}  // namespace fk::gen
