// Compression: each scorer against a naive reference on small random cases, the selection rules (window and
// protected spans survive, fair spans keep equal fractions), and end-to-end properties on stories260K.
#include <gtest/gtest.h>

#include <stdexcept>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "compress/policy_table.hpp"
#include "compress/scores.hpp"
#include "support/kv.hpp"
#include "model/model.hpp"
#include "sampling/sampler.hpp"
#include "session/generate.hpp"
#include "session/session.hpp"
#include "support/story_text.hpp"
#include "support/paths.hpp"
#include "util/error.hpp"
#include "support/stories_model.hpp"
#include "support/random_inputs.hpp"

using namespace infokv;

namespace {

constexpr auto stories = infokv_test::stories_model;

struct RandomLayer {
  KvConfig cfg;
  std::unique_ptr<KvCache> kv;
  std::vector<float> wq;
  std::vector<int32_t> wpos;
  int32_t n_heads = 4;
};

RandomLayer make_layer(std::mt19937 &rng, int32_t n, int32_t w) {
  if (w > n) throw std::invalid_argument("make_layer: a window of " + std::to_string(w) + " rows needs " + std::to_string(w) + " slots");
  RandomLayer r;
  r.cfg = infokv_test::kv_config(1, 2, 4, 3, 64, r.n_heads * 4);
  r.kv = std::make_unique<KvCache>(r.cfg);
  r.kv->add(0);
  std::normal_distribution<float> nd(0.0f, 1.5f);
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) pos[static_cast<size_t>(i)] = 2 * i;  // gaps: positions are not slot indices
  r.kv->append_slots(0, pos.data(), n);
  std::vector<float> k(static_cast<size_t>(n) * 8), v(k.size());
  for (auto &x : k) x = nd(rng);
  for (auto &x : v) x = nd(rng);
  cpu::kv_append(r.kv->view(0, 0), 0, k.data(), v.data(), n);
  for (int32_t t = 0; t < w; ++t) {
    for (int32_t i = 0; i < r.cfg.n_q_dim; ++i) r.wq.push_back(nd(rng));
    r.wpos.push_back(pos[static_cast<size_t>(n - w + t)]);
  }
  return r;
}

// Dense softmax attention from the window queries, averaged over queries and heads.
std::vector<double> naive_window_attention(RandomLayer &r, int32_t n) {
  const int32_t w = static_cast<int32_t>(r.wpos.size());
  PagedKv view = r.kv->view(0, 0);
  std::vector<double> acc(static_cast<size_t>(n), 0.0);
  std::vector<float> kbuf(4);
  for (int32_t t = 0; t < w; ++t) {
    const int32_t vis = n - w + t + 1;
    for (int32_t h = 0; h < r.n_heads; ++h) {
      std::vector<double> s(static_cast<size_t>(vis));
      for (int32_t j = 0; j < vis; ++j) {
        cpu::kv_read(kbuf.data(), view, j, h / 2, 0);
        double d = 0;
        for (int32_t i = 0; i < 4; ++i) d += static_cast<double>(r.wq[static_cast<size_t>(t * 16 + h * 4 + i)]) * kbuf[static_cast<size_t>(i)];
        s[static_cast<size_t>(j)] = d / 2.0;  // 1 / sqrt(head_dim)
      }
      const double mx = *std::max_element(s.begin(), s.end());
      double z = 0;
      for (double &x : s) z += (x = std::exp(x - mx));
      for (int32_t j = 0; j < vis; ++j) acc[static_cast<size_t>(j)] += s[static_cast<size_t>(j)] / z / (w * r.n_heads);
    }
  }
  return acc;
}

LayerScoreInput input_of(RandomLayer &r, const std::vector<ProtectedSpan> *spans = nullptr) {
  LayerScoreInput in;
  in.kv = r.kv->view(0, 0);
  in.slots = &r.kv->seq(0).layers[0];
  in.window_q = &r.wq;
  in.window_pos = &r.wpos;
  in.n_heads = r.n_heads;
  in.head_dim = 4;
  in.prefill = true;
  in.spans = spans;
  return in;
}

}  // namespace

