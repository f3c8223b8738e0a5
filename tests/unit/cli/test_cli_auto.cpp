// The auto policy from the command line: --policy auto with --budget or --max-loss, what `generate` reports (JSON and
// the human summary line) and what `snapshot inspect` shows of a saved report.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <set>
#include <string>

#include "support/json_mini.hpp"
#include "support/util.hpp"

#ifdef INFOKV_CLI_PATH
namespace {

using infokv_test::json::Value;

const char *kPrompt =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. Once upon a time, "
    "there was a little girl named Lily. She loved to play outside in the park. Once upon a time, there was a little "
    "girl named Lily. She loved to play outside.";

infokv_test::CommandOutput generate(const std::string &flags, const std::string &redirect = "2>/dev/null") {
  return infokv_test::run_command(std::string(INFOKV_CLI_PATH) + " generate --model '" + infokv_test::stories_path() +
                                  "' --prompt '" + kPrompt + "' --temperature 0 --threads 1 " + flags + " " + redirect);
}

int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }

// The checks every report must pass: a layer per model layer (stories260K has 5), known evidence, budgets that add up.
void expect_report(const Value &a, double max_loss) {
  ASSERT_EQ(a.size(), 5u);  // layers, loss, tokens, uniform_tokens, max_loss
  const std::set<std::string> known = {"window_attention", "infokv", "accumulated_attention", "last_query", "recency", "key_norm"};
  ASSERT_EQ(a["layers"].size(), 5u);
  int64_t sum = 0;
  for (size_t l = 0; l < a["layers"].size(); ++l) {
    const Value &x = a["layers"][l];
    EXPECT_EQ(x["layer"].integer(), static_cast<int64_t>(l));
    EXPECT_EQ(known.count(x["evidence"].string()), 1u) << x["evidence"].string();
    EXPECT_GE(x["budget"].integer(), 1);
    EXPECT_GE(x["loss"].number(), 0.0);
    EXPECT_FLOAT_EQ(static_cast<float>(x["alpha"].number()), x["evidence"].string() == "infokv" ? 0.9f : 1.0f);
    sum += x["budget"].integer();
  }
  EXPECT_EQ(a["tokens"].integer(), sum);
  EXPECT_GE(a["loss"].number(), 0.0);
  EXPECT_EQ(a["max_loss"].number(), max_loss);
  if (max_loss > 0) {
    EXPECT_EQ(a["uniform_tokens"].integer(), 0);
    EXPECT_LE(a["loss"].number(), max_loss + 1e-6);
  } else {
    EXPECT_GT(a["uniform_tokens"].integer(), 0);
  }
}

TEST(CliAuto, GenerateJsonReportsWhatAutoChose) {
  const infokv_test::CommandOutput r = generate("--max-tokens 4 --policy auto --budget 0.5 --json");
  ASSERT_EQ(exit_code(r.status), 0) << r.out;
  const Value v = infokv_test::json::parse(r.out);
  const Value &c = v["compression"];
  EXPECT_EQ(c["policy"].string(), "auto");
  EXPECT_EQ(c["max_loss"].number(), 0.0);
  expect_report(c["auto"], 0.0);
  // right after the compression every layer held its budget; the generated tokens came after it
  const Value &kept = c["kv_after"]["tokens_kept_per_layer"];
  for (size_t l = 0; l < kept.size(); ++l) EXPECT_EQ(kept[l].integer(), c["auto"]["layers"][l]["budget"].integer());
}

TEST(CliAuto, QualityTargetNeedsNoBudget) {
  const infokv_test::CommandOutput r = generate("--max-tokens 4 --policy auto --max-loss 0.02 --json");
  ASSERT_EQ(exit_code(r.status), 0) << r.out;
  const Value v = infokv_test::json::parse(r.out);
  EXPECT_EQ(v["compression"]["max_loss"].number(), 0.02);
  expect_report(v["compression"]["auto"], 0.02);
}

