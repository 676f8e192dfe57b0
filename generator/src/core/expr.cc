// Descriptor expression language (see fk/gen/expr.h and docs/descriptors.md, "Expressions").
//
// Grammar:  or := and ('||' and)* ; and := cmp ('&&' cmp)* ; cmp := add (op add)? with op in
// == != < <= > >= ; add := mul (('+'|'-') mul)* ; mul := unary (('*'|'/'|'%') unary)* ;
// unary := ('-'|'!') unary | primary ; primary := number | 'string' | true | false | null |
// ident | ident '(' expr (',' expr)* ')' | '(' expr ')'. Identifiers may contain '.' and '_'.
// Integer '/' must divide exactly (a config whose head_dim does not divide is an error, not a
// silently truncated kernel).
#include "fk/gen/expr.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <stdexcept>
#include <set>

#include "fk/gen/diag.h"
#include "fk/gen/format.h"

namespace fk::gen {

struct ExprNode {
  enum Kind { kLit, kIdent, kUnary, kBinary, kCall } kind;
  Value lit;
  std::string name;  // identifier, operator or function
  std::vector<std::shared_ptr<const ExprNode>> args;
};

namespace {

using NodeP = std::shared_ptr<const ExprNode>;

class Parser {
 public:
  explicit Parser(const std::string& s) : s_(s) {}

  NodeP parse_all() {
    NodeP n = parse_or();
    skip();
    if (pos_ != s_.size()) fail("unexpected '" + s_.substr(pos_) + "'");
    return n;
  }