TEST(Scores, PoolingMatchesNaiveAveragingWithZeroPadding) {
  std::mt19937 rng(infokv_test::test_seed());
  for (int trial = 0; trial < 50; ++trial) {
    const size_t n = 1 + rng() % 40;
    const int32_t kernel = 1 + 2 * static_cast<int32_t>(rng() % 4);
    std::vector<float> a(n);
    for (auto &x : a) x = std::uniform_real_distribution<float>(0, 1)(rng);
    std::vector<double> ref(n, 0.0);
    for (size_t i = 0; i < n; ++i) {
      for (int64_t j = static_cast<int64_t>(i) - kernel / 2; j <= static_cast<int64_t>(i) + kernel / 2; ++j)
        if (j >= 0 && j < static_cast<int64_t>(n)) ref[i] += a[static_cast<size_t>(j)];
      ref[i] /= kernel;
    }
    const double z = std::accumulate(ref.begin(), ref.end(), 0.0);
    const std::vector<float> got = pool_and_normalise(a, kernel);
    for (size_t i = 0; i < n; ++i) EXPECT_NEAR(got[i], ref[i] / z, 1e-5) << "n " << n << " kernel " << kernel;
  }
}

TEST(Scores, WindowAttentionMatchesDenseReference) {
  std::mt19937 rng(infokv_test::test_seed());
  for (int trial = 0; trial < 20; ++trial) {
    const int32_t n = 4 + static_cast<int32_t>(rng() % 30);
    const int32_t w = 1 + static_cast<int32_t>(rng() % std::min(n - 1, 6));
    RandomLayer r = make_layer(rng, n, w);
    const std::vector<double> ref = naive_window_attention(r, n);
    const std::vector<float> got = window_attention(input_of(r), n - w, w);
    ASSERT_EQ(got.size(), static_cast<size_t>(n - w));
    for (int32_t j = 0; j < n - w; ++j) EXPECT_NEAR(got[static_cast<size_t>(j)], ref[static_cast<size_t>(j)], 1e-5);
  }
}

TEST(Scores, AccumulatedAttentionOfOneQueryEqualsItsMeanProbabilities) {
  std::mt19937 rng(infokv_test::test_seed());
  RandomLayer r = make_layer(rng, 17, 1);
  PagedKv view = r.kv->view(0, 0);
  std::vector<float> acc(17, 0.0f), cnt(17, 0.0f), out(16), probs(17);
  cpu::paged_attention(out.data(), r.wq.data(), 1, r.n_heads, view, 17, 0.5f, acc.data(), cnt.data(), nullptr);
  cpu::attention_probs_mean(probs.data(), r.wq.data(), 1, r.n_heads, view, 17, 0.5f);
  for (int j = 0; j < 17; ++j) {
    EXPECT_NEAR(acc[static_cast<size_t>(j)], probs[static_cast<size_t>(j)], 1e-6);
    EXPECT_EQ(cnt[static_cast<size_t>(j)], 1.0f);
  }
}

// Context replay's scores: the largest softmax probability any head of any query gives each slot, against a
// float64 reference, on fresh random keys; slots at or past n_out untouched, earlier maxima kept.
TEST(Scores, AttentionProbsMaxMatchesFloat64) {
  std::mt19937 rng(infokv_test::test_seed());
  for (int trial = 0; trial < 30; ++trial) {
    const int32_t n = 5 + static_cast<int32_t>(rng() % 40);
    // The window rows come from the slots; several tiles of queries (kQueryTile = 8), and in a third of the trials
    // queries that would see past the view's slots (each sees them all).
    const int32_t n_q = 1 + static_cast<int32_t>(rng() % std::min(n, 20));
    const int32_t visible0 = std::max(1, n - n_q + 1 - static_cast<int32_t>(rng() % 3)) + (trial % 3 == 0 ? 2 : 0);
    const int32_t n_out = 1 + static_cast<int32_t>(rng() % n);
    RandomLayer r = make_layer(rng, n, n_q);
    PagedKv view = r.kv->view(0, 0);
    std::vector<float> got(static_cast<size_t>(n) + 1, 0.0f);
    std::uniform_real_distribution<float> u(0.0f, 0.2f);
    for (int32_t j = 0; j < n_out; ++j) got[static_cast<size_t>(j)] = u(rng);  // earlier maxima
    std::vector<double> want(got.begin(), got.end());
    got[static_cast<size_t>(n_out)] = -7.0f;  // past n_out: untouched
    const float scale = 0.7f;
    cpu::attention_probs_max(got.data(), n_out, r.wq.data(), n_q, r.n_heads, view, visible0, scale);
    std::vector<float> kbuf(4);
    for (int32_t t = 0; t < n_q; ++t) {
      const int32_t vis = std::min(n, visible0 + t);
      for (int32_t h = 0; h < r.n_heads; ++h) {
        std::vector<double> s(static_cast<size_t>(vis));
        double mx = -1e300, z = 0;
        for (int32_t j = 0; j < vis; ++j) {
          cpu::kv_read(kbuf.data(), view, j, h / 2, 0);
          double d = 0;
          for (int32_t i = 0; i < 4; ++i) d += static_cast<double>(r.wq[static_cast<size_t>((t * r.n_heads + h) * 4 + i)]) * kbuf[static_cast<size_t>(i)];
          s[static_cast<size_t>(j)] = d * scale;
          mx = std::max(mx, s[static_cast<size_t>(j)]);
        }
        for (double &x : s) z += (x = std::exp(x - mx));
        for (int32_t j = 0; j < std::min(vis, n_out); ++j)
          want[static_cast<size_t>(j)] = std::max(want[static_cast<size_t>(j)], s[static_cast<size_t>(j)] / z);
      }
    }
    for (int32_t j = 0; j < n_out; ++j) EXPECT_NEAR(got[static_cast<size_t>(j)], want[static_cast<size_t>(j)], 2e-6) << "slot " << j;
    EXPECT_EQ(got[static_cast<size_t>(n_out)], -7.0f);
  }
}

