// The engine through the C ABI (capi/include/infokv/engine.h): conversations on a pool too small for all of them
// finish with the tokens they produce alone, under every strategy that finds memory; the fail strategy fails turns
// with a reason; bad handles, ids, tokens and buffers are refused with the documented statuses.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "infokv/infokv.h"
#include "support/capi.hpp"
#include "support/random_inputs.hpp"

using namespace infokv_capi_test;

namespace {

struct EngineGuard {
  ikv_engine *e = nullptr;
  ~EngineGuard() { ikv_engine_free(e); }
};

std::vector<std::vector<int32_t>> prompts(int n, int len) {
  std::mt19937 rng(infokv_test::test_seed());
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p{1};
    for (int j = 0; j < len; ++j) p.push_back(3 + static_cast<int32_t>(rng() % 500));
    out.push_back(p);
  }
  return out;
}

// Runs every prompt as one conversation of one turn (16 tokens, greedy) on an engine with `pool_blocks` blocks;
// returns each conversation's generated tokens (empty for a failed turn) and the failures' reasons.
std::vector<std::vector<int32_t>> run(ikv_model *m, int32_t strategy, int64_t pool_blocks,
                                      const std::vector<std::vector<int32_t>> &ps, std::vector<std::string> *failures,
                                      ikv_engine **keep = nullptr) {
  ikv_session_options o = f32_options();
  o.kv_pool_blocks = pool_blocks;
  EngineGuard g;
  EXPECT_EQ(ikv_engine_create(&g.e, m, &o, strategy, nullptr), IKV_OK) << ikv_last_error_message();
  std::vector<int64_t> ids;
  for (const auto &p : ps) {
    int64_t id = 0;
    EXPECT_EQ(ikv_engine_open(&id, g.e, 0, 0, nullptr), IKV_OK);
    EXPECT_EQ(ikv_engine_submit(g.e, id, p.data(), p.size(), 16), IKV_OK) << ikv_last_error_message();
    ids.push_back(id);
  }
  std::map<int64_t, std::vector<int32_t>> streamed;
  for (int step = 0; step < 2000; ++step) {
    int64_t pending = 0;
    EXPECT_EQ(ikv_engine_pending(&pending, g.e), IKV_OK);
    if (pending == 0) break;
    std::vector<int64_t> ev(static_cast<size_t>(2 * pending));
    size_t n = 0;
    EXPECT_EQ(ikv_engine_step(ev.data(), ev.size(), &n, g.e), IKV_OK) << ikv_last_error_message();
    for (size_t i = 0; i < n; i += 2) streamed[ev[i]].push_back(static_cast<int32_t>(ev[i + 1]));
  }
  std::vector<std::vector<int32_t>> out;
  for (int64_t id : ids) {
    int32_t st = -1;
    EXPECT_EQ(ikv_engine_turn_state(&st, g.e, id), IKV_OK);
    std::vector<int32_t> gen(64);
    size_t n = 0;
    EXPECT_EQ(ikv_engine_generated(gen.data(), gen.size(), &n, g.e, id), IKV_OK);
    gen.resize(n);
    if (st == IKV_TURN_FAILED) {
      char why[512];
      size_t len = 0;
      EXPECT_EQ(ikv_engine_failure(why, sizeof why, &len, g.e, id), IKV_OK);
      if (failures) failures->push_back(why);
      out.emplace_back();
    } else {
      EXPECT_EQ(st, IKV_TURN_DONE);
      EXPECT_EQ(gen, streamed[id]) << "what the steps streamed is what the turn generated";
      out.push_back(gen);
    }
  }
  if (keep != nullptr) {
    *keep = g.e;
    g.e = nullptr;
  }
  return out;
}

