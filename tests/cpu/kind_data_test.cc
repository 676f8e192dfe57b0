// Task kinds as data (Note [Kinds as data] in generator/src/kinds/kind_data.cc): an entry renders its
// name, production and placeholders from the parameters; a malformed entry is refused when the
// table is built, naming the file, the entry and what is wrong.
#include <gtest/gtest.h>

#include <stdexcept>

#include "../../generator/src/kinds/kind_data.h"
#include "fk/gen/diag.h"

namespace fk::gen {
namespace {

KindHooks test_hooks() {
  KindHooks h;
  h.spell["twice"] = [](const Params& p) { return std::to_string(2 * std::get<int64_t>(p.at("n"))); };
  h.checks["positive"] = [](const Params& p) {
    if (std::get<int64_t>(p.at("n")) <= 0) throw GenError{"n must be > 0"};
  };
  h.cases["none"] = [](const Params&) { return std::vector<ShapeCase>{}; };
  return h;
}

const KindHooks& hooks() {
  static const KindHooks h = test_hooks();
  return h;
}

std::string entry(const std::string& body) { return R"({"kinds": [{"kind": "demo", "template": "demo", "class": "Demo", )" + body + "}]}"; }

const std::string kGood = entry(R"("production": "x.{mode:cls}", "params": [["n", "int"], ["eps", "float"], ["bias", "bool"], ["mode", "string"], ["max_position", "int", "cases"]],
  "name": "demo_n{n}_eps{eps}_{bias?bias|nobias}{bias?_b}_{mode}_{@twice}_{{x}}_{dtype}", "checks": ["positive"],
  "placeholders": {"mode": "{mode:cls}", "literal": "std::array<int, 2>{{{n}, 1}}"}, "omit": ["bias"],
  "maps": {"cls": {"fast": "Fast", "slow": "Slow"}}, "cases": "none")");

TEST(KindData, AnEntryRendersNameProductionAndDerivedPlaceholders) {
  const std::vector<KindSpec> kinds = kinds_from_data(kGood, "k.json", hooks());
  ASSERT_EQ(kinds.size(), 1u);
  const KindSpec& k = kinds[0];
  EXPECT_EQ(k.kind, "demo");
  ASSERT_EQ(k.params.size(), 5u);
  EXPECT_FALSE(k.params[4].is_constant);
  const Params p = {{"n", int64_t{3}}, {"eps", 1e-6}, {"bias", true}, {"mode", std::string("fast")}, {"max_position", int64_t{64}}};
  EXPECT_EQ(k.name(p, "bf16"), "demo_n3_eps1e-06_bias_b_fast_6_{x}_bf16");
  EXPECT_EQ(k.production(p), "x.Fast");
  const std::vector<std::pair<std::string, std::string>> want = {
      {"n", "3"}, {"eps", "1e-06"}, {"mode", "Fast"}, {"literal", "std::array<int, 2>{3, 1}"}};
  EXPECT_EQ(k.placeholders(p), want) << "constant parameters less `omit`, then the extra placeholders";
  Params bad = p;
  bad["n"] = int64_t{0};
  try {
    k.name(bad, "bf16");
    ADD_FAILURE() << "the check did not run";
  } catch (const GenError& e) {
    EXPECT_EQ(e.message, "n must be > 0");
  }
}

std::string refusal(const std::string& text) {
  try {
    kinds_from_data(text, "k.json", hooks());
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(KindData, MalformedEntriesAreRefusedNamingFileEntryAndField) {
  const std::string base = R"("production": "x", "params": [["n", "int"]], "cases": "none", )";
  EXPECT_EQ(refusal(entry(base + R"("name": "demo_{m}")")),
            "k.json: kinds[0] (demo): unknown parameter \"m\" in \"demo_{m}\" (Note [Kinds as data])");
  EXPECT_EQ(refusal(entry(base + R"("name": "demo_{@nope}")")),
            "k.json: kinds[0] (demo): unknown hook \"@nope\" in \"demo_{@nope}\" (Note [Kinds as data])");
  EXPECT_EQ(refusal(entry(base + R"("name": "demo_{n?a|b}")")),
            "k.json: kinds[0] (demo): {n?a|b} on a parameter that is not a boolean in \"demo_{n?a|b}\" (Note [Kinds as data])");
  EXPECT_EQ(refusal(entry(base + R"("name": "demo_{n")")), "k.json: kinds[0] (demo): an unclosed '{' in \"demo_{n\" (Note [Kinds as data])");
  EXPECT_EQ(refusal(entry(base + R"("name": "demo", "colour": "red")")), "k.json: kinds[0] (demo): unknown field \"colour\"");
  EXPECT_EQ(refusal(entry(R"("production": "x", "params": [["n", "integer"]], "cases": "none", "name": "d")")),
            "k.json: kinds[0] (demo): params: type \"integer\", expected int, float, bool or string");
  EXPECT_EQ(refusal(entry(R"("production": "x", "params": [["n", "int"]], "cases": "all", "name": "d")")),
            "k.json: kinds[0] (demo): cases: unknown registry \"all\"");
  EXPECT_EQ(refusal(R"({"kinds": [)").rfind("k.json: invalid JSON: ", 0), 0u) << refusal(R"({"kinds": [)");
  EXPECT_EQ(refusal(R"({"kind": []})"), "k.json: expected an object with an array \"kinds\"");
  // A value of the wrong JSON type is refused like any other defect, naming the entry.
  EXPECT_EQ(refusal(entry(base + R"("name": "d", "maps": {"m": {"a": 1}})")).rfind("k.json: kinds[0]: ", 0), 0u)
      << refusal(entry(base + R"("name": "d", "maps": {"m": {"a": 1}})"));
}

}  // namespace
}  // namespace fk::gen