TEST(Scores, RankMaxKeepsWhatEitherRanksHigh) {
  const std::vector<float> a{0.9f, 0.1f, 0.2f, 0.05f, 0.2f}, b{0.0f, 0.0f, 0.5f, 0.7f, 0.1f};
  const std::vector<float> q = rank_max(a, b);
  // a's quantiles: 1, 0.4, 0.6 (tied), 0.2, 0.6; b's: 0.2 (tied), 0.2, 0.8, 1, 0.6.
  const std::vector<float> want{1.0f, 0.4f, 0.8f, 1.0f, 0.6f};
  ASSERT_EQ(q.size(), want.size());
  for (size_t i = 0; i < q.size(); ++i) EXPECT_FLOAT_EQ(q[i], want[i]) << i;
}

// Question::both: the window's rows and a probe's (rows after every slot, seeing all of them) are scored apart and
// combined by rank_max, whatever their row counts.
TEST(Scores, WindowAndProbeRowsCombineByRankMax) {
  std::mt19937 rng(infokv_test::test_seed());
  std::normal_distribution<float> nd(0.0f, 1.5f);
  for (int trial = 0; trial < 10; ++trial) {
    const int32_t n = 12 + static_cast<int32_t>(rng() % 20), w = 2 + static_cast<int32_t>(rng() % 4);
    const int32_t probe = 1 + static_cast<int32_t>(rng() % 7);
    RandomLayer r = make_layer(rng, n, w);
    const std::vector<float> window_q = r.wq;
    const std::vector<int32_t> window_pos = r.wpos;
    std::vector<float> probe_q;
    std::vector<int32_t> probe_pos;
    for (int32_t t = 0; t < probe; ++t) {
      for (int32_t i = 0; i < r.cfg.n_q_dim; ++i) probe_q.push_back(nd(rng));
      probe_pos.push_back(2 * n + t);
    }
    const int32_t n_cand = n - w;
    const std::vector<float> only_window = window_attention(input_of(r), n_cand, w);
    r.wq = probe_q;
    r.wpos = probe_pos;
    LayerScoreInput pin = input_of(r);
    pin.probe_rows = probe;
    const std::vector<float> only_probe = window_attention(pin, n_cand, w);
    r.wq = window_q;
    r.wq.insert(r.wq.end(), probe_q.begin(), probe_q.end());
    r.wpos = window_pos;
    r.wpos.insert(r.wpos.end(), probe_pos.begin(), probe_pos.end());
    LayerScoreInput both = input_of(r);
    both.probe_rows = probe;
    const std::vector<float> got = window_attention(both, n_cand, w);
    ASSERT_EQ(got.size(), static_cast<size_t>(n_cand));
    const std::vector<float> want = rank_max(only_window, only_probe);
    for (int32_t j = 0; j < n_cand; ++j) EXPECT_FLOAT_EQ(got[static_cast<size_t>(j)], want[static_cast<size_t>(j)]);
  }
}