TEST(CapiEngine, EveryStrategyThatFindsMemoryMatchesTheUnlimitedRun) {
  REQUIRE_MODEL();
  const auto ps = prompts(6, 60);
  // stories260K: 5 layers, blocks of 16; 77 tokens per conversation = 5 blocks a layer; 60 blocks hold two.
  const auto ref = run(m, IKV_STRATEGY_AUTO, 1000, ps, nullptr);
  for (int32_t st : {IKV_STRATEGY_AUTO, IKV_STRATEGY_MOVE, IKV_STRATEGY_RECOMPUTE}) {
    std::vector<std::string> failures;
    ikv_engine *e = nullptr;
    const auto got = run(m, st, 60, ps, &failures, &e);
    EngineGuard g{e};
    EXPECT_TRUE(failures.empty()) << "strategy " << st << ": " << (failures.empty() ? "" : failures[0]);
    EXPECT_EQ(got, ref) << "strategy " << st;
    int64_t moves = 0, recomputes = 0;
    ASSERT_EQ(ikv_engine_stat(&moves, e, IKV_ENGINE_STAT_MOVES), IKV_OK);
    ASSERT_EQ(ikv_engine_stat(&recomputes, e, IKV_ENGINE_STAT_RECOMPUTES), IKV_OK);
    if (st == IKV_STRATEGY_MOVE) {
      EXPECT_GT(moves, 0);
    }
    if (st == IKV_STRATEGY_RECOMPUTE) {
      EXPECT_GT(recomputes, 0);
    }
    size_t len = 0;
    EXPECT_EQ(ikv_engine_report_json(nullptr, 0, &len, e), IKV_ERR_BUFFER_TOO_SMALL);
    std::string json(len + 1, '\0');
    ASSERT_EQ(ikv_engine_report_json(&json[0], json.size(), &len, e), IKV_OK);
    EXPECT_NE(json.find("\"decisions\":["), std::string::npos) << json;
    EXPECT_NE(json.find("\"prefill_tokens_per_s\""), std::string::npos) << json;
  }
}

TEST(CapiEngine, FailStrategyFailsTurnsWithAReason) {
  REQUIRE_MODEL();
  const auto ps = prompts(6, 60);
  std::vector<std::string> failures;
  run(m, IKV_STRATEGY_FAIL, 60, ps, &failures);
  ASSERT_FALSE(failures.empty());
  EXPECT_NE(failures[0].find("KV"), std::string::npos) << failures[0];
}

TEST(CapiEngine, BadCallsAreRefused) {
  REQUIRE_MODEL();
  EngineGuard g;
  EXPECT_EQ(ikv_engine_create(&g.e, m, nullptr, 7, nullptr), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(g.e, nullptr);
  EXPECT_EQ(ikv_engine_create(nullptr, m, nullptr, 0, nullptr), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_engine_create(&g.e, nullptr, nullptr, 0, nullptr), IKV_ERR_BAD_HANDLE);
  ikv_session_options o = f32_options();
  o.kv_pool_blocks = 200;
  ASSERT_EQ(ikv_engine_create(&g.e, m, &o, IKV_STRATEGY_AUTO, nullptr), IKV_OK) << ikv_last_error_message();
  int64_t id = 0;
  ASSERT_EQ(ikv_engine_open(&id, g.e, 0, 0, nullptr), IKV_OK);
  EXPECT_GT(id, 0);
  int64_t dummy = 0;
  EXPECT_EQ(ikv_engine_open(&dummy, g.e, 0, 16, nullptr), IKV_ERR_BAD_CONFIG);  // a limit needs a policy
  EXPECT_EQ(ikv_engine_open(&dummy, g.e, 0, -1, nullptr), IKV_ERR_INVALID_ARGUMENT);
  const int32_t good[] = {1, 5, 6};
  const int32_t bad[] = {1, 1 << 30};
  EXPECT_EQ(ikv_engine_submit(g.e, id, bad, 2, 4), IKV_ERR_OUT_OF_RANGE);
  EXPECT_EQ(ikv_engine_submit(g.e, id, nullptr, 3, 4), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_engine_submit(g.e, id, good, 0, 4), IKV_ERR_INVALID_ARGUMENT);  // an empty first turn
  EXPECT_EQ(ikv_engine_submit(g.e, id, good, 3, -2), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_engine_submit(g.e, id + 99, good, 3, 4), IKV_ERR_NOT_FOUND);
  ikv_session *not_engine = nullptr;
  ASSERT_EQ(ikv_session_create(&not_engine, m, nullptr), IKV_OK);
  EXPECT_EQ(ikv_engine_submit(reinterpret_cast<ikv_engine *>(not_engine), id, good, 3, 4), IKV_ERR_BAD_HANDLE);
  ikv_session_free(not_engine);
  int64_t pending = -1;
  ASSERT_EQ(ikv_engine_pending(&pending, g.e), IKV_OK);
  EXPECT_EQ(pending, 0) << "refused submits queue nothing";
  ASSERT_EQ(ikv_engine_submit(g.e, id, good, 3, 4), IKV_OK);
  EXPECT_EQ(ikv_engine_submit(g.e, id, good, 3, 4), IKV_ERR_BAD_STATE);
  size_t n = 99;
  EXPECT_EQ(ikv_engine_step(nullptr, 0, &n, g.e), IKV_ERR_BUFFER_TOO_SMALL);
  EXPECT_EQ(n, 2u);
  int64_t ev[2];
  EXPECT_EQ(ikv_engine_step(ev, 2, nullptr, g.e), IKV_ERR_INVALID_ARGUMENT);
  int32_t st = -1;
  EXPECT_EQ(ikv_engine_turn_state(&st, g.e, id + 99), IKV_ERR_NOT_FOUND);
  EXPECT_EQ(ikv_engine_stat(&dummy, g.e, 0), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_engine_stat(&dummy, g.e, 99), IKV_ERR_INVALID_ARGUMENT);
  int32_t where = -1;
  ASSERT_EQ(ikv_engine_where(&where, g.e, id), IKV_OK);
  EXPECT_EQ(where, IKV_WHERE_NONE);
  for (int i = 0; i < 10; ++i) ASSERT_EQ(ikv_engine_step(ev, 2, &n, g.e), IKV_OK);
  ASSERT_EQ(ikv_engine_where(&where, g.e, id), IKV_OK);
  EXPECT_EQ(where, IKV_WHERE_RESIDENT);
  int32_t gen[8];
  EXPECT_EQ(ikv_engine_generated(gen, 1, &n, g.e, id), IKV_ERR_BUFFER_TOO_SMALL);
  EXPECT_EQ(n, 4u);
  ASSERT_EQ(ikv_engine_close(g.e, id), IKV_OK);
  EXPECT_EQ(ikv_engine_close(g.e, id), IKV_ERR_NOT_FOUND);
  int64_t free_blocks = 0;
  ASSERT_EQ(ikv_engine_stat(&free_blocks, g.e, IKV_ENGINE_STAT_POOL_BLOCKS_FREE), IKV_OK);
  EXPECT_EQ(free_blocks, 200);
  ikv_engine *stale = g.e;
  ikv_engine_free(g.e);
  g.e = nullptr;
  EXPECT_EQ(ikv_engine_pending(&pending, stale), IKV_ERR_BAD_HANDLE);
  ikv_engine_free(stale);  // harmless
}

}  // namespace

