// The auto policy: its loss curves against a naive recomputation on random layers, the budget spread against brute
// force on random convex curves, and on stories260K: the bytes of a uniform budget, the report, the quality target,
// protected spans.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <numeric>
#include <random>

#include "compress/policy_table.hpp"
#include "compress/auto_policy.hpp"
#include "support/kv.hpp"
#include "model/model.hpp"
#include "sampling/sampler.hpp"
#include "session/generate.hpp"
#include "session/session.hpp"
#include "support/story_text.hpp"
#include "support/paths.hpp"
#include "support/random_inputs.hpp"
#include "support/stories_model.hpp"

using namespace infokv;

namespace {

constexpr auto stories = infokv_test::stories_model;

// A random layer of n slots at positions 0, 3, 6, ... with `rows` window query rows (the latest positions).
struct Layer {
  int32_t n = 0, nh = 4, kvh = 2, hd = 8;
  std::vector<float> k, v, q;
  std::vector<int32_t> wpos;
  LayerSlots slots;
};

Layer random_layer(std::mt19937 &rng, int32_t n, int32_t rows) {
  Layer L;
  L.n = n;
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int32_t i = 0; i < n; ++i) L.slots.pos.push_back(3 * i);
  for (auto &ch : L.slots.channels) ch.assign(static_cast<size_t>(n), 0.0f);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (int32_t i = 0; i < n; ++i) {
    L.slots.channels[kChanAttnSum][static_cast<size_t>(i)] = u(rng) * static_cast<float>(n - i);
    L.slots.channels[kChanAttnCount][static_cast<size_t>(i)] = static_cast<float>(n - i);
    L.slots.channels[kChanEntropy][static_cast<size_t>(i)] = 3.0f * u(rng);
    L.slots.channels[kChanRepChange][static_cast<size_t>(i)] = u(rng);
  }
  L.k.resize(static_cast<size_t>(n * L.kvh * L.hd));
  L.v.resize(L.k.size());
  for (auto &x : L.k) x = 1.5f * nd(rng);
  for (auto &x : L.v) x = nd(rng);
  for (int32_t r = 0; r < rows; ++r) {
    for (int32_t i = 0; i < L.nh * L.hd; ++i) L.q.push_back(1.5f * nd(rng));
    L.wpos.push_back(L.slots.pos[static_cast<size_t>(n - rows + r)]);
  }
  return L;
}

AutoLayerInput input_of(const Layer &L) {
  AutoLayerInput in;
  in.score.slots = &L.slots;
  in.score.window_q = &L.q;
  in.score.window_pos = &L.wpos;
  in.score.n_heads = L.nh;
  in.score.head_dim = L.hd;
  in.k = L.k.data();
  in.v = L.v.data();
  in.n_kv_heads = L.kvh;
  return in;
}

// The relative attention-output error of query rows [r0, r1) of the window when only `kept` slots remain.
double naive_loss(const Layer &L, const std::vector<char> &kept, int32_t r0, int32_t r1) {
  const int32_t group = L.nh / L.kvh;
  const double scale = 1.0 / std::sqrt(static_cast<double>(L.hd));
  double err = 0, norm = 0;
  const auto rows = static_cast<int32_t>(L.wpos.size());
  for (int32_t r = r0; r < r1; ++r) {
    const int32_t pos = L.wpos[static_cast<size_t>(r)];
    for (int32_t h = 0; h < L.nh; ++h) {
      const float *q = L.q.data() + (static_cast<size_t>(r) * L.nh + h) * L.hd;
      std::vector<double> full(static_cast<size_t>(L.hd), 0.0), part(static_cast<size_t>(L.hd), 0.0);
      double zf = 0, zp = 0;
      for (int32_t j = 0; j < L.n && L.slots.pos[static_cast<size_t>(j)] <= pos; ++j) {
        const float *k = L.k.data() + (static_cast<size_t>(j) * L.kvh + h / group) * L.hd;
        const float *v = L.v.data() + (static_cast<size_t>(j) * L.kvh + h / group) * L.hd;
        double d = 0;
        for (int32_t t = 0; t < L.hd; ++t) d += static_cast<double>(q[t]) * k[t];
        const double e = std::exp(d * scale);
        zf += e;
        for (int32_t t = 0; t < L.hd; ++t) full[static_cast<size_t>(t)] += e * v[t];
        if (kept[static_cast<size_t>(j)]) {
          zp += e;
          for (int32_t t = 0; t < L.hd; ++t) part[static_cast<size_t>(t)] += e * v[t];
        }
      }
      for (int32_t t = 0; t < L.hd; ++t) {
        const double f = full[static_cast<size_t>(t)] / zf, p = part[static_cast<size_t>(t)] / zp;
        err += (f - p) * (f - p);
        norm += f * f;
      }
    }
  }
  (void)rows;
  return err / norm;
}

