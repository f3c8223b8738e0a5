// Sampler: the portable RNG, greedy decoding, each truncation rule, the repetition penalty, and that sampling
// reproduces the distribution it claims (checked by frequencies over many seeded draws).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "sampling/sampler.hpp"
#include "util/error.hpp"
#include "support/random_inputs.hpp"

using infokv::Error;
using infokv::Rng;
using infokv::Sampler;
using infokv::SamplerParams;
using infokv::Status;

namespace {

// Plain sampling: no truncation, temperature 1.
SamplerParams plain(uint64_t seed) {
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repeat_penalty = 1.0f;
  p.seed = seed;
  return p;
}

std::vector<float> random_logits(std::mt19937_64 &rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float &x : v) x = d(rng);
  return v;
}

std::vector<double> softmax(const std::vector<float> &logits, double temperature) {
  double mx = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t k = 0; k < p.size(); ++k) sum += p[k] = std::exp((logits[k] - mx) / temperature);
  for (double &x : p) x /= sum;
  return p;
}

std::vector<double> frequencies(Sampler &s, const std::vector<float> &logits, int draws) {
  std::vector<double> f(logits.size(), 0.0);
  for (int k = 0; k < draws; ++k) {
    int32_t id = s.sample(logits.data(), static_cast<int32_t>(logits.size()));
    EXPECT_GE(id, 0);
    EXPECT_LT(id, static_cast<int32_t>(logits.size()));
    f[static_cast<size_t>(id)] += 1.0 / draws;
  }
  return f;
}

// With 50000 draws a frequency's standard deviation is at most 0.0023, so 0.015 is over 6 sigma: a real bias of
// that size fails, chance essentially never does.
constexpr int kDraws = 50000;
constexpr double kTolerance = 0.015;

void expect_matches(const std::vector<double> &freq, const std::vector<double> &expected) {
  ASSERT_EQ(freq.size(), expected.size());
  double worst = 0;
  for (size_t k = 0; k < freq.size(); ++k) worst = std::max(worst, std::abs(freq[k] - expected[k]));
  EXPECT_LT(worst, kTolerance);
}

std::vector<float> logits_of(const std::vector<double> &probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

void expect_invalid(const SamplerParams &p, const char *what) {
  try {
    Sampler s(p);
    ADD_FAILURE() << what << " was accepted";
  } catch (const Error &e) {
    EXPECT_EQ(e.status(), Status::invalid_argument) << what << ": " << e.what();
  }
}

}  // namespace

// ---- Rng ----

TEST(Rng, MatchesReferenceXoshiro256StarStar) {
  Rng r;
  const uint64_t s[4] = {1, 2, 3, 4};
  r.set_state(s);
  EXPECT_EQ(r.next(), 0x2d00u);
  EXPECT_EQ(r.next(), 0x0u);
  EXPECT_EQ(r.next(), 0x5a007080u);
  EXPECT_EQ(r.next(), 0x10e0000000009d80u);
}

TEST(Rng, SeedsThroughSplitMix64) {
  Rng r(0);
  EXPECT_EQ(r.state()[0], 0xe220a8397b1dcdafu);  // splitmix64's published first output for seed 0
  EXPECT_EQ(r.state()[1], 0x6e789e6aa1b965f4u);
  EXPECT_EQ(r.state()[2], 0x06c45d188009454fu);
  EXPECT_EQ(r.state()[3], 0xf88bb8a8724c81ecu);
  EXPECT_EQ(r.next(), 0x99ec5f36cb75f2b4u);
  Rng r42(42);
  EXPECT_EQ(r42.next(), 0x15780b2e0c2ec716u);
  EXPECT_EQ(r42.next(), 0x6104d9866d113a7eu);
}

TEST(Rng, UniformUsesTop53Bits) {
  Rng a(7), b(7);
  for (int k = 0; k < 1000; ++k) {
    double u = a.uniform();
    EXPECT_EQ(u, static_cast<double>(b.next() >> 11) * 0x1.0p-53);
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
  }
}

