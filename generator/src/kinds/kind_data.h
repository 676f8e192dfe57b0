// Task kinds as data (Note [Kinds as data] in kind_data.cc): the loader of generator/kinds/*.json
// and the hooks through which an entry names what data cannot say. Internal to the generator.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "fk/gen/kinds.h"

namespace fk::gen {

/// C++ that kind entries name (generator/src/kinds/kinds.cc, "Kind hooks"), each by its key.
struct KindHooks {
  /// `{@key}` in a name, production or placeholder: text from the parameters.
  std::map<std::string, std::function<std::string(const Params&)>> spell;
  /// "checks": throw GenError when the parameters are not ones the kind can take.
  std::map<std::string, std::function<void(const Params&)>> checks;
  /// "cases": the kind's shape registry (Note [Case registry]).
  std::map<std::string, std::function<std::vector<ShapeCase>(const Params&)>> cases;
  /// "served": Note [Served constants].
  std::map<std::string, std::function<std::string(const Params&, const std::string& dtype)>> served;
};

/// The kinds of one data file (`file` names it in messages). Throws std::invalid_argument naming
/// the file, the entry and the field when an entry is malformed or names an unknown hook.
std::vector<KindSpec> kinds_from_data(const std::string& text, const std::string& file, const KindHooks& hooks);

/// The embedded texts of generator/kinds/l1.json and composite.json (generated at build time).
extern const char* const kL1KindData;
extern const char* const kCompositeKindData;

}  // namespace fk::gen