// SnapKV pools its window's attention with the configured kernel and a probe's with at least
// defaults::pool_kernel_probe (a needle sentence's length), so that a later question finds whole sentences.
TEST(Scores, ProbeAttentionIsPooledWide) {
  std::mt19937 rng(infokv_test::test_seed());
  for (int trial = 0; trial < 5; ++trial) {
    const int32_t n = 30 + static_cast<int32_t>(rng() % 30), w = 4;
    RandomLayer r = make_layer(rng, n, w);
    CompressionConfig c;
    c.pool_kernel_prefill = 3;
    LayerScoreInput in = input_of(r);
    const int32_t n_cand = n - w;
    const std::vector<float> window = snapkv_scores(c, in, n_cand, w);
    const std::vector<float> want_window = pool_and_normalise(window_attention(in, n_cand, w), 3);
    in.probe_rows = w;  // the same rows read as a probe's
    EXPECT_EQ(pool_kernel(c, in), defaults::pool_kernel_probe);
    const std::vector<float> probe = snapkv_scores(c, in, n_cand, w);
    const std::vector<float> want_probe = pool_and_normalise(window_attention(in, n_cand, w), defaults::pool_kernel_probe);
    for (int32_t j = 0; j < n_cand; ++j) {
      EXPECT_FLOAT_EQ(window[static_cast<size_t>(j)], want_window[static_cast<size_t>(j)]);
      EXPECT_FLOAT_EQ(probe[static_cast<size_t>(j)], want_probe[static_cast<size_t>(j)]);
    }
    c.pool_kernel_prefill = 31;  // a wider configured kernel stays
    EXPECT_EQ(pool_kernel(c, in), 31);
  }
}

TEST(Scores, InfoKvMixMatchesFormula) {
  std::mt19937 rng(infokv_test::test_seed());
  std::uniform_real_distribution<float> u(0, 1);
  for (int trial = 0; trial < 20; ++trial) {
    const size_t n = 1 + rng() % 30;
    std::vector<float> a(n), d(n), h(n);
    for (size_t i = 0; i < n; ++i) {
      a[i] = u(rng);
      d[i] = u(rng);
      h[i] = 5 * u(rng);
    }
    const float alpha = u(rng), tau = 2 * u(rng);
    double z = 0;
    for (size_t i = 0; i < n; ++i) z += std::exp((d[i] + tau) * h[i]);
    const std::vector<float> s = infokv_mix(a, d, h, alpha, tau);
    for (size_t i = 0; i < n; ++i)
      EXPECT_NEAR(s[i], alpha * a[i] + (1 - alpha) * std::exp((d[i] + tau) * h[i]) / z, 1e-5);
  }
}

TEST(Scores, TopKBreaksTiesTowardTheLaterToken) {
  std::vector<float> s{0.5f, 0.9f, 0.5f, 0.1f, 0.5f};
  EXPECT_EQ(top_k_later_ties(s, {0, 1, 2, 3, 4}, 2), (std::vector<int32_t>{1, 4}));
  EXPECT_EQ(top_k_later_ties(s, {0, 2, 3}, 2), (std::vector<int32_t>{2, 0}));
}

TEST(Scores, PyramidBudgetsShrinkUpwardAndKeepTheTotal) {
  CompressionConfig c;
  c.policy = PolicyKind::pyramidkv;
  c.budget_tokens = 400;
  c.window = 8;
  const std::vector<int32_t> counts(10, 2000);
  const std::vector<int32_t> b = layer_budgets(c, counts, 400);
  for (size_t l = 1; l < b.size(); ++l) EXPECT_LE(b[l], b[l - 1]);
  EXPECT_GT(b.front(), b.back());
  EXPECT_NEAR(std::accumulate(b.begin(), b.end(), 0), 4000, 10);
  // When the top layer would fall below the window, uniform (as kvpress does).
  c.window = 32;
  const std::vector<int32_t> small = layer_budgets(c, std::vector<int32_t>(5, 200), 50);
  for (int32_t x : small) EXPECT_EQ(x, 50);
}

