// The C ABI's sampler and generation calls (infokv/sampler.h): options of a later revision, a streaming callback
// that cancels, greedy generation against the reference, threads with their own sessions sharing one model, and
// generation into a full pool.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "infokv/infokv.h"
#include "support/capi.hpp"
#include "support/util.hpp"
#include "util/version.hpp"

using namespace infokv_capi_test;  // NOLINT: the shared C ABI test helpers

// A caller built against a later header passes a larger ikv_sampler_options (its new fields after `seed`): accepted,
// with the revision-1 fields read. One smaller than revision 1 is refused.
TEST(Capi, SamplerOptionsFromALaterRevisionAreReadAndAShortOneIsRefused) {
  struct Later {
    ikv_sampler_options v1;
    uint64_t added;
  } later{};
  later.v1 = IKV_SAMPLER_OPTIONS_INIT;
  later.v1.struct_size = static_cast<uint32_t>(sizeof later);
  later.v1.version = IKV_SAMPLER_OPTIONS_VERSION + 1;
  later.added = 0xABABABABABABABABull;
  ikv_sampler *sm = nullptr;
  ASSERT_EQ(ikv_sampler_create(&sm, &later.v1), IKV_OK) << ikv_last_error_message();
  ikv_sampler_free(sm);
  ikv_sampler_options short_v1 = IKV_SAMPLER_OPTIONS_INIT;
  short_v1.struct_size = static_cast<uint32_t>(offsetof(ikv_sampler_options, seed) + sizeof(uint64_t) - 1);
  sm = reinterpret_cast<ikv_sampler *>(0x1);
  EXPECT_EQ(ikv_sampler_create(&sm, &short_v1), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sm, nullptr);
}

// ---- NULL arguments and handles ----

namespace {
struct StreamState {
  int calls = 0;
  int stop_after = 3;
  std::vector<int32_t> tokens;
  std::string text;
};
int32_t stream_cb(void *user_data, int32_t token, const char *text, size_t len) {
  auto *st = static_cast<StreamState *>(user_data);
  ++st->calls;
  if (token >= 0) st->tokens.push_back(token);
  st->text.append(text, len);
  return st->calls >= st->stop_after ? 1 : 0;
}
}  // namespace

TEST(Capi, StreamingCallbackCancelsAfterThreeTokens) {
  REQUIRE_MODEL();
  SessionGuard g;
  ikv_session_options o = f32_options();
  ASSERT_EQ(ikv_session_create(&g.s, m, &o), IKV_OK);
  ikv_sampler_options so = IKV_SAMPLER_OPTIONS_INIT;
  so.temperature = 0;
  ikv_sampler *sm = nullptr;
  ASSERT_EQ(ikv_sampler_create(&sm, &so), IKV_OK);
  const int32_t prompt[] = {1, 403, 407, 261, 378};
  StreamState st;
  std::vector<int32_t> out(16, -1);
  size_t n = 0;
  EXPECT_EQ(ikv_generate(out.data(), out.size(), &n, g.s, 0, prompt, 5, 16, sm, stream_cb, &st), IKV_ERR_CANCELLED);
  EXPECT_GT(std::strlen(ikv_last_error_message()), 0u);
  EXPECT_EQ(n, 3u);
  EXPECT_EQ(st.calls, 3);
  const std::vector<int32_t> first3(kGreedyOnce.begin(), kGreedyOnce.begin() + 3);
  EXPECT_EQ(st.tokens, first3);
  EXPECT_EQ(std::vector<int32_t>(out.begin(), out.begin() + 3), first3);
  EXPECT_EQ(out[3], -1);
  EXPECT_EQ(st.text, ", there was");
  // The prompt and every generated token stay in the sequence, decoded, the last one too.
  const int64_t len = length_of(g.s, 0);
  EXPECT_EQ(len, 5 + 3);
  // Generation continues from there when called again without a prompt.
  size_t n2 = 0;
  std::vector<int32_t> more(8);
  ASSERT_EQ(ikv_generate(more.data(), more.size(), &n2, g.s, 0, nullptr, 0, 3, sm, nullptr, nullptr), IKV_OK);
  EXPECT_EQ(n2, 3u);
  const size_t offset = static_cast<size_t>(len - 5);
  EXPECT_EQ(std::vector<int32_t>(more.begin(), more.begin() + 3),
            std::vector<int32_t>(kGreedyOnce.begin() + static_cast<std::ptrdiff_t>(offset),
                                 kGreedyOnce.begin() + static_cast<std::ptrdiff_t>(offset) + 3));
  ikv_sampler_free(sm);
}

TEST(Capi, GreedyGenerationMatchesTheReference) {
  REQUIRE_MODEL();
  int32_t st = 0;
  EXPECT_EQ(greedy_once_upon(m, 40, &st), kGreedyOnce);
  EXPECT_EQ(st, IKV_OK);
}

TEST(CapiConcurrency, ThreadsWithTheirOwnSessionsShareOneModel) {
  REQUIRE_MODEL();
  constexpr int kThreads = 4;
  std::vector<std::vector<int32_t>> outs(kThreads);
  std::vector<int32_t> statuses(kThreads, -999);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 3; ++rep) {
        outs[static_cast<size_t>(t)] = greedy_once_upon(m, 40, &statuses[static_cast<size_t>(t)]);
        if (outs[static_cast<size_t>(t)] != kGreedyOnce) break;
      }
    });
  for (auto &th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(statuses[static_cast<size_t>(t)], IKV_OK) << "thread " << t;
    EXPECT_EQ(outs[static_cast<size_t>(t)], kGreedyOnce) << "thread " << t;
  }
}

// Generating 400 tokens into a 160-token pool: ikv_generate returns KV full and reports the tokens it decoded
// (out_count was 0 while 60 tokens stayed in the sequence), and those tokens are exactly what the sequence gained.
TEST(Capi, GenerateIntoAFullPoolReportsWhatItDecoded) {
  REQUIRE_MODEL();
  SessionGuard g;
  ASSERT_EQ(create_small_pool(&g.s, m, 16, 10), IKV_OK);  // 160 tokens per layer
  ikv_sampler_options so = IKV_SAMPLER_OPTIONS_INIT;
  so.temperature = 0.0f;
  ikv_sampler *sm = nullptr;
  ASSERT_EQ(ikv_sampler_create(&sm, &so), IKV_OK);
  const int32_t prompt[] = {1, 403, 407, 261, 378};
  std::vector<int32_t> out(400, -1);
  size_t made = 0;
  const int32_t st = ikv_generate(out.data(), out.size(), &made, g.s, 0, prompt, 5, 400, sm, nullptr, nullptr);
  ikv_sampler_free(sm);
  if (st == IKV_OK) GTEST_SKIP() << "greedy story ended before the pool filled";
  ASSERT_EQ(st, IKV_ERR_KV_FULL) << ikv_last_error_message();
  EXPECT_GT(made, 0u);
  EXPECT_EQ(length_of(g.s, 0), static_cast<int64_t>(5 + made));
}