TEST(CliAuto, HumanOutputHasOneSummaryLine) {
  const infokv_test::CommandOutput r = generate("--max-tokens 4 --policy auto --budget 0.5", "2>&1 >/dev/null");
  ASSERT_EQ(exit_code(r.status), 0) << r.out;
  EXPECT_NE(r.out.find("[auto: 5 layers, mean proxy loss "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" tokens (uniform budget: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("); evidence: "), std::string::npos) << r.out;
  const infokv_test::CommandOutput q = generate("--max-tokens 4 --policy auto --max-loss 0.02", "2>&1 >/dev/null");
  EXPECT_NE(q.out.find(" tokens (quality target: max loss 0.02); evidence: "), std::string::npos) << q.out;
  // other policies print no such line
  const infokv_test::CommandOutput s = generate("--max-tokens 4 --policy snapkv --budget 0.5", "2>&1 >/dev/null");
  ASSERT_EQ(exit_code(s.status), 0) << s.out;
  EXPECT_EQ(s.out.find("[auto:"), std::string::npos) << s.out;
}

TEST(CliAuto, ParallelSequencesEachHaveAReport) {
  const infokv_test::CommandOutput r = generate("--max-tokens 3 --policy auto --budget 0.5 --parallel 2 --json");
  ASSERT_EQ(exit_code(r.status), 0) << r.out;
  const Value v = infokv_test::json::parse(r.out);
  ASSERT_EQ(v["sequences"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) expect_report(v["sequences"][i]["auto"], 0.0);
}

TEST(CliAuto, MaxLossWithoutAutoAndAutoWithoutATargetAreUsageErrors) {
  const std::pair<const char *, const char *> cases[] = {
      {"--policy snapkv --budget 0.5 --max-loss 0.1", "needs --policy auto"},
      {"--policy none --max-loss 0.1", "needs --policy auto"},
      {"--policy auto", "--policy auto needs --budget or --max-loss"},
      {"--policy auto --max-loss -0.5", "--max-loss must be >= 0"},
      {"--policy auto --max-loss nan", "--max-loss expects a number"},
  };
  for (const auto &c : cases) {
    const infokv_test::CommandOutput r = generate(std::string("--max-tokens 1 ") + c.first, "2>&1");
    EXPECT_EQ(exit_code(r.status), 2) << c.first << ": " << r.out;
    EXPECT_NE(r.out.find(c.second), std::string::npos) << c.first << ": " << r.out;
  }
}

// A budget or a quality target without --policy means auto (the default chooser); --policy none keeps none.
TEST(CliAuto, ABudgetWithoutAPolicyMeansAuto) {
  for (const char *flags : {"--budget 0.25", "--max-loss 0.05"}) {
    const infokv_test::CommandOutput r = generate(std::string("--max-tokens 4 --json ") + flags);
    ASSERT_EQ(exit_code(r.status), 0) << flags << ": " << r.out;
    const Value v = infokv_test::json::parse(r.out);
    EXPECT_EQ(v["compression"]["policy"].str, "auto") << flags << ": " << r.out;
  }
}

TEST(CliAuto, SnapshotInspectShowsTheSavedReport) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("infokv_cli_auto_" + std::to_string(::getpid()) + ".ikvs")).string();
  const infokv_test::CommandOutput g = generate("--max-tokens 2 --policy auto --budget 0.5 --json --save-snapshot '" + path + "'");
  ASSERT_EQ(exit_code(g.status), 0) << g.out;
  const Value saved = infokv_test::json::parse(g.out)["compression"]["auto"];
  const std::string inspect = std::string(INFOKV_CLI_PATH) + " snapshot inspect '" + path + "'";
  const infokv_test::CommandOutput j = infokv_test::run_command(inspect + " --json 2>/dev/null");
  ASSERT_EQ(exit_code(j.status), 0) << j.out;
  const Value v = infokv_test::json::parse(j.out);
  EXPECT_EQ(v["compression"]["policy"].string(), "auto");
  const Value &a = v["sequences"][0]["auto"];
  expect_report(a, 0.0);
  for (size_t l = 0; l < a["layers"].size(); ++l) {
    EXPECT_EQ(a["layers"][l]["evidence"].string(), saved["layers"][l]["evidence"].string());
    EXPECT_EQ(a["layers"][l]["budget"].integer(), saved["layers"][l]["budget"].integer());
  }
  EXPECT_EQ(a["tokens"].integer(), saved["tokens"].integer());
  const infokv_test::CommandOutput t = infokv_test::run_command(inspect + " 2>/dev/null");
  EXPECT_NE(t.out.find("\n  auto: 5 layers, mean proxy loss "), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("\n    layer 4: "), std::string::npos) << t.out;
  std::filesystem::remove(path);
}

// eval puts auto beside the fixed policies at the same bytes, and adds a row per quality target (--max-losses).
TEST(CliAuto, EvalComparesAutoAtEqualBytesAndUnderQualityTargets) {
  const std::string base = std::string(INFOKV_CLI_PATH) + " eval --model '" + infokv_test::stories_path() + "' --file '" +
                           infokv_test::corpora_dir() + "/emma.txt' --prefix 200 --continuation 40 --windows 2 --offset 1000 ";
  const infokv_test::CommandOutput r =
      infokv_test::run_command(base + "--policies auto,snapkv --budgets 0.25 --max-losses 0.005,0.05 --json 2>/dev/null");
  ASSERT_EQ(exit_code(r.status), 0) << r.out;
  const Value v = infokv_test::json::parse(r.out);
  ASSERT_EQ(v.size(), 5u);  // none, auto 25%, auto <= 0.005, auto <= 0.05, snapkv 25%
  const Value *a25 = nullptr, *s25 = nullptr, *tight = nullptr, *loose = nullptr;
  for (size_t i = 0; i < v.size(); ++i) {
    const Value &row = v[i];
    if (row["policy"].str == "auto" && row["max_loss"].num == 0.0) a25 = &row;
    if (row["policy"].str == "snapkv") s25 = &row;
    if (row["policy"].str == "auto" && row["max_loss"].num == 0.005) tight = &row;
    if (row["policy"].str == "auto" && row["max_loss"].num == 0.05) loose = &row;
  }
  ASSERT_TRUE(a25 && s25 && tight && loose) << r.out;
  EXPECT_LE((*a25)["kv_bytes"].num, (*s25)["kv_bytes"].num) << "auto must hold no more bytes than the uniform budget";
  EXPECT_LT((*loose)["kv_bytes"].num, (*tight)["kv_bytes"].num) << "a looser target keeps less";
  EXPECT_GT((*loose)["kl"].num, 0.0);

  EXPECT_NE(exit_code(infokv_test::run_command(base + "--policies auto --budgets 0.25 --max-losses -1 2>/dev/null").status), 0);
  EXPECT_NE(exit_code(infokv_test::run_command(base + "--policies auto --budgets 0.25 --max-loss 0.01 2>/dev/null").status), 0);
}

}  // namespace
#endif