TEST(Scores, GlobalBudgetsFollowTheScoresAcrossLayersInWholeBlocks) {
  const float inf = std::numeric_limits<float>::infinity();
  // Layer 0's tokens all outrank layer 1's but for layer 1's two always-kept slots: of the 16 tokens two uniform
  // budgets of 8 hold (4 blocks of 4), layer 1 wins those 2 (under one block: it keeps its floor of one) and layer 0
  // the other 14 (three whole blocks).
  std::vector<std::vector<float>> s(2);
  s[0].assign(16, 1.0f);
  s[1].assign(16, 0.0f);
  s[1][14] = s[1][15] = inf;
  EXPECT_EQ(global_layer_budgets(s, {16, 16}, {8, 8}, 4), (std::vector<int32_t>{12, 4}));
  // Equal scores everywhere: ties go to the later slot, then the later layer, and the blocks stay uniform in total.
  s[0].assign(16, 0.5f);
  s[1].assign(16, 0.5f);
  const std::vector<int32_t> even = global_layer_budgets(s, {16, 16}, {8, 8}, 4);
  EXPECT_EQ(even[0] + even[1], 16);
  // A layer holding fewer tokens than a block keeps them all, never more.
  s[1].assign(3, 0.0f);
  EXPECT_EQ(global_layer_budgets(s, {16, 3}, {8, 8}, 4), (std::vector<int32_t>{8, 3}));
  EXPECT_THROW(global_layer_budgets(s, {16, 4}, {8, 8}, 4), Error);  // one score per slot
  EXPECT_THROW(global_layer_budgets(s, {16}, {8}, 4), Error);         // one entry per layer

  std::mt19937 rng(infokv_test::test_seed());
  for (int trial = 0; trial < 200; ++trial) {
    const int32_t bs = 1 + static_cast<int32_t>(rng() % 16), L = 1 + static_cast<int32_t>(rng() % 8);
    std::vector<int32_t> counts, budgets;
    std::vector<std::vector<float>> sc;
    int64_t uniform_blocks = 0;
    for (int32_t l = 0; l < L; ++l) {
      counts.push_back(static_cast<int32_t>(rng() % 300));
      budgets.push_back(1 + static_cast<int32_t>(rng() % 120));
      uniform_blocks += (std::min(budgets.back(), counts.back()) + bs - 1) / bs;
      std::vector<float> v(static_cast<size_t>(counts.back()));
      for (float &x : v) x = static_cast<float>(rng() % 1000) / 1000.0f;
      if (!v.empty() && rng() % 4 == 0) v.back() = inf;
      sc.push_back(std::move(v));
    }
    const std::vector<int32_t> b = global_layer_budgets(sc, counts, budgets, bs);
    ASSERT_EQ(b.size(), counts.size());
    int64_t blocks = 0, floors = 0;
    for (int32_t l = 0; l < L; ++l) {
      const int32_t n = counts[static_cast<size_t>(l)], x = b[static_cast<size_t>(l)];
      EXPECT_LE(x, n);
      EXPECT_GE(x, std::min(n, bs));  // at least a block
      EXPECT_TRUE(x == n || x % bs == 0) << x << " of " << n << " in blocks of " << bs;
      blocks += (x + bs - 1) / bs;
      floors += n > 0 ? 1 : 0;
    }
    EXPECT_EQ(blocks, std::max(uniform_blocks, floors));  // the uniform budgets' blocks, unless the floors need more
  }
}

TEST(Selection, KeepsWindowProtectedSpansAndBudget) {
  std::mt19937 rng(infokv_test::test_seed());
  for (PolicyKind p : {PolicyKind::snapkv, PolicyKind::infokv, PolicyKind::h2o, PolicyKind::streaming, PolicyKind::tova}) {
    for (int trial = 0; trial < 10; ++trial) {
      const int32_t n = 20 + static_cast<int32_t>(rng() % 30);
      RandomLayer r = make_layer(rng, n, 5);
      CompressionConfig c;
      c.policy = p;
      c.window = 5;
      const int32_t budget = 10 + static_cast<int32_t>(rng() % 8);
      std::vector<ProtectedSpan> spans{{0, 6, false}};  // positions 0..5 -> slots 0..2
      const std::vector<int32_t> keep = select_keep(c, input_of(r, &spans), budget);
      EXPECT_EQ(static_cast<int32_t>(keep.size()), budget) << policy_name(p);
      EXPECT_TRUE(std::is_sorted(keep.begin(), keep.end()));
      for (int32_t j : {0, 1, 2}) EXPECT_TRUE(std::binary_search(keep.begin(), keep.end(), j)) << policy_name(p) << " dropped protected slot " << j;
      const int32_t w = p == PolicyKind::tova ? 1 : p == PolicyKind::streaming ? 0 : 5;
      for (int32_t j = n - w; j < n; ++j) EXPECT_TRUE(std::binary_search(keep.begin(), keep.end(), j)) << policy_name(p) << " dropped window slot " << j;
    }
  }
}