TEST(Rng, StateRoundTripsAndRejectsAllZero) {
  Rng a(123);
  a.next();
  Rng b;
  b.set_state(a.state());
  for (int k = 0; k < 10; ++k) EXPECT_EQ(a.next(), b.next());
  const uint64_t zero[4] = {0, 0, 0, 0};
  try {
    b.set_state(zero);
    ADD_FAILURE() << "all-zero state accepted";
  } catch (const Error &e) {
    EXPECT_EQ(e.status(), Status::invalid_argument);
  }
}

// ---- greedy ----

TEST(Sampler, GreedyIsArgmaxWithTiesToLowestId) {
  const uint64_t seed = infokv_test::test_seed();  // printed; INFOKV_TEST_SEED replays it
  std::mt19937_64 rng(seed);
  for (float temperature : {0.0f, -1.0f}) {
    SamplerParams p = plain(seed);
    p.temperature = temperature;
    Sampler s(p);
    for (int iter = 0; iter < 50; ++iter) {
      std::vector<float> l = random_logits(rng, 1000, -10, 10);
      auto best = std::max_element(l.begin(), l.end()) - l.begin();
      EXPECT_EQ(s.sample(l.data(), 1000), best);
    }
    std::vector<float> ties = {1, 3, 0, 3, 3};
    EXPECT_EQ(s.sample(ties.data(), 5), 1);
  }
}

TEST(Sampler, TopKOneIsGreedy) {
  const uint64_t seed = infokv_test::test_seed();  // printed; INFOKV_TEST_SEED replays it
  std::mt19937_64 rng(seed);
  SamplerParams p = plain(seed);
  p.top_k = 1;
  Sampler s(p);
  for (int iter = 0; iter < 200; ++iter) {
    std::vector<float> l = random_logits(rng, 300, -1, 1);
    EXPECT_EQ(s.sample(l.data(), 300), std::max_element(l.begin(), l.end()) - l.begin());
  }
}

// ---- determinism ----

TEST(Sampler, SameSeedSameSequenceDifferentSeedDifferent) {
  const uint64_t seed = infokv_test::test_seed();  // printed; INFOKV_TEST_SEED replays it
  std::mt19937_64 rng(seed);
  SamplerParams p;  // the defaults: top-k, top-p and min-p all active
  p.seed = seed;
  Sampler a(p), b(p);
  p.seed = seed + 1;
  Sampler c(p);
  std::vector<int32_t> sa, sb, sc;
  for (int k = 0; k < 300; ++k) {
    std::vector<float> l = random_logits(rng, 500, 0, 2);
    sa.push_back(a.sample(l.data(), 500));
    sb.push_back(b.sample(l.data(), 500));
    sc.push_back(c.sample(l.data(), 500));
    a.accept(sa.back());
    b.accept(sb.back());
    c.accept(sc.back());
  }
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
  // reset() starts the same sequence again.
  a.reset();
  std::mt19937_64 rng2(seed);
  for (int k = 0; k < 300; ++k) {
    std::vector<float> l = random_logits(rng2, 500, 0, 2);
    ASSERT_EQ(a.sample(l.data(), 500), sa[static_cast<size_t>(k)]) << "draw " << k;
    a.accept(sa[static_cast<size_t>(k)]);
  }
}

TEST(Sampler, DoesNotModifyLogits) {
  std::vector<float> l = {0.5f, 2.0f, -1.0f, 2.0f};
  const std::vector<float> copy = l;
  SamplerParams p;
  p.repeat_penalty = 1.3f;
  Sampler s(p);
  s.accept(1);
  for (int k = 0; k < 20; ++k) s.sample(l.data(), 4);
  EXPECT_EQ(l, copy);
}

// ---- the distribution ----

TEST(Sampler, PlainSamplingMatchesSoftmax) {
  const uint64_t seed = infokv_test::test_seed();  // printed; INFOKV_TEST_SEED replays it
  std::mt19937_64 rng(seed);
  std::vector<float> l = random_logits(rng, 8, -2, 2);
  Sampler s(plain(seed));
  expect_matches(frequencies(s, l, kDraws), softmax(l, 1.0));
}