 private:
  [[noreturn]] void fail(const std::string& why) { throw GenError{"invalid expression \"" + s_ + "\": " + why}; }
  void skip() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool eat(const std::string& tok) {
    skip();
    if (s_.compare(pos_, tok.size(), tok) == 0) {
      // do not split '<=' into '<' '=' or '==' into '=' '='
      if ((tok == "<" || tok == ">" || tok == "!") && pos_ + 1 < s_.size() && s_[pos_ + 1] == '=') return false;
      pos_ += tok.size();
      return true;
    }
    return false;
  }
  static NodeP bin(const std::string& op, NodeP a, NodeP b) {
    auto n = std::make_shared<ExprNode>();
    n->kind = ExprNode::kBinary;
    n->name = op;
    n->args = {std::move(a), std::move(b)};
    return n;
  }
  NodeP parse_or() {
    NodeP a = parse_and();
    while (eat("||")) a = bin("||", a, parse_and());
    return a;
  }
  NodeP parse_and() {
    NodeP a = parse_cmp();
    while (eat("&&")) a = bin("&&", a, parse_cmp());
    return a;
  }
  NodeP parse_cmp() {
    NodeP a = parse_add();
    for (const char* op : {"==", "!=", "<=", ">=", "<", ">"})
      if (eat(op)) return bin(op, a, parse_add());
    return a;
  }
  NodeP parse_add() {
    NodeP a = parse_mul();
    for (;;) {
      if (eat("+")) a = bin("+", a, parse_mul());
      else if (eat("-")) a = bin("-", a, parse_mul());
      else return a;
    }
  }
  NodeP parse_mul() {
    NodeP a = parse_unary();
    for (;;) {
      if (eat("*")) a = bin("*", a, parse_unary());
      else if (eat("/")) a = bin("/", a, parse_unary());
      else if (eat("%")) a = bin("%", a, parse_unary());
      else return a;
    }
  }
  NodeP parse_unary() {
    for (const char* op : {"-", "!"}) {
      if (eat(op)) {
        auto n = std::make_shared<ExprNode>();
        n->kind = ExprNode::kUnary;
        n->name = op;
        n->args = {parse_unary()};
        return n;
      }
    }
    return parse_primary();
  }
  NodeP parse_primary() {
    skip();
    if (pos_ >= s_.size()) fail("unexpected end");
    char c = s_[pos_];
    auto n = std::make_shared<ExprNode>();
    if (c == '(') {
      ++pos_;
      NodeP inner = parse_or();
      if (!eat(")")) fail("missing ')'");
      return inner;
    }
    if (c == '\'') {
      size_t end = s_.find('\'', pos_ + 1);
      if (end == std::string::npos) fail("unterminated string");
      n->kind = ExprNode::kLit;
      n->lit = s_.substr(pos_ + 1, end - pos_ - 1);
      pos_ = end + 1;
      return n;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {
      size_t start = pos_;
      bool is_float = false;
      while (pos_ < s_.size()) {
        char d = s_[pos_];
        if (std::isdigit(static_cast<unsigned char>(d))) {
          ++pos_;
        } else if (d == '.' || d == 'e' || d == 'E') {
          is_float = true;
          ++pos_;
          if ((d == 'e' || d == 'E') && pos_ < s_.size() && (s_[pos_] == '-' || s_[pos_] == '+')) ++pos_;
        } else {
          break;
        }
      }
      std::string num = s_.substr(start, pos_ - start);
      n->kind = ExprNode::kLit;
      try {
        size_t used = 0;
        if (is_float) n->lit = std::stod(num, &used);
        else n->lit = static_cast<int64_t>(std::stoll(num, &used));
        if (used != num.size()) fail("bad number '" + num + "'");
      } catch (const std::logic_error&) {
        fail("bad number '" + num + "'");
      }
      return n;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t start = pos_;
      while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_' || s_[pos_] == '.')) ++pos_;
      std::string id = s_.substr(start, pos_ - start);
      if (id == "true" || id == "false") {
        n->kind = ExprNode::kLit;
        n->lit = (id == "true");
        return n;
      }
      if (id == "null") {
        n->kind = ExprNode::kLit;
        n->lit = std::monostate{};
        return n;
      }
      if (eat("(")) {
        n->kind = ExprNode::kCall;
        n->name = id;
        if (!eat(")")) {
          do n->args.push_back(parse_or());
          while (eat(","));
          if (!eat(")")) fail("missing ')' after arguments of " + id);
        }
        return n;
      }
      n->kind = ExprNode::kIdent;
      n->name = id;
      return n;
    }
    fail(std::string("unexpected '") + c + "'");
  }

  const std::string& s_;
  size_t pos_ = 0;
};

[[noreturn]] void type_error(const std::string& op, const Value& a, const Value* b = nullptr) {
  std::string m = "operator " + op + " cannot apply to " + value_to_display(a);
  if (b) m += " and " + value_to_display(*b);
  throw GenError{m};
}

bool truthy(const std::string& op, const Value& v) {
  if (v.index() != 1) type_error(op, v);
  return std::get<bool>(v);
}

Value eval_node(const ExprNode& n, const Expr::Env& env) {
  switch (n.kind) {
    case ExprNode::kLit: return n.lit;
    case ExprNode::kIdent: {
      auto v = env(n.name);
      if (!v) throw GenError{"unknown name '" + n.name + "'"};
      return *v;
    }
    case ExprNode::kUnary: {
      Value a = eval_node(*n.args[0], env);
      if (n.name == "!") return !truthy("!", a);
      if (a.index() == 2) return -std::get<int64_t>(a);
      if (a.index() == 3) return -std::get<double>(a);
      type_error("-", a);
    }
    case ExprNode::kCall: {
      if (n.name == "select") {  // select(c, a, b): a if c else b; only the chosen branch is evaluated
        if (n.args.size() != 3) throw GenError{"select() takes 3 argument(s)"};
        const Value c = eval_node(*n.args[0], env);
        if (c.index() != 1) throw GenError{"select() needs a boolean condition, got " + value_to_display(c)};
        return std::get<bool>(c) ? eval_node(*n.args[1], env) : eval_node(*n.args[2], env);
      }
      std::vector<Value> args;
      for (const auto& a : n.args) args.push_back(eval_node(*a, env));
      auto want = [&](size_t k) {
        if (args.size() != k) throw GenError{n.name + "() takes " + std::to_string(k) + " argument(s)"};
      };
      if (n.name == "pow") {  // C pow, as Python's ** (head_dim ** -0.5 in vLLM)
        want(2);
        return std::pow(as_double(args[0]), as_double(args[1]));
      }
      if (n.name == "log") {  // natural logarithm (YaRN's mscale: 0.1 * m * log(factor) + 1)
        want(1);
        const double x = as_double(args[0]);
        if (!(x > 0)) throw GenError{"log() needs a positive argument, got " + canonical_double(x)};
        return std::log(x);
      }
      if (n.name == "float") {
        want(1);
        return as_double(args[0]);
      }
      if (n.name == "int") {  // truncation toward zero, as Python's int() (HF: int(head_dim * partial_rotary_factor))
        want(1);
        if (args[0].index() == 2) return args[0];
        const double x = as_double(args[0]);
        if (!std::isfinite(x)) throw GenError{"int() needs a finite number, got " + canonical_double(x)};
        return static_cast<int64_t>(std::trunc(x));
      }
      if (n.name == "min" || n.name == "max") {
        want(2);
        if (args[0].index() == 2 && args[1].index() == 2) {
          int64_t x = std::get<int64_t>(args[0]), y = std::get<int64_t>(args[1]);
          return n.name == "min" ? std::min(x, y) : std::max(x, y);
        }
        double x = as_double(args[0]), y = as_double(args[1]);
        return n.name == "min" ? std::min(x, y) : std::max(x, y);
      }
      // Lists (layer_types, mlp_only_layers) are held as their comma-joined items ("" when empty).
      if (n.name == "len" || n.name == "item") {
        want(n.name == "len" ? 1 : 2);
        if (args[0].index() != 4) throw GenError{n.name + "() needs a list (a string of comma-joined items), got " + value_to_display(args[0])};
        const std::vector<std::string> items = split_list(std::get<std::string>(args[0]));
        if (n.name == "len") return static_cast<int64_t>(items.size());
        if (args[1].index() != 2) throw GenError{"item() needs an integer index, got " + value_to_display(args[1])};
        const int64_t i = std::get<int64_t>(args[1]);
        if (i < 0 || i >= static_cast<int64_t>(items.size()))
          throw GenError{"item() index " + std::to_string(i) + " out of range (the list has " + std::to_string(items.size()) + " items)"};
        return items[static_cast<size_t>(i)];
      }
      throw GenError{"unknown function '" + n.name + "' (known: float, int, item, len, log, max, min, pow, select)"};
    }
    case ExprNode::kBinary: break;
  }
  const std::string& op = n.name;
  if (op == "&&") return truthy(op, eval_node(*n.args[0], env)) && truthy(op, eval_node(*n.args[1], env));
  if (op == "||") return truthy(op, eval_node(*n.args[0], env)) || truthy(op, eval_node(*n.args[1], env));
  Value a = eval_node(*n.args[0], env);
  Value b = eval_node(*n.args[1], env);
  if (op == "==" || op == "!=") {
    bool eq;
    if (is_numeric(a) && is_numeric(b)) eq = as_double(a) == as_double(b);
    else eq = a == b;
    return op == "==" ? eq : !eq;
  }
  if (!is_numeric(a) || !is_numeric(b)) type_error(op, a, &b);
  if (op == "<") return as_double(a) < as_double(b);
  if (op == "<=") return as_double(a) <= as_double(b);
  if (op == ">") return as_double(a) > as_double(b);
  if (op == ">=") return as_double(a) >= as_double(b);
  if (a.index() == 2 && b.index() == 2) {
    int64_t x = std::get<int64_t>(a), y = std::get<int64_t>(b);
    if (op == "+") return x + y;
    if (op == "-") return x - y;
    if (op == "*") return x * y;
    if (y == 0) throw GenError{"division by zero"};
    if (op == "%") return x % y;
    if (x % y != 0)
      throw GenError{std::to_string(x) + " is not divisible by " + std::to_string(y)};
    return x / y;
  }
  double x = as_double(a), y = as_double(b);
  if (op == "+") return x + y;
  if (op == "-") return x - y;
  if (op == "*") return x * y;
  if (op == "/") return x / y;
  type_error(op, a, &b);
}

void collect(const ExprNode& n, std::set<std::string>& out) {
  if (n.kind == ExprNode::kIdent) out.insert(n.name);
  for (const auto& a : n.args) collect(*a, out);
}

}  // namespace

Expr Expr::parse(const std::string& text) {
  Expr e;
  e.root_ = Parser(text).parse_all();
  e.text_ = text;
  return e;
}

Expr Expr::literal(Value v) {
  Expr e;
  auto n = std::make_shared<ExprNode>();
  n->kind = ExprNode::kLit;
  n->lit = v;
  e.root_ = n;
  e.text_ = value_to_display(v);
  return e;
}

Value Expr::eval(const Env& env) const {
  if (!root_) throw GenError{"empty expression"};
  return eval_node(*root_, env);
}

std::vector<std::string> Expr::identifiers() const {
  std::set<std::string> s;
  if (root_) collect(*root_, s);
  return {s.begin(), s.end()};
}

}  // namespace fk::gen