TEST(Selection, SnapKvKeepsTheHighestPooledScores) {
  std::mt19937 rng(infokv_test::test_seed());
  const int32_t n = 30, w = 4, budget = 12;
  RandomLayer r = make_layer(rng, n, w);
  CompressionConfig c;
  c.policy = PolicyKind::snapkv;
  c.window = w;
  const std::vector<double> dense = naive_window_attention(r, n);
  std::vector<float> cand(dense.begin(), dense.begin() + (n - w));
  const std::vector<float> pooled = pool_and_normalise(cand, c.pool_kernel_prefill);
  std::vector<int32_t> order(static_cast<size_t>(n - w));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return pooled[static_cast<size_t>(a)] != pooled[static_cast<size_t>(b)] ? pooled[static_cast<size_t>(a)] > pooled[static_cast<size_t>(b)] : a > b;
  });
  std::vector<int32_t> expect(order.begin(), order.begin() + (budget - w));
  for (int32_t j = n - w; j < n; ++j) expect.push_back(j);
  std::sort(expect.begin(), expect.end());
  EXPECT_EQ(select_keep(c, input_of(r), budget), expect);
}

TEST(Selection, FairSpansKeepEqualFractions) {
  std::mt19937 rng(infokv_test::test_seed());
  RandomLayer r = make_layer(rng, 44, 4);  // positions 0, 2, ..., 86
  CompressionConfig c;
  c.policy = PolicyKind::snapkv;
  c.window = 4;
  std::vector<ProtectedSpan> spans{{0, 40, true}, {40, 80, true}};  // 20 candidate slots each
  const std::vector<int32_t> keep = select_keep(c, input_of(r, &spans), 24);  // 20 of 40 candidates: half each
  int first = 0, second = 0;
  for (int32_t j : keep) {
    if (j < 20) ++first;
    else if (j < 40) ++second;
  }
  EXPECT_EQ(first, 10);
  EXPECT_EQ(second, 10);
}

namespace {

std::vector<float> run_with(const CompressionConfig &c, const std::vector<int32_t> &prefix, const std::vector<int32_t> &cont,
                            int64_t *bytes_after = nullptr, Session **keep = nullptr) {
  SessionOptions o;
  o.n_threads = 1;
  o.compression = c;
  static std::unique_ptr<Session> holder;
  holder = std::make_unique<Session>(stories(), o);
  Session &s = *holder;
  const int32_t id = s.add_sequence();
  std::vector<BatchToken> b;
  for (int32_t t : prefix) b.push_back({id, t, false});
  s.decode(b);
  if (bytes_after) *bytes_after = s.info(id).bytes;
  std::vector<BatchToken> cb;
  for (int32_t t : cont) cb.push_back({id, t, true});
  s.decode(cb);
  if (keep) *keep = &s;
  return s.batch_logits();
}

std::vector<int32_t> text_tokens(size_t n) { return infokv_test::story_tokens(stories()->tokenizer(), n); }

}  // namespace

TEST(Compression, NoneAndFullBudgetReproduceUncompressedLogitsExactly) {
  const std::vector<int32_t> toks = text_tokens(100);
  const std::vector<int32_t> prefix(toks.begin(), toks.begin() + 70), cont(toks.begin() + 70, toks.end());
  const std::vector<float> ref = run_with(CompressionConfig{}, prefix, cont);
  for (PolicyKind p : {PolicyKind::infokv, PolicyKind::snapkv, PolicyKind::h2o, PolicyKind::streaming, PolicyKind::tova, PolicyKind::pyramidkv,
                        PolicyKind::auto_}) {
    CompressionConfig c;
    c.policy = p;
    c.budget_fraction = 1.0;
    EXPECT_EQ(run_with(c, prefix, cont), ref) << policy_name(p) << " at 100% must not change the logits";
  }
}

TEST(Compression, QuarterBudgetFreesThreeQuartersOfTheBlocks) {
  const std::vector<int32_t> toks = text_tokens(140);
  const std::vector<int32_t> prefix(toks.begin(), toks.begin() + 128), cont(toks.begin() + 128, toks.end());
  int64_t full = 0, compressed = 0;
  run_with(CompressionConfig{}, prefix, cont, &full);
  for (PolicyKind p : {PolicyKind::infokv, PolicyKind::snapkv, PolicyKind::h2o, PolicyKind::streaming, PolicyKind::tova, PolicyKind::pyramidkv,
                        PolicyKind::auto_}) {
    CompressionConfig c;
    c.policy = p;
    c.budget_fraction = 0.25;
    const std::vector<float> a = run_with(c, prefix, cont, &compressed);
    EXPECT_LE(static_cast<double>(compressed), 0.30 * static_cast<double>(full)) << policy_name(p);
    EXPECT_EQ(run_with(c, prefix, cont), a) << policy_name(p) << " must be deterministic";
  }
}