namespace {

TEST(CapiEngine, PrefixCacheInADirectoryServesASecondEngine) {
  REQUIRE_MODEL();
  const auto ps = prompts(1, 300);  // entries are multiples of the prefill chunk (256)
  const std::string dir = ::testing::TempDir() + "/infokv-capi-prefix-" + std::to_string(infokv_test::test_seed());
  std::vector<int32_t> answers[2];
  for (int i = 0; i < 2; ++i) {
    ikv_session_options o = f32_options();
    o.kv_pool_blocks = 600;
    EngineGuard g;
    ASSERT_EQ(ikv_engine_create(&g.e, m, &o, IKV_STRATEGY_AUTO, nullptr), IKV_OK);
    ASSERT_EQ(ikv_engine_prefix_cache(g.e, 0, dir.c_str(), nullptr), IKV_OK) << ikv_last_error_message();
    EXPECT_EQ(ikv_engine_prefix_cache(g.e, -1, nullptr, nullptr), IKV_ERR_INVALID_ARGUMENT);
    int64_t id = 0;
    ASSERT_EQ(ikv_engine_open(&id, g.e, 0, 0, nullptr), IKV_OK);
    ASSERT_EQ(ikv_engine_submit(g.e, id, ps[0].data(), ps[0].size(), 8), IKV_OK);
    int64_t pending = 1, ev[2];
    size_t n = 0;
    while (pending > 0) {
      ASSERT_EQ(ikv_engine_step(ev, 2, &n, g.e), IKV_OK);
      ASSERT_EQ(ikv_engine_pending(&pending, g.e), IKV_OK);
    }
    answers[i].resize(8);
    ASSERT_EQ(ikv_engine_generated(answers[i].data(), 8, &n, g.e, id), IKV_OK);
    answers[i].resize(n);
    int64_t hits = -1, saves = -1;
    ASSERT_EQ(ikv_engine_stat(&hits, g.e, IKV_ENGINE_STAT_PREFIX_HITS), IKV_OK);
    ASSERT_EQ(ikv_engine_stat(&saves, g.e, IKV_ENGINE_STAT_PREFIX_SAVES), IKV_OK);
    EXPECT_EQ(hits, i);
    if (i == 0) {
      EXPECT_GE(saves, 1);
    }
  }
  EXPECT_EQ(answers[0], answers[1]);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace
