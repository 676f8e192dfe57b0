// Expressions in descriptors: how config fields feed derived constants and task parameters
// (`hidden_size / num_attention_heads`, `pow(head_dim, -0.5)`, `layer == 0`). Parsed once when the
// descriptor is loaded (syntax errors name the descriptor and JSON path); evaluated by resolve
// and lower against an environment of names. docs/descriptors.md documents the language.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fk/gen/value.h"

namespace fk::gen {

struct ExprNode;

/// An immutable parsed expression.
class Expr {
 public:
  Expr() = default;
  /// Parses `text`; throws GenError{"<reason>"} on a syntax error.
  static Expr parse(const std::string& text);
  /// A constant expression (a JSON literal in the descriptor).
  static Expr literal(Value v);

  /// Looks up a name; nullopt when unknown (an evaluation error naming the identifier).
  using Env = std::function<std::optional<Value>(const std::string&)>;
  /// Evaluates; throws GenError on unknown names, type errors, inexact integer division.
  Value eval(const Env& env) const;
  /// The source text (or canonical literal).
  const std::string& text() const { return text_; }
  /// Identifiers the expression mentions (for descriptor validation), sorted, unique.
  std::vector<std::string> identifiers() const;

 private:
  std::shared_ptr<const ExprNode> root_;
  std::string text_;
};

}  // namespace fk::gen
