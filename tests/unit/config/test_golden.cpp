// Files made by infokv 0.1.0 must load in every later version: the golden config (JSON and binary) and a small
// compressed snapshot of stories260K that must restore and continue exactly as recorded.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "compress/policy_table.hpp"
#include "config/config.hpp"
#include "session/generate.hpp"
#include "snapshot/snapshot.hpp"
#include "support/snapshot.hpp"

#ifndef INFOKV_TEST_DATA_DIR
#define INFOKV_TEST_DATA_DIR "tests/data"
#endif

using namespace infokv;

namespace {

std::string golden(const std::string &name) { return std::string(INFOKV_TEST_DATA_DIR) + "/golden/" + name; }

std::string slurp(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<int32_t> json_ints(const std::string &json, const std::string &key) {
  std::vector<int32_t> v;
  size_t at = json.find("\"" + key + "\"");
  at = json.find('[', at);
  const size_t end = json.find(']', at);
  std::istringstream s(json.substr(at + 1, end - at - 1));
  std::string tok;
  while (std::getline(s, tok, ',')) v.push_back(std::stoi(tok));
  return v;
}

void expect_golden_config(const Config &c) {
  EXPECT_EQ(c.model_path, "stories260K/stories260K.gguf");
  EXPECT_EQ(c.session.device, "cpu");
  EXPECT_EQ(c.session.n_threads, 2);
  EXPECT_EQ(c.session.kv_pool_bytes, 8388608);
  EXPECT_EQ(c.session.ubatch, 128);
  EXPECT_EQ(c.session.compression.policy, PolicyKind::infokv);
  EXPECT_DOUBLE_EQ(c.session.compression.budget_fraction, 0.25);
  EXPECT_EQ(c.session.compression.interval, 256);
  EXPECT_EQ(c.session.protect_prefix, 4);
  EXPECT_FLOAT_EQ(c.sampler.temperature, 0.7f);
  EXPECT_FLOAT_EQ(c.sampler.repeat_penalty, 1.1f);
  EXPECT_EQ(c.sampler.seed, 42u);
}

TEST(Golden, ConfigV1JsonLoads) { expect_golden_config(config_from_json(slurp(golden("config_v1.json")))); }

TEST(Golden, ConfigV1BinaryLoads) {
  const std::string b = slurp(golden("config_v1.bin"));
  expect_golden_config(config_from_binary(b.data(), b.size()));
}

TEST(Golden, SnapshotV1RestoresAndContinuesAsRecorded) {
  const std::string path = golden("snapshot_v1.ikvs");
  snapshot::FileSource f(path);
  const snapshot::Summary sum = snapshot::inspect(f);
  ASSERT_TRUE(sum.has_sampler);
  auto m = infokv_test::stories_model();
  SessionOptions o = infokv_test::session_opts();
  o.compression = sum.compression;  // continue under the policy it was saved with
  Session s(m, o);
  Sampler sampler(sum.sampler);
  const std::vector<int32_t> ids = snapshot::restore_file(s, &sampler, path);
  ASSERT_EQ(ids.size(), 1u);
  const GenerateResult r = generate(s, ids[0], {}, 12, sampler, nullptr);
  EXPECT_EQ(r.tokens, json_ints(slurp(golden("snapshot_v1.expected.json")), "continuation_tokens"));
}

}  // namespace