int64_t blocks_of(int32_t tokens, int32_t bs) { return (tokens + bs - 1) / bs; }

}  // namespace

// Recency and key norm rank without the window rows, so their kept sets are known exactly; the curve at each grid
// budget must be the naive loss of that set on the held-out rows.
TEST(AutoPolicy, LossCurvesMatchANaiveRecomputation) {
  std::mt19937 rng(infokv_test::test_seed());
  for (int trial = 0; trial < 20; ++trial) {
    const int32_t n = 20 + static_cast<int32_t>(rng() % 60), window = 2 + static_cast<int32_t>(rng() % 8);
    const int32_t rows = 1 + static_cast<int32_t>(rng() % 12), bs = 1 + static_cast<int32_t>(rng() % 8);
    const Layer L = random_layer(rng, n, std::min(rows, n));
    CompressionConfig c;
    c.policy = PolicyKind::auto_;
    c.sink = static_cast<int32_t>(rng() % 5);
    const AutoLayerCurves cv = auto_measure_layer(c, input_of(L), window, bs);
    ASSERT_EQ(cv.grid.front(), window);
    ASSERT_EQ(cv.grid.back(), n);
    // the rows auto uses: the latest min(rows, window); the held-out ones: the latest max(1, min(8, used / 2))
    const int32_t used = std::min(static_cast<int32_t>(L.wpos.size()), window);
    const int32_t H = used > 1 ? std::max(1, std::min(8, used / 2)) : used;
    const auto total = static_cast<int32_t>(L.wpos.size());
    const int32_t n_cand = n - window;
    for (Evidence ev : {Evidence::recency, Evidence::key_norm}) {
      std::vector<int32_t> order(static_cast<size_t>(n_cand));
      std::iota(order.begin(), order.end(), 0);
      std::vector<double> score(static_cast<size_t>(n_cand));
      for (int32_t j = 0; j < n_cand; ++j) {
        if (ev == Evidence::recency) {
          score[static_cast<size_t>(j)] = j < c.sink ? 1e30 : j;
        } else {
          double sq = 0;
          for (int32_t t = 0; t < L.kvh * L.hd; ++t) sq += static_cast<double>(L.k[static_cast<size_t>(j * L.kvh * L.hd + t)]) * L.k[static_cast<size_t>(j * L.kvh * L.hd + t)];
          score[static_cast<size_t>(j)] = -std::sqrt(sq / L.kvh);
        }
      }
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        return score[static_cast<size_t>(a)] != score[static_cast<size_t>(b)] ? score[static_cast<size_t>(a)] > score[static_cast<size_t>(b)] : a > b;
      });
      for (size_t g = 0; g < cv.grid.size(); ++g) {
        std::vector<char> kept(static_cast<size_t>(n), 0);
        for (int32_t j = n_cand; j < n; ++j) kept[static_cast<size_t>(j)] = 1;
        for (int32_t m = 0; m < cv.grid[g] - window; ++m) kept[static_cast<size_t>(order[static_cast<size_t>(m)])] = 1;
        const double want = naive_loss(L, kept, total - H, total);
        const double got = cv.loss[static_cast<size_t>(ev)][g];
        EXPECT_NEAR(got, want, 1e-4 * std::max(1.0, want)) << evidence_name(ev) << " trial " << trial << " budget " << cv.grid[g];
      }
      EXPECT_NEAR(cv.loss[static_cast<size_t>(ev)].back(), 0.0, 1e-6) << "keeping everything loses nothing";
    }
  }
}