TEST(Sampler, TemperatureSharpensAndFlattens) {
  const uint64_t seed = infokv_test::test_seed();  // printed; INFOKV_TEST_SEED replays it
  std::mt19937_64 rng(seed);
  std::vector<float> l = random_logits(rng, 6, -1.5f, 1.5f);
  for (float t : {0.5f, 2.0f}) {
    SamplerParams p = plain(seed);
    p.temperature = t;
    Sampler s(p);
    expect_matches(frequencies(s, l, kDraws), softmax(l, t));
  }
}

TEST(Sampler, TopKRestrictsSupportAndRenormalises) {
  const uint64_t seed = infokv_test::test_seed();  // printed; INFOKV_TEST_SEED replays it
  std::mt19937_64 rng(seed);
  std::vector<float> l = random_logits(rng, 100, 0, 3);
  SamplerParams p = plain(seed);
  p.top_k = 5;
  Sampler s(p);
  std::vector<size_t> order(l.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return l[a] > l[b]; });
  std::vector<float> top(5);
  for (size_t k = 0; k < 5; ++k) top[k] = l[order[k]];
  std::vector<double> pt = softmax(top, 1.0);
  std::vector<double> expected(l.size(), 0.0);
  for (size_t k = 0; k < 5; ++k) expected[order[k]] = pt[k];
  expect_matches(frequencies(s, l, kDraws), expected);
}

TEST(Sampler, TopPKeepsSmallestSetReachingP) {
  const std::vector<double> probs = {0.15, 0.5, 0.05, 0.3};  // sorted: 1 (0.5), 3 (0.3), 0 (0.15), 2 (0.05)
  const std::vector<float> l = logits_of(probs);
  struct Case {
    float top_p;
    std::vector<double> expected;
  };
  const std::vector<Case> cases = {
      {0.4f, {0, 1, 0, 0}},
      {0.79f, {0, 0.625, 0, 0.375}},
      {0.81f, {0.15 / 0.95, 0.5 / 0.95, 0, 0.3 / 0.95}},
      {0.0f, {0, 1, 0, 0}},
  };
  const uint64_t seed = infokv_test::test_seed();  // printed; INFOKV_TEST_SEED replays it
  for (const Case &c : cases) {
    SCOPED_TRACE("top_p " + std::to_string(c.top_p));
    SamplerParams p = plain(seed);
    p.top_p = c.top_p;
    Sampler s(p);
    expect_matches(frequencies(s, l, kDraws), c.expected);
  }
}

TEST(Sampler, TopPOnRandomDistributions) {
  const uint64_t seed = infokv_test::test_seed();  // printed; INFOKV_TEST_SEED replays it
  std::mt19937_64 rng(seed);
  for (int iter = 0; iter < 20; ++iter) {
    std::vector<float> l = random_logits(rng, 50, -3, 3);
    std::vector<double> pr = softmax(l, 1.0);
    std::vector<size_t> order(l.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = k;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return pr[a] > pr[b]; });
    const float top_p = std::uniform_real_distribution<float>(0.1f, 0.95f)(rng);
    std::set<int32_t> allowed;
    double cum = 0;
    bool near_boundary = false;
    for (size_t k : order) {
      cum += pr[k];
      allowed.insert(static_cast<int32_t>(k));
      if (std::abs(cum - top_p) < 1e-4) near_boundary = true;
      if (cum >= top_p) break;
    }
    if (near_boundary) continue;  // float rounding may legitimately decide either way there
    SamplerParams p = plain(seed + static_cast<uint64_t>(iter));
    p.top_p = top_p;
    Sampler s(p);
    for (int k = 0; k < 500; ++k) {
      int32_t id = s.sample(l.data(), 50);
      ASSERT_TRUE(allowed.count(id)) << "token " << id << " lies outside the top-p set (iteration " << iter << ")";
    }
  }
}

