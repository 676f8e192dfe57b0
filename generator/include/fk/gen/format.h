// Canonical text for numbers and identifiers (Note [Canonical numbers]).
//
// Note [Canonical numbers]
// Every float the generator prints, in C++ sources, in task names and in messages, is the
// shortest decimal string that reads back to the same double (std::to_chars without a format:
// fixed or scientific, whichever is shorter), e.g. 1e-05, 500000, 8, 0.08838834764831845.
// In task names `+` is dropped from exponents (`1e+16` -> `1e16`). This makes output independent
// of the locale and of how the number was spelled in the config (8.0 and 8 are the same task).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fk::gen {

/// Shortest round-trip decimal form of `x` (Note [Canonical numbers]).
std::string canonical_double(double x);
/// canonical_double with '+' removed, for task names.
std::string name_double(double x);
/// `s` with every character outside [A-Za-z0-9_] replaced by '_'.
std::string to_ident(const std::string& s);
/// A C++ string literal for `s` (quotes, backslash and control characters escaped).
std::string cpp_string_literal(const std::string& s);
/// JSON text of a string (quoted, escaped), for messages.
std::string json_quote(const std::string& s);
/// The items of a list field as values hold it: comma-joined text ("" is the empty list).
std::vector<std::string> split_list(const std::string& joined);
/// 64-bit FNV-1a of `s` (digests in task names: Note [Long task names], Note [LongRoPE names]).
uint64_t fnv1a64(const std::string& s);

}  // namespace fk::gen