// A probe question's rows (Question::later) rank by what any one head reads: per head the mean of its probabilities
// over the probe's rows, normalised over the candidates, the most any head gives, then pooled over at least
// defaults::pool_kernel_probe positions. Against a float64 recomputation on random layers.
TEST(AutoPolicy, ProbeEvidenceIsTheMostAnyHeadReadsPooledWide) {
  std::mt19937 rng(infokv_test::test_seed());
  for (int trial = 0; trial < 10; ++trial) {
    const int32_t n = 40 + static_cast<int32_t>(rng() % 60), window = 2 + static_cast<int32_t>(rng() % 6);
    const int32_t probe = 1 + static_cast<int32_t>(rng() % 6);
    Layer L = random_layer(rng, n, 1);
    L.q.clear();
    L.wpos.clear();
    std::normal_distribution<float> nd(0.0f, 1.5f);
    for (int32_t r = 0; r < probe; ++r) {  // after every slot: the probe runs after the sequence
      for (int32_t i = 0; i < L.nh * L.hd; ++i) L.q.push_back(nd(rng));
      L.wpos.push_back(L.slots.pos.back() + 1 + r);
    }
    AutoLayerInput in = input_of(L);
    in.score.probe_rows = probe;
    CompressionConfig c;
    c.policy = PolicyKind::auto_;
    const AutoLayerCurves cv = auto_measure_layer(c, in, window, 4);
    const int32_t n_cand = n - window, group = L.nh / L.kvh;
    std::vector<double> most(static_cast<size_t>(n_cand), 0.0);
    for (int32_t h = 0; h < L.nh; ++h) {
      std::vector<double> mean(static_cast<size_t>(n_cand), 0.0);
      for (int32_t r = 0; r < probe; ++r) {
        const float *q = L.q.data() + (static_cast<size_t>(r) * L.nh + h) * L.hd;
        std::vector<double> e(static_cast<size_t>(n));
        double mx = -1e300, z = 0;
        for (int32_t j = 0; j < n; ++j) {
          const float *k = L.k.data() + (static_cast<size_t>(j) * L.kvh + h / group) * L.hd;
          double d = 0;
          for (int32_t t = 0; t < L.hd; ++t) d += static_cast<double>(q[t]) * k[t];
          mx = std::max(mx, e[static_cast<size_t>(j)] = d / std::sqrt(static_cast<double>(L.hd)));
        }
        for (double &x : e) z += (x = std::exp(x - mx));
        for (int32_t j = 0; j < n_cand; ++j) mean[static_cast<size_t>(j)] += e[static_cast<size_t>(j)] / z / probe;
      }
      const double sum = std::accumulate(mean.begin(), mean.end(), 0.0);
      for (int32_t j = 0; j < n_cand; ++j) most[static_cast<size_t>(j)] = std::max(most[static_cast<size_t>(j)], mean[static_cast<size_t>(j)] / sum);
    }
    const int32_t kernel = std::max(c.pool_kernel_prefill, defaults::pool_kernel_probe), half = kernel / 2;
    std::vector<double> want(static_cast<size_t>(n_cand), 0.0);
    for (int32_t j = 0; j < n_cand; ++j)
      for (int32_t i = std::max(0, j - half); i <= std::min(n_cand - 1, j + half); ++i) want[static_cast<size_t>(j)] += most[static_cast<size_t>(i)] / kernel;
    const double total = std::accumulate(want.begin(), want.end(), 0.0);
    const std::vector<float> &got = cv.scores[static_cast<size_t>(Evidence::window_attention)];
    ASSERT_EQ(got.size(), static_cast<size_t>(n_cand));
    for (int32_t j = 0; j < n_cand; ++j) EXPECT_NEAR(got[static_cast<size_t>(j)], want[static_cast<size_t>(j)] / total, 1e-5) << "trial " << trial << " slot " << j;
  }
}