TEST(Sampler, MinPDropsTokensBelowFractionOfMax) {
  const std::vector<double> probs = {0.15, 0.5, 0.05, 0.3};
  const std::vector<float> l = logits_of(probs);
  const uint64_t seed = infokv_test::test_seed();  // printed; INFOKV_TEST_SEED replays it
  {
    SamplerParams p = plain(seed);
    p.min_p = 0.2f;  // cut at 0.1
    Sampler s(p);
    expect_matches(frequencies(s, l, kDraws), {0.15 / 0.95, 0.5 / 0.95, 0, 0.3 / 0.95});
  }
  {
    SamplerParams p = plain(seed);
    p.min_p = 0.35f;  // cut at 0.175
    Sampler s(p);
    expect_matches(frequencies(s, l, kDraws), {0, 0.625, 0, 0.375});
  }
  {
    SamplerParams p = plain(seed);
    p.min_p = 1.0f;  // only the most likely token survives
    Sampler s(p);
    for (int k = 0; k < 100; ++k) EXPECT_EQ(s.sample(l.data(), 4), 1);
  }
}

TEST(Sampler, LargeVocabularyWithDefaults) {
  const uint64_t seed = infokv_test::test_seed();  // printed; INFOKV_TEST_SEED replays it
  std::mt19937_64 rng(seed);
  std::vector<float> l = random_logits(rng, 50000, -5, 5);
  std::vector<float> sorted = l;
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  SamplerParams p;
  p.seed = seed;
  Sampler s(p);
  for (int k = 0; k < 200; ++k) {
    int32_t id = s.sample(l.data(), 50000);
    ASSERT_GE(l[static_cast<size_t>(id)], sorted[39]) << "outside the top 40";
  }
}

// ---- repetition penalty ----

TEST(Sampler, RepetitionPenaltyFollowsLlamaCppRule) {
  SamplerParams p = plain(1);
  p.temperature = 0;
  p.repeat_penalty = 1.5f;
  {
    Sampler s(p);
    std::vector<float> l = {2.0f, 1.9f, -1.0f};
    EXPECT_EQ(s.sample(l.data(), 3), 0);
    s.accept(0);  // 2.0 / 1.5 = 1.33 < 1.9
    EXPECT_EQ(s.sample(l.data(), 3), 1);
  }
  {
    Sampler s(p);
    std::vector<float> l = {-1.0f, -1.2f};
    s.accept(0);  // -1.0 * 1.5 = -1.5 < -1.2
    EXPECT_EQ(s.sample(l.data(), 2), 1);
  }
  {
    // Counted once however often it occurred: 2.0 / 1.5 = 1.33 still beats 1.0 (three times would give 0.59).
    Sampler s(p);
    std::vector<float> l = {2.0f, 1.0f};
    s.set_history({0, 0, 0});
    EXPECT_EQ(s.sample(l.data(), 2), 0);
  }
  {
    // Out-of-range history entries are ignored, not a crash.
    Sampler s(p);
    std::vector<float> l = {2.0f, 1.0f};
    s.set_history({-3, 7, 1 << 30});
    EXPECT_EQ(s.sample(l.data(), 2), 0);
  }
}

TEST(Sampler, RepetitionPenaltyOnlyCoversLastN) {
  SamplerParams p = plain(1);
  p.temperature = 0;
  p.repeat_penalty = 2.0f;
  p.repeat_last_n = 2;
  Sampler s(p);
  std::vector<float> l = {2.0f, 1.5f, 0, 0, 0};
  s.accept(0);
  EXPECT_EQ(s.sample(l.data(), 5), 1);
  s.accept(3);
  s.accept(4);  // token 0 has left the window
  EXPECT_EQ(s.history().size(), 2u);
  EXPECT_EQ(s.sample(l.data(), 5), 0);
  s.set_history({0, 1, 2, 3});
  EXPECT_EQ(std::vector<int32_t>(s.history().begin(), s.history().end()), (std::vector<int32_t>{2, 3}));
  s.reset();
  EXPECT_TRUE(s.history().empty());
}