namespace {

// Options with InfoKV at a fractional (< 1) or token (>= 1) budget, compressing every `interval` tokens.
SessionOptions infokv_options(double budget, int32_t interval) {
  SessionOptions o;
  o.compression.policy = PolicyKind::infokv;
  if (budget < 1) o.compression.budget_fraction = budget;
  else o.compression.budget_tokens = static_cast<int32_t>(budget);
  o.compression.interval = interval;
  return o;
}

}  // namespace

TEST(Compression, ProtectedPrefixSurvivesEveryLayer) {
  Session s(stories(), infokv_options(0.3, 16));
  const int32_t id = s.add_sequence();
  s.compressor().protect(id, ProtectedSpan{0, 20, false});
  Sampler smp(SamplerParams{});
  generate(s, id, text_tokens(60), 80, smp, nullptr);
  EXPECT_GE(s.compressor().compressions(id), 2);
  const SeqCache &c = s.kv().seq(id);
  infokv_test::expect_positions_kept(c, 0, 20);
  for (const LayerSlots &L : c.layers) EXPECT_LT(L.n(), c.length);
  s.kv().check_invariants();
}

TEST(Compression, CompressedGenerationIsDeterministic) {
  auto run = [] {
    Session s(stories(), infokv_options(24, 8));
    const int32_t id = s.add_sequence();
    SamplerParams sp;
    sp.seed = 7;
    Sampler smp(sp);
    return generate(s, id, text_tokens(40), 60, smp, nullptr).tokens;
  };
  EXPECT_EQ(run(), run());
}

TEST(Compression, FullPoolTriggersCompressionInsteadOfFailing) {
  SessionOptions o;
  o.block_size = 4;
  o.kv_pool_blocks = 5 * 12;  // 48 tokens per layer
  o.compression.policy = PolicyKind::snapkv;
  o.compression.budget_tokens = 16;
  o.compression.interval = 1 << 20;
  Session s(stories(), o);
  const int32_t id = s.add_sequence();
  Sampler smp(SamplerParams{});
  GenerateResult r = generate(s, id, text_tokens(30), 100, smp, nullptr);
  EXPECT_EQ(r.tokens.size() + (r.stopped_by_eos ? 1 : 0) > 0, true);
  EXPECT_GE(s.compressor().compressions(id), 2);
  // Without a policy the same pool fails with KV full.
  SessionOptions o2 = o;
  o2.compression = CompressionConfig{};
  Session s2(stories(), o2);
  const int32_t id2 = s2.add_sequence();
  Sampler smp2(SamplerParams{});
  EXPECT_THROW(generate(s2, id2, text_tokens(60), 100, smp2, nullptr), Error);
}

// SessionOptions::protect_prefix protects the start of every sequence add_sequence() makes; forks keep their
// source's spans (no second one), and a negative prefix is refused when the session is made.
TEST(Protection, ProtectPrefixCoversEveryAddedSequence) {
  SessionOptions o;
  o.protect_prefix = 5;
  Session s(stories(), o);
  const int32_t a = s.add_sequence(), b = s.add_sequence();
  for (int32_t id : {a, b}) {
    ASSERT_EQ(s.compressor().spans(id).size(), 1u);
    EXPECT_EQ(s.compressor().spans(id)[0].begin, 0);
    EXPECT_EQ(s.compressor().spans(id)[0].end, 5);
    EXPECT_FALSE(s.compressor().spans(id)[0].fair);
  }
  s.compressor().protect(a, ProtectedSpan{10, 12, true});
  const int32_t f = s.fork_sequence(a);
  EXPECT_EQ(s.compressor().spans(f).size(), 2u);
  SessionOptions none;
  Session plain(stories(), none);
  EXPECT_TRUE(plain.compressor().spans(plain.add_sequence()).empty());
  SessionOptions bad;
  bad.protect_prefix = -1;
  EXPECT_THROW(Session(stories(), bad), Error);
}