// On convex decreasing curves the greedy spread is optimal: brute force over every allocation agrees.
TEST(AutoPolicy, SpreadMatchesBruteForceOnConvexCurves) {
  std::mt19937 rng(infokv_test::test_seed());
  std::uniform_real_distribution<double> u(0.05, 1.0);
  for (int trial = 0; trial < 50; ++trial) {
    const int32_t bs = 4;
    const size_t L = 2 + rng() % 3;
    std::vector<AutoLayerCurves> layers(L);
    for (AutoLayerCurves &cv : layers) {
      const int32_t steps = 2 + static_cast<int32_t>(rng() % 5);
      cv.window = 4;
      double loss = u(rng), drop = u(rng) * loss;
      cv.loss.assign(static_cast<size_t>(kEvidenceKinds), {});
      for (int32_t g = 0; g < steps; ++g) {
        cv.grid.push_back(4 * (g + 1));
        for (auto &row : cv.loss) row.push_back(static_cast<float>(loss + 0.5 * u(rng)));  // worse evidence
        cv.loss[0].back() = static_cast<float>(loss);  // window attention best: best_loss() is this convex curve
        loss = std::max(0.0, loss - drop);
        drop *= u(rng);  // convex: each step lowers the loss less
      }
      cv.n = cv.grid.back();
    }
    int64_t min_blocks = 0, max_blocks = 0;
    for (const AutoLayerCurves &cv : layers) {
      min_blocks += blocks_of(cv.grid.front(), bs);
      max_blocks += blocks_of(cv.grid.back(), bs);
    }
    const int64_t total = min_blocks + static_cast<int64_t>(rng() % static_cast<uint32_t>(max_blocks - min_blocks + 1));
    const std::vector<size_t> at = auto_spread(layers, bs, total, 0.0, {});
    int64_t used = 0;
    double got = 0;
    for (size_t l = 0; l < L; ++l) {
      used += blocks_of(layers[l].grid[at[l]], bs);
      got += layers[l].best_loss(at[l]);
    }
    EXPECT_LE(used, total);
    double best = INFINITY;
    std::vector<size_t> cur(L, 0);
    std::function<void(size_t, int64_t, double)> walk = [&](size_t l, int64_t b, double s) {
      if (l == L) {
        best = std::min(best, s);
        return;
      }
      for (size_t g = 0; g < layers[l].grid.size(); ++g) {
        const int64_t nb = b + blocks_of(layers[l].grid[g], bs);
        if (nb <= total) walk(l + 1, nb, s + layers[l].best_loss(g));
      }
    };
    walk(0, 0, 0.0);
    EXPECT_NEAR(got, best, 1e-6) << "trial " << trial;

    // Quality target: the mean loss ends at or under it (when reachable), and no allocation is a block cheaper.
    const double target = 0.5 * got / static_cast<double>(L) + 1e-3;
    const std::vector<size_t> q = auto_spread(layers, bs, 0, target, {});
    double qloss = 0;
    int64_t qblocks = 0;
    for (size_t l = 0; l < L; ++l) {
      qloss += layers[l].best_loss(q[l]);
      qblocks += blocks_of(layers[l].grid[q[l]], bs);
    }
    double floor_loss = 0;
    for (const AutoLayerCurves &cv : layers) floor_loss += cv.best_loss(cv.grid.size() - 1);
    if (floor_loss <= target * static_cast<double>(L)) {
      EXPECT_LE(qloss, target * static_cast<double>(L) + 1e-9);
    }
    int64_t fewest = INT64_MAX;
    std::function<void(size_t, int64_t, double)> walk2 = [&](size_t l, int64_t b, double s) {
      if (l == L) {
        if (s <= target * static_cast<double>(L) + 1e-12) fewest = std::min(fewest, b);
        return;
      }
      for (size_t g = 0; g < layers[l].grid.size(); ++g) walk2(l + 1, b + blocks_of(layers[l].grid[g], bs), s + layers[l].best_loss(g));
    };
    walk2(0, 0, 0.0);
    if (fewest != INT64_MAX) {
      EXPECT_LE(qblocks, fewest + 1) << "trial " << trial;
    }
  }
}