TEST(Sampler, RepetitionPenaltyShiftsSampledDistribution) {
  const uint64_t seed = infokv_test::test_seed();  // printed; INFOKV_TEST_SEED replays it
  std::mt19937_64 rng(seed);
  std::vector<float> l = random_logits(rng, 6, -1, 1);
  l[2] = 1.5f;
  SamplerParams p = plain(seed);
  p.repeat_penalty = 1.8f;
  Sampler s(p);
  s.set_history({2, 4});
  std::vector<float> penalised = l;
  for (size_t t : {2u, 4u}) penalised[t] = penalised[t] > 0 ? penalised[t] / 1.8f : penalised[t] * 1.8f;
  std::vector<double> freq = frequencies(s, l, kDraws);
  expect_matches(freq, softmax(penalised, 1.0));
  EXPECT_LT(freq[2], softmax(l, 1.0)[2] - 0.05);
}

// ---- odd input ----

TEST(Sampler, RejectsInvalidParameters) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  // One bad field at a time, the others at their defaults.
  const std::pair<std::function<void(SamplerParams &)>, const char *> bad[] = {
      {[&](SamplerParams &q) { q.temperature = nan; }, "NaN temperature"},
      {[&](SamplerParams &q) { q.temperature = inf; }, "infinite temperature"},
      {[&](SamplerParams &q) { q.top_p = nan; }, "NaN top_p"},
      {[](SamplerParams &q) { q.top_p = -0.1f; }, "negative top_p"},
      {[](SamplerParams &q) { q.min_p = -0.1f; }, "negative min_p"},
      {[&](SamplerParams &q) { q.min_p = nan; }, "NaN min_p"},
      {[](SamplerParams &q) { q.min_p = 1.5f; }, "min_p above 1"},
      {[](SamplerParams &q) { q.repeat_penalty = 0.0f; }, "zero repeat_penalty"},
      {[](SamplerParams &q) { q.repeat_penalty = -1.0f; }, "negative repeat_penalty"},
      {[&](SamplerParams &q) { q.repeat_penalty = nan; }, "NaN repeat_penalty"},
      {[&](SamplerParams &q) { q.repeat_penalty = inf; }, "infinite repeat_penalty"},
      {[](SamplerParams &q) { q.repeat_last_n = -1; }, "negative repeat_last_n"},
  };
  for (const auto &b : bad) {
    SamplerParams q;
    b.first(q);
    expect_invalid(q, b.second);
  }

  // Documented non-errors: negative temperature is greedy, top_p above 1 and top_k <= 0 disable.
  SamplerParams p;
  p.temperature = -0.5f;
  p.top_p = 1.5f;
  p.top_k = -3;
  EXPECT_NO_THROW(Sampler{p});
}

TEST(Sampler, RejectsEmptyLogits) {
  Sampler s{SamplerParams()};
  float one = 0;
  for (int32_t n : {0, -1}) {
    try {
      s.sample(&one, n);
      ADD_FAILURE() << "n = " << n << " accepted";
    } catch (const Error &e) {
      EXPECT_EQ(e.status(), Status::invalid_argument);
    }
  }
  EXPECT_THROW(s.sample(nullptr, 4), Error);
}

TEST(Sampler, SurvivesNonFiniteLogits) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (float temperature : {0.0f, 1.0f}) {
    SamplerParams p = plain(3);
    p.temperature = temperature;
    Sampler s(p);
    std::vector<float> with_nan = {nan, 1.0f, nan, 0.5f};
    for (int k = 0; k < 50; ++k) {
      int32_t id = s.sample(with_nan.data(), 4);
      EXPECT_TRUE(id == 1 || id == 3) << id;
    }
    std::vector<float> with_inf = {0.0f, inf, 3.0f};
    for (int k = 0; k < 20; ++k) EXPECT_EQ(s.sample(with_inf.data(), 3), 1);
    std::vector<float> none = {-inf, -inf, nan};
    int32_t id = s.sample(none.data(), 3);
    EXPECT_TRUE(id >= 0 && id < 3);
  }
}