// Window attention ranks a layer unless another evidence lowers the loss by kEvidenceMargin or more.
TEST(AutoPolicy, AnotherEvidenceMustBeatWindowAttentionByTheMargin) {
  AutoLayerCurves cv;
  cv.grid = {4, 8};
  cv.loss.assign(static_cast<size_t>(kEvidenceKinds), {1.0f, 0.5f});
  cv.loss[static_cast<size_t>(Evidence::last_query)] = {1.0f * (1.0f - kEvidenceMargin) + 0.01f, 0.5f * (1.0f - kEvidenceMargin) - 0.01f};
  cv.loss[static_cast<size_t>(Evidence::key_norm)] = {1.0f, 1e-4f};
  Evidence e = Evidence::recency;
  EXPECT_FLOAT_EQ(cv.best_loss(0, &e), 1.0f);
  EXPECT_EQ(e, Evidence::window_attention);
  EXPECT_FLOAT_EQ(cv.best_loss(1, &e), 1e-4f);
  EXPECT_EQ(e, Evidence::key_norm);
  // Differences below kMinLossGain are noise: window attention stays, however large the ratio.
  AutoLayerCurves tiny;
  tiny.grid = {4};
  tiny.loss.assign(static_cast<size_t>(kEvidenceKinds), {2e-4f});
  tiny.loss[static_cast<size_t>(Evidence::recency)] = {1e-5f};
  EXPECT_FLOAT_EQ(tiny.best_loss(0, &e), 2e-4f);
  EXPECT_EQ(e, Evidence::window_attention);
}

namespace {

std::vector<int32_t> story_tokens(size_t n) { return infokv_test::story_tokens(stories()->tokenizer(), n); }

// A two-thread stories260K session with auto compression (c's other fields as given) whose one sequence (*id) has
// read `toks` and been compressed once.
// A session with auto and the given budget or target, one sequence prefilled with toks (compressed once: ok()).
struct AutoRun {
  std::unique_ptr<Session> s;
  int32_t id = -1;
  bool ok() const { return s->compressor().compressions(id) == 1; }
  const AutoReport &report() const { return s->compressor().state(id).auto_report; }
};

AutoRun auto_run(CompressionConfig c, const std::vector<int32_t> &toks) {
  SessionOptions o;
  o.n_threads = 2;
  c.policy = PolicyKind::auto_;
  o.compression = c;
  AutoRun run;
  run.s = std::make_unique<Session>(stories(), o);
  run.id = run.s->add_sequence();
  std::vector<BatchToken> b;
  for (int32_t t : toks) b.push_back({run.id, t, false});
  run.s->decode(b);
  return run;
}

}  // namespace

TEST(AutoPolicy, HoldsTheBlocksOfAUniformBudgetAndReportsItsChoice) {
  const std::vector<int32_t> toks = story_tokens(200);
  ASSERT_GE(toks.size(), 150u);
  for (int32_t budget : {24, 40, 64}) {
    CompressionConfig cc;
    cc.budget_tokens = budget;
    const AutoRun run = auto_run(cc, toks);
    ASSERT_TRUE(run.ok()) << "budget " << budget;
    Session &s = *run.s;
    const int32_t id = run.id;
    const AutoReport &r = run.report();
    const SeqCache &c = s.kv().seq(id);
    ASSERT_EQ(r.layers.size(), c.layers.size());
    const int32_t bs = s.kv().config().block_size;
    int64_t blocks = 0, uniform_blocks = 0, tokens = 0;
    const int32_t w = std::min(32, budget / 4);
    for (size_t l = 0; l < c.layers.size(); ++l) {
      const LayerSlots &L = c.layers[l];
      EXPECT_EQ(L.n(), r.layers[l].budget) << "layer " << l;
      EXPECT_GE(r.layers[l].loss, 0.0f);
      EXPECT_LE(r.layers[l].loss, 1.0f);
      EXPECT_STRNE(evidence_name(r.layers[l].evidence), "unknown");
      blocks += static_cast<int64_t>(L.blocks.size());
      uniform_blocks += blocks_of(budget, bs);
      tokens += L.n();
      for (int32_t p = static_cast<int32_t>(toks.size()) - w; p < static_cast<int32_t>(toks.size()); ++p)
        EXPECT_TRUE(std::binary_search(L.pos.begin(), L.pos.end(), p)) << "layer " << l << " lost window position " << p;
    }
    EXPECT_LE(blocks, uniform_blocks) << "auto must hold no more memory than the uniform budget";
    EXPECT_EQ(tokens, r.tokens);
    EXPECT_GT(r.loss, 0.0);
    s.kv().check_invariants();
    // Decoding goes on over the compressed cache.
    Sampler smp(SamplerParams{});
    const GenerateResult g = generate(s, id, {}, 8, smp, nullptr);
    EXPECT_EQ(g.tokens.size(), 8u);
  }
}

TEST(AutoPolicy, QualityTargetKeepsTheLossUnderItAndALooserTargetKeepsLess) {
  const std::vector<int32_t> toks = story_tokens(200);
  int64_t prev_tokens = INT64_MAX;
  for (double target : {0.002, 0.02, 0.2}) {
    CompressionConfig c;
    c.max_loss = target;
    const AutoRun run = auto_run(c, toks);
    ASSERT_TRUE(run.ok()) << "target " << target;
    const AutoReport &r = run.report();
    EXPECT_LE(r.loss, target + 1e-9) << "target " << target;
    EXPECT_EQ(r.max_loss, target);
    EXPECT_LE(r.tokens, prev_tokens) << "a looser target must not keep more";
    prev_tokens = r.tokens;
  }
  EXPECT_LT(prev_tokens, static_cast<int64_t>(toks.size()) * stories()->hparams().n_layer) << "0.2 must evict something";
}

TEST(AutoPolicy, ProtectedSpansSurviveAndConfigsWithoutABudgetNeedAuto) {
  SessionOptions o;
  o.compression.policy = PolicyKind::auto_;
  o.compression.budget_fraction = 0.25;
  o.compression.interval = 16;
  Session s(stories(), o);
  const int32_t id = s.add_sequence();
  s.compressor().protect(id, ProtectedSpan{0, 20, false});
  Sampler smp(SamplerParams{});
  generate(s, id, story_tokens(80), 60, smp, nullptr);
  EXPECT_GE(s.compressor().compressions(id), 2);
  infokv_test::expect_positions_kept(s.kv().seq(id), 0, 20);
  s.kv().check_invariants();

  CompressionConfig bad;
  bad.policy = PolicyKind::snapkv;
  bad.max_loss = 0.01;
  EXPECT_THROW(bad.validate(), Error);
  bad.policy = PolicyKind::auto_;
  EXPECT_NO_THROW(bad.validate());
  bad.max_loss = -1;
  EXPECT_THROW(bad.validate(), Error);
  bad.max_loss = NAN;
  EXPECT_THROW(bad.validate(), Error);
}
