// CPU kernels whose CUDA twins run the forward pass on a GPU: convert, get_rows, kv_move_slots, rep_change_rows,
// topk_entropy_rows (tests/gpu compares each pair).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <algorithm>
#include <numeric>
#include <utility>
#include <random>
#include <vector>

#include "support/params.hpp"
#include "kernels/fp16.hpp"
#include "kernels/ggml_types.hpp"
#include "kernels/cpu/attention_math.hpp"
#include "kernels/cpu/cpu_features.hpp"
#include "kernels/thread_pool.hpp"
#include "kernels/ops.hpp"
#include "support/random_inputs.hpp"

using namespace infokv;

namespace {

using infokv_test::randn;
using infokv_test::test_seed;

// The attention tests' cache: n slots of random K (std 2) and V, kNkv heads of kHd, in 16-slot blocks scattered
// through the pool (block b at (b * mul + add) % nb, a permutation when the two are coprime with nb), and n_q random
// queries of kNh heads, drawn in that order.
constexpr int32_t kBs = 16, kNkv = 3, kHd = 64, kNh = 9;
struct RandomCache {
  std::vector<int32_t> table;
  std::vector<uint8_t> pool;
  std::vector<float> k, v, q;
  PagedKv kv{};
  RandomCache(KvDtype dt, int32_t n, int32_t n_q, int32_t mul, int32_t add, std::mt19937 &g) {
    const int32_t nb = (n + kBs - 1) / kBs;
    const int64_t stride = 2LL * kNkv * kBs * kv_bytes(dt, kHd);
    table.resize(static_cast<size_t>(nb));
    for (int32_t b = 0; b < nb; ++b) table[static_cast<size_t>(b)] = (b * mul + add) % nb;
    pool.resize(static_cast<size_t>(stride * nb));
    kv = PagedKv{pool.data(), stride, table.data(), n, kBs, kNkv, kHd, dt};
    k = randn(static_cast<size_t>(n) * kNkv * kHd, g, 2.0f);
    v = randn(k.size(), g);
    cpu::kv_append(kv, 0, k.data(), v.data(), n);
    q = randn(static_cast<size_t>(n_q) * kNh * kHd, g);
  }
  // The attention of all the queries as one prefill (query t sees visible0 + t slots), scale 1/8, on `pool`.
  std::vector<float> attend(int32_t visible0, ThreadPool *pool) const {
    std::vector<float> out(q.size(), NAN);
    const auto n_q = static_cast<int64_t>(q.size() / (static_cast<size_t>(kNh) * kHd));
    cpu::paged_attention(out.data(), q.data(), n_q, kNh, kv, visible0, 0.125f, nullptr, nullptr, pool);
    return out;
  }
};

}  // namespace

// ctest's cpu_portable_kernels runs the kernel suites again with INFOKV_CPU_KERNELS=portable; this says the switch
// took, so that run really covers the portable kernels on a CPU that has AVX2.
TEST(CpuTwins, PortableSwitchIsHonoured) {
  const char *force = std::getenv("INFOKV_CPU_KERNELS");
  if (force == nullptr || std::strcmp(force, "portable") != 0) GTEST_SKIP() << "INFOKV_CPU_KERNELS is not 'portable'";
  EXPECT_FALSE(infokv::cpu_has_avx2_fma_f16c());
  EXPECT_FALSE(infokv::cpu_has_avx512());
  EXPECT_STREQ(infokv::cpu_kernels_name(), "portable");
}

// ctest's cpu_avx2_kernels runs them with INFOKV_CPU_KERNELS=avx2: the AVX-512 paths must then be off, the AVX2 ones
// on (where the CPU has them).
TEST(CpuTwins, Avx2SwitchIsHonoured) {
  const char *force = std::getenv("INFOKV_CPU_KERNELS");
  if (force == nullptr || std::strcmp(force, "avx2") != 0) GTEST_SKIP() << "INFOKV_CPU_KERNELS is not 'avx2'";
  EXPECT_FALSE(infokv::cpu_has_avx512());
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    EXPECT_TRUE(infokv::cpu_has_avx2_fma_f16c());
    EXPECT_STREQ(infokv::cpu_kernels_name(), "avx2");
  }
#endif
}

TEST(CpuTwins, SwigluMatchesTheFormulaAndDoesNotDependOnWhereAnElementSits) {
  std::mt19937 g(test_seed());
  for (int64_t n : {1, 7, 8, 13, 172, 1537}) {
    auto gate = randn(static_cast<size_t>(n), g, 6.0f), up = randn(static_cast<size_t>(n), g, 2.0f);
    gate[0] = 120.0f;  // far beyond exp's clamp both ways
    if (n > 1) gate[1] = -120.0f;
    std::vector<float> out(static_cast<size_t>(n));
    cpu::swiglu(out.data(), gate.data(), up.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double gi = gate[static_cast<size_t>(i)];
      const double want = gi / (1.0 + std::exp(-gi)) * up[static_cast<size_t>(i)];
      EXPECT_NEAR(out[static_cast<size_t>(i)], want, std::fabs(want) * 1e-6 + 1e-30) << "n=" << n << " i=" << i;
    }
    // The same elements at another offset (a row batched behind others) give the same bits.
    for (int64_t off : {1, 3, 8}) {
      std::vector<float> g2(static_cast<size_t>(off), 0.5f), u2(static_cast<size_t>(off), 0.5f);
      g2.insert(g2.end(), gate.begin(), gate.end());
      u2.insert(u2.end(), up.begin(), up.end());
      std::vector<float> out2(g2.size());
      cpu::swiglu(out2.data(), g2.data(), u2.data(), static_cast<int64_t>(g2.size()));
      EXPECT_EQ(0, std::memcmp(out2.data() + off, out.data(), out.size() * sizeof(float))) << "n=" << n << " off=" << off;
    }
  }
}

TEST(CpuTwins, ConvertRoundTripsAndMatchesScalarConversions) {
  std::mt19937 g(test_seed());
  auto x = randn(1000, g, 10.0f);
  std::vector<uint16_t> h(x.size()), b(x.size());
  cpu::convert(h.data(), KvDtype::f16, x.data(), KvDtype::f32, static_cast<int64_t>(x.size()));
  cpu::convert(b.data(), KvDtype::bf16, x.data(), KvDtype::f32, static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(h[i], float_to_fp16(x[i]));
    EXPECT_EQ(b[i], float_to_bf16(x[i]));
  }
  std::vector<float> back(x.size());
  cpu::convert(back.data(), KvDtype::f32, h.data(), KvDtype::f16, static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(back[i], x[i], std::fabs(x[i]) * 1e-3f + 1e-6f);
  std::vector<uint16_t> hb(x.size());
  cpu::convert(hb.data(), KvDtype::bf16, h.data(), KvDtype::f16, static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(hb[i], float_to_bf16(fp16_to_float(h[i])));
}

TEST(CpuTwins, GetRowsGathersRowsLikeGetRow) {
  std::mt19937 g(test_seed());
  const int64_t rows = 17, d = 24;
  auto emb = randn(static_cast<size_t>(rows * d), g);
  std::vector<uint16_t> emb16(emb.size());
  cpu::convert(emb16.data(), KvDtype::f16, emb.data(), KvDtype::f32, static_cast<int64_t>(emb.size()));
  std::vector<int32_t> ids = {3, 0, 16, 3};
  std::vector<float> out(ids.size() * d), ref(d);
  ASSERT_TRUE(cpu::get_rows(out.data(), emb16.data(), static_cast<uint32_t>(GgmlType::F16), ids.data(), 4, d));
  for (size_t r = 0; r < ids.size(); ++r) {
    ASSERT_TRUE(cpu::get_row(ref.data(), emb16.data(), static_cast<uint32_t>(GgmlType::F16), ids[r], d));
    for (int64_t i = 0; i < d; ++i) EXPECT_EQ(out[r * d + i], ref[i]);
  }
  EXPECT_FALSE(cpu::get_rows(out.data(), emb16.data(), static_cast<uint32_t>(GgmlType::Q4_0), ids.data(), 4, d));
}

// Slot moves read every source before writing any destination: an in-place compaction and a swap of two slots
// (which a sequential copy would get wrong) both land the values that were there before the call.
class CpuTwinsDtype : public ::testing::TestWithParam<KvDtype> {};

#if IKV_X86  // the AVX2 kernels' own invariants (no such kernels on other CPUs)
// Scores of a group of query heads against a block, all finished together (scores_d: eight sums at once for head
// dims that are a multiple of 8) and one head and one key at a time (scores_nq<1>, each sum on its own): the same
// bits for every head count, key count and KV dtype.
IKV_TARGET_AVX2 void scores_both_ways(std::vector<float> &together, std::vector<float> &alone, const std::vector<float> &q,
                               int32_t group, const void *kb, KvDtype dt, int32_t cnt, int32_t hd) {
  cpu::attn::scores_v(together.data(), cnt, q.data(), group, kb, dt, cnt, hd, 0.3f);
  for (int32_t h = 0; h < group; ++h)
    for (int32_t j = 0; j < cnt; ++j) {
      const auto *kj = static_cast<const uint8_t *>(kb) + kv_bytes(dt, static_cast<int64_t>(j) * hd);
      float *out = alone.data() + static_cast<size_t>(h) * cnt + j;
      const float *qh = q.data() + static_cast<size_t>(h) * hd;
      switch (dt) {
        case KvDtype::f32: cpu::attn::scores_nq<1, KvDtype::f32>(out, cnt, qh, kj, 1, hd, 0.3f); break;
        case KvDtype::f16: cpu::attn::scores_nq<1, KvDtype::f16>(out, cnt, qh, kj, 1, hd, 0.3f); break;
        case KvDtype::bf16: cpu::attn::scores_nq<1, KvDtype::bf16>(out, cnt, qh, kj, 1, hd, 0.3f); break;
        default: FAIL() << "the score kernels take float blocks";
      }
    }
}

// The matrix tiles finish eight dot products together (hsum8); each lane must be the bits hsum gives alone, or a
// token's result would depend on the tile it fell in.
IKV_TARGET_AVX2 static void hsum8_and_hsum(const float *x, float *together, float *alone) {
  __m256 a[8];
  for (int i = 0; i < 8; ++i) a[i] = _mm256_loadu_ps(x + 8 * i);
  _mm256_storeu_ps(together, cpu::tile::hsum8(a));
  for (int i = 0; i < 8; ++i) alone[i] = cpu::tile::hsum(a[i]);
}

TEST(CpuTwins, EightLaneSumsTogetherAreTheBitsOfEachAlone) {
  if (!infokv::cpu_has_avx2_fma_f16c()) GTEST_SKIP() << "the AVX2 kernels do not run on this CPU";
  std::mt19937 g(test_seed());
  for (int rep = 0; rep < 2000; ++rep) {
    // magnitudes spread over many binades, so that the order of the additions shows in the rounding
    std::vector<float> x = randn(64, g, 1.0f);
    for (size_t i = 0; i < x.size(); ++i) x[i] *= std::ldexp(1.0f, static_cast<int>(g() % 40) - 20);
    float together[8], alone[8];
    hsum8_and_hsum(x.data(), together, alone);
    ASSERT_EQ(0, std::memcmp(together, alone, sizeof together)) << "rep " << rep;
  }
}

TEST_P(CpuTwinsDtype, ScoresFinishedTogetherEqualScoresFinishedAlone) {
  if (!infokv::cpu_has_avx2_fma_f16c()) GTEST_SKIP() << "the AVX2 kernels do not run on this CPU";
  const KvDtype dt = GetParam();
  if (kv_dtype_quantised(dt)) GTEST_SKIP() << "quantised blocks reach the score kernels widened to f32";
  std::mt19937 g(test_seed());
  for (int32_t hd : {8, 64, 128, 12})
    for (int32_t group : {1, 2, 3, 4})
      for (int32_t cnt : {1, 5, 16, 37}) {
        const std::vector<float> q = randn(static_cast<size_t>(group) * hd, g), k = randn(static_cast<size_t>(cnt) * hd, g, 2.0f);
        std::vector<uint8_t> kb(static_cast<size_t>(kv_bytes(dt, static_cast<int64_t>(cnt) * hd)));
        cpu::convert(kb.data(), dt, k.data(), KvDtype::f32, static_cast<int64_t>(k.size()));
        std::vector<float> together(static_cast<size_t>(group) * cnt, NAN), alone(together.size(), NAN);
        scores_both_ways(together, alone, q, group, kb.data(), dt, cnt, hd);
        EXPECT_EQ(0, std::memcmp(together.data(), alone.data(), alone.size() * 4))
            << kv_dtype_name(dt) << " hd " << hd << " group " << group << " keys " << cnt;
      }
}
#endif  // IKV_X86

TEST_P(CpuTwinsDtype, KvMoveSlotsReadsEverySourceBeforeWriting) {
  const KvDtype dt = GetParam();
  std::mt19937 g(test_seed());
  const int32_t bs = 4, nkv = 2, hd = kv_dtype_quantised(dt) ? 32 : 8, n = 13;
  const int64_t stride = 2LL * nkv * bs * kv_bytes(dt, hd);
  std::vector<int32_t> table = {5, 1, 3, 0};  // scattered blocks
  std::vector<uint8_t> pool(static_cast<size_t>(stride * 6));
  PagedKv kv{pool.data(), stride, table.data(), n, bs, nkv, hd, dt};
  auto k = randn(static_cast<size_t>(n * nkv * hd), g), v = randn(static_cast<size_t>(n * nkv * hd), g);
  cpu::kv_append(kv, 0, k.data(), v.data(), n);
  // slot j <- src[j]: a compaction to {0, 2, 3, 7, 11, 12} followed by a swap of the last two kept slots
  const std::vector<int32_t> src = {0, 2, 3, 7, 12, 11};
  std::vector<float> want(src.size() * 2 * nkv * hd), got(want.size());
  for (size_t j = 0; j < src.size(); ++j)
    for (int w = 0; w < 2; ++w)
      for (int32_t h = 0; h < nkv; ++h) cpu::kv_read(want.data() + ((j * 2 + w) * nkv + h) * hd, kv, src[j], h, w);
  std::vector<int32_t> moves;
  for (size_t j = 0; j < src.size(); ++j)
    moves.insert(moves.end(), {table[static_cast<size_t>(src[j] / bs)], src[j] % bs, table[j / bs], static_cast<int32_t>(j % bs)});
  std::vector<uint8_t> scratch(src.size() * 2 * nkv * static_cast<size_t>(kv_bytes(dt, hd)));
  cpu::kv_move_slots(kv, moves.data(), static_cast<int64_t>(src.size()), scratch.data());
  for (size_t j = 0; j < src.size(); ++j)
    for (int w = 0; w < 2; ++w)
      for (int32_t h = 0; h < nkv; ++h) cpu::kv_read(got.data() + ((j * 2 + w) * nkv + h) * hd, kv, static_cast<int32_t>(j), h, w);
  EXPECT_EQ(got, want) << kv_dtype_name(dt);
}

// For each {visible0, n_q} shape, a random cache (block table permuted by mul, add) whose tiled prefill
// (RandomCache::attend) on one thread and on two must be the same bits as `reference` (the queries attended another
// way; returns their outputs).
template <typename Ref>
void expect_tiles_equal(KvDtype dt, std::initializer_list<std::pair<int32_t, int32_t>> shapes, int32_t mul, int32_t add,
                        Ref &&reference) {
  std::mt19937 g(test_seed());
  ThreadPool tp(2);
  for (const std::pair<int32_t, int32_t> &shape : shapes) {
    const int32_t visible0 = shape.first, n_q = shape.second;
    const RandomCache rc(dt, visible0 + n_q - 1, n_q, mul, add, g);
    const std::vector<float> want = reference(rc, visible0, n_q, &tp);
    for (ThreadPool *pool : {static_cast<ThreadPool *>(nullptr), &tp}) {
      const std::vector<float> got = rc.attend(visible0, pool);
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4))
          << kv_dtype_name(dt) << " visible0 " << visible0 << (pool ? ", two threads" : ", one thread");
    }
  }
}

// The reference of expect_tiles_equal that attends each query alone (a decode step of one query each).
std::vector<float> one_query_at_a_time(const RandomCache &rc, int32_t visible0, int32_t n_q, ThreadPool *) {
  const size_t row = static_cast<size_t>(kNh) * kHd;
  std::vector<float> alone(rc.q.size(), NAN);
  for (int32_t t = 0; t < n_q; ++t)
    cpu::paged_attention(alone.data() + t * row, rc.q.data() + t * row, 1, kNh, rc.kv, visible0 + t, 0.125f, nullptr,
                         nullptr, nullptr);
  return alone;
}

// A prefill's queries are attended in tiles of several queries per KV head (each K/V block converted once per
// tile): every query's output is the same bits as attending it alone, on one thread or two, with queries that
// start mid-block and tiles that end past the last query.
TEST_P(CpuTwinsDtype, PrefillTilesEqualOneQueryAtATime) {
  expect_tiles_equal(GetParam(), {{7, 45}, {1, 3}, {200, 21}}, 5, 3,
                     one_query_at_a_time);
}

// Past the split threshold a prefill's tiles are attended chunk by chunk (flash-decoding) with each K/V block
// converted once per tile: the same bits as the batch form, which attends every query on its own, for queries that
// straddle the 512-slot chunk edges and the 1024-slot threshold.
TEST_P(CpuTwinsDtype, LongPrefillTilesEqualTheBatchFormBitForBit) {
  expect_tiles_equal(GetParam(), {{1000, 40}, {1500, 17}, {1, 1100}}, 7, 2,
                     [](const RandomCache &rc, int32_t visible0, int32_t n_q, ThreadPool *tp) {
                       std::vector<float> rows(rc.q.size(), NAN);
                       std::vector<int32_t> off(static_cast<size_t>(n_q), 0), vis(static_cast<size_t>(n_q));
                       for (int32_t t = 0; t < n_q; ++t) vis[static_cast<size_t>(t)] = visible0 + t;
                       cpu::paged_attention_rows(rows.data(), rc.q.data(), n_q, kNh, rc.kv, off.data(), vis.data(),
                                                 visible0 + n_q - 1, 0.125f, tp);
                       return rows;
                     });
}

// Whether a query is attended in one pass or chunk by chunk is decided by its own visible count: a prefill whose
// queries straddle the 1024-slot threshold gives each query the bits it gets alone (so a prompt's results do not
// depend on where its chunks were cut), and so does a decode step batching a long sequence with a short one.
TEST_P(CpuTwinsDtype, EachQueryTakesThePathItsOwnLengthPicksWhateverShareTheCall) {
  expect_tiles_equal(GetParam(), {{1000, 40}, {1020, 9}, {1023, 2}}, 7, 2,
                     one_query_at_a_time);
  std::mt19937 g(test_seed());
  ThreadPool tp(2);
  const RandomCache rc(GetParam(), 1100, 3, 5, 3, g);
  const size_t row = static_cast<size_t>(kNh) * kHd;
  const std::vector<int32_t> off = {0, 0, 0}, vis = {1100, 300, 1024};
  std::vector<float> want(rc.q.size()), got(rc.q.size());
  for (size_t t = 0; t < vis.size(); ++t) {
    PagedKv s = rc.kv;
    s.n_slots = vis[t];
    cpu::paged_attention(want.data() + t * row, rc.q.data() + t * row, 1, kNh, s, vis[t], 0.125f, nullptr, nullptr, nullptr);
  }
  for (ThreadPool *pool : {static_cast<ThreadPool *>(nullptr), &tp}) {
    cpu::paged_attention_rows(got.data(), rc.q.data(), 3, kNh, rc.kv, off.data(), vis.data(), 1100, 0.125f, pool);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4)) << kv_dtype_name(GetParam());
  }
}

// Long contexts are attended in 512-slot chunks merged by their maxima (flash-decoding): the result equals a plain
// double-precision softmax attention over what the cache holds, and is the same bits for any thread count (the
// chunking depends on the visible count alone). A batch of a decode step (one query, 3000 slots) and of a prefill
// tail (three queries, 1030..1032 slots, across the 1024-slot threshold's chunk edge).
TEST_P(CpuTwinsDtype, LongContextAttentionMatchesPlainSoftmaxForAnyThreadCount) {
  const KvDtype dt = GetParam();
  std::mt19937 g(test_seed());
  const int32_t nh = kNh, hd = kHd, group = kNh / kNkv;
  for (const std::pair<int32_t, int32_t> &shape : {std::make_pair(3000, 1), std::make_pair(1030, 3)}) {
    const int32_t visible0 = shape.first, n_q = shape.second, n = visible0 + n_q - 1;
    RandomCache rc(dt, n, n_q, 5, 3, g);
    const PagedKv &kv = rc.kv;
    const std::vector<float> &q = rc.q;
    const float scale = 0.125f;  // as RandomCache::attend
    ThreadPool tp(2);
    const std::vector<float> one = rc.attend(visible0, nullptr), two = rc.attend(visible0, &tp);
    EXPECT_EQ(one, two) << kv_dtype_name(dt) << ": one thread and two differ";
    // The reference reads the cache back as stored (f16/bf16 rounding included) and works in double.
    std::vector<float> kr(static_cast<size_t>(hd)), vr(static_cast<size_t>(hd));
    double worst = 0;
    for (int32_t t = 0; t < n_q; ++t) {
      const int32_t vis = visible0 + t;
      for (int32_t h = 0; h < nh; ++h) {
        const float *qh = q.data() + (static_cast<size_t>(t) * nh + h) * hd;
        std::vector<double> sc(static_cast<size_t>(vis));
        double mx = -INFINITY;
        for (int32_t j = 0; j < vis; ++j) {
          cpu::kv_read(kr.data(), kv, j, h / group, 0);
          double d = 0;
          for (int32_t i = 0; i < hd; ++i) d += static_cast<double>(qh[i]) * kr[static_cast<size_t>(i)];
          sc[static_cast<size_t>(j)] = d * scale;
          mx = std::max(mx, sc[static_cast<size_t>(j)]);
        }
        std::vector<double> acc(static_cast<size_t>(hd), 0.0);
        double sum = 0;
        for (int32_t j = 0; j < vis; ++j) {
          const double w = std::exp(sc[static_cast<size_t>(j)] - mx);
          sum += w;
          cpu::kv_read(vr.data(), kv, j, h / group, 1);
          for (int32_t i = 0; i < hd; ++i) acc[static_cast<size_t>(i)] += w * vr[static_cast<size_t>(i)];
        }
        const float *got = one.data() + (static_cast<size_t>(t) * nh + h) * hd;
        for (int32_t i = 0; i < hd; ++i) worst = std::max(worst, std::fabs(got[i] - acc[static_cast<size_t>(i)] / sum));
      }
    }
    EXPECT_LT(worst, 2e-5) << kv_dtype_name(dt) << " visible " << visible0 << ", " << n_q << " queries";
  }
}

// Prefill tiles pair their query heads two to a vector with AVX-512 (lanes of two AVX2 chains, finished together),
// four rows at a time across the tile's queries, with the keys all four see first: for head dims that do and do not
// suit the pairs (multiples of 16, of 8 only, neither), groups of one to four heads (so the rows of a tile split
// across queries), and a diagonal block where the rows' key counts differ, every query's output is the bits of
// attending it alone, whatever the thread count; and close to a plain softmax attention.
TEST_P(CpuTwinsDtype, PrefillTilesEqualOneQueryAtATimeForAnyHeadShape) {
  const KvDtype dt = GetParam();
  std::mt19937 g(test_seed());
  ThreadPool tp(2);
  for (int32_t hd : {16, 64, 128, 24, 12})
    for (int32_t group : {1, 2, 3, 4}) {
      if (!kv_dtype_fits(dt, hd)) continue;
      const int32_t nkv = 2, nh = nkv * group, bs = 16, visible0 = 9, n_q = 29, n = visible0 + n_q - 1;
      const int32_t nb = (n + bs - 1) / bs;
      const int64_t stride = 2LL * nkv * bs * kv_bytes(dt, hd);
      std::vector<int32_t> table(static_cast<size_t>(nb));
      for (int32_t b = 0; b < nb; ++b) table[static_cast<size_t>(b)] = (b * 2 + 1) % nb;
      std::vector<uint8_t> pool(static_cast<size_t>(stride * nb));
      const PagedKv kv{pool.data(), stride, table.data(), n, bs, nkv, hd, dt};
      const std::vector<float> k = randn(static_cast<size_t>(n) * nkv * hd, g, 2.0f), v = randn(k.size(), g);
      cpu::kv_append(kv, 0, k.data(), v.data(), n);
      const std::vector<float> q = randn(static_cast<size_t>(n_q) * nh * hd, g);
      const size_t row = static_cast<size_t>(nh) * hd;
      std::vector<float> alone(q.size(), NAN);
      for (int32_t t = 0; t < n_q; ++t)
        cpu::paged_attention(alone.data() + t * row, q.data() + t * row, 1, nh, kv, visible0 + t, 0.3f, nullptr, nullptr,
                             nullptr);
      for (ThreadPool *tpp : {static_cast<ThreadPool *>(nullptr), &tp}) {
        std::vector<float> tiled(q.size(), NAN);
        cpu::paged_attention(tiled.data(), q.data(), n_q, nh, kv, visible0, 0.3f, nullptr, nullptr, tpp);
        EXPECT_EQ(0, std::memcmp(tiled.data(), alone.data(), alone.size() * 4))
            << kv_dtype_name(dt) << " hd " << hd << " group " << group << (tpp ? ", two threads" : ", one thread");
      }
      // and the values: a plain double softmax over what the cache holds, for the last query
      const int32_t t = n_q - 1, vis = visible0 + t;
      std::vector<float> kr(static_cast<size_t>(hd)), vr(static_cast<size_t>(hd));
      double worst = 0;
      for (int32_t h = 0; h < nh; ++h) {
        const float *qh = q.data() + (static_cast<size_t>(t) * nh + h) * hd;
        std::vector<double> sc(static_cast<size_t>(vis)), acc(static_cast<size_t>(hd), 0.0);
        double mx = -INFINITY, sum = 0;
        for (int32_t j = 0; j < vis; ++j) {
          cpu::kv_read(kr.data(), kv, j, h / group, 0);
          double d = 0;
          for (int32_t i = 0; i < hd; ++i) d += static_cast<double>(qh[i]) * kr[static_cast<size_t>(i)];
          sc[static_cast<size_t>(j)] = d * 0.3;
          mx = std::max(mx, sc[static_cast<size_t>(j)]);
        }
        for (int32_t j = 0; j < vis; ++j) {
          const double w = std::exp(sc[static_cast<size_t>(j)] - mx);
          sum += w;
          cpu::kv_read(vr.data(), kv, j, h / group, 1);
          for (int32_t i = 0; i < hd; ++i) acc[static_cast<size_t>(i)] += w * vr[static_cast<size_t>(i)];
        }
        const float *got = alone.data() + static_cast<size_t>(t) * row + static_cast<size_t>(h) * hd;
        for (int32_t i = 0; i < hd; ++i) worst = std::max(worst, std::fabs(got[i] - acc[static_cast<size_t>(i)] / sum));
      }
      EXPECT_LT(worst, 2e-5) << kv_dtype_name(dt) << " hd " << hd << " group " << group;
    }
}

INSTANTIATE_TEST_SUITE_P(KvDtypes, CpuTwinsDtype, infokv_test::all_kv_dtypes(), infokv_test::kv_dtype_param_name);

// The batch forms equal the per-sequence calls they replace, bit for bit.
TEST(CpuTwins, AttentionRowsAndAppendRowsEqualPerSequenceCalls) {
  std::mt19937 g(test_seed());
  const int32_t bs = 4, nkv = 2, hd = 8, nh = 4, nb = 40;
  const int64_t stride = 2LL * nkv * bs * kv_bytes(KvDtype::f16, hd);
  std::vector<int32_t> table(nb);
  for (int32_t b = 0; b < nb; ++b) table[static_cast<size_t>(b)] = (b * 7) % nb;  // scattered
  std::vector<uint8_t> pool(static_cast<size_t>(stride * nb));
  PagedKv kv{pool.data(), stride, table.data(), nb * bs, bs, nkv, hd, KvDtype::f16};
  auto k = randn(static_cast<size_t>(nb * bs * nkv * hd), g), v = randn(k.size(), g);
  cpu::kv_append(kv, 0, k.data(), v.data(), nb * bs);
  const std::vector<int32_t> off = {0, 5, 12, 30}, vis = {1, 17, 64, 40};
  auto q = randn(off.size() * nh * hd, g);
  std::vector<float> want(q.size()), got(q.size());
  for (size_t t = 0; t < off.size(); ++t) {
    PagedKv s = kv;
    s.block_table = table.data() + off[t];
    s.n_slots = vis[t];
    cpu::paged_attention(want.data() + t * nh * hd, q.data() + t * nh * hd, 1, nh, s, vis[t], 0.3f, nullptr, nullptr, nullptr);
  }
  cpu::paged_attention_rows(got.data(), q.data(), static_cast<int64_t>(off.size()), nh, kv, off.data(), vis.data(), 64, 0.3f, nullptr);
  EXPECT_EQ(got, want);

  std::vector<uint8_t> pool2 = pool;
  PagedKv kv2 = kv;
  kv2.pool = pool2.data();
  auto nk = randn(3 * nkv * hd, g), nv = randn(nk.size(), g);
  const std::vector<int32_t> slots = {9, 70, 131};  // three positions of the table
  std::vector<int32_t> addr;
  for (size_t t = 0; t < slots.size(); ++t) {
    cpu::kv_append(kv, slots[t], nk.data() + t * nkv * hd, nv.data() + t * nkv * hd, 1);
    addr.insert(addr.end(), {table[static_cast<size_t>(slots[t] / bs)], slots[t] % bs});
  }
  cpu::kv_append_rows(kv2, addr.data(), nk.data(), nv.data(), 3);
  EXPECT_EQ(pool2, pool);
}

TEST(CpuTwins, RepChangeIsOneMinusCosineAgainstTheLastLayer) {
  std::mt19937 g(test_seed());
  const int64_t L = 3, n = 4, d = 16;
  auto h = randn(static_cast<size_t>(L * n * d), g);
  for (int64_t e = 0; e < d; ++e) h[static_cast<size_t>((0 * n + 1) * d + e)] = 0.0f;  // a zero vector: change 0
  for (int64_t e = 0; e < d; ++e) h[static_cast<size_t>((1 * n + 2) * d + e)] = -2.0f * h[static_cast<size_t>((2 * n + 2) * d + e)];
  std::vector<float> out(static_cast<size_t>(L * n));
  cpu::rep_change_rows(out.data(), h.data(), L, n, d);
  EXPECT_EQ(out[0 * n + 1], 0.0f);
  EXPECT_NEAR(out[1 * n + 2], 2.0f, 1e-6);  // opposite direction
  for (int64_t t = 0; t < n; ++t) EXPECT_NEAR(out[static_cast<size_t>((L - 1) * n + t)], 0.0f, 1e-6);
  // an independent computation of one entry
  double ab = 0, aa = 0, bb = 0;
  for (int64_t e = 0; e < d; ++e) {
    const double a = h[static_cast<size_t>((0 * n + 3) * d + e)], b = h[static_cast<size_t>((2 * n + 3) * d + e)];
    ab += a * b; aa += a * a; bb += b * b;
  }
  EXPECT_NEAR(out[0 * n + 3], 1.0 - ab / std::sqrt(aa * bb), 1e-6);
}


TEST(CpuTwins, TopkEntropyRowsMatchesPerRowEntropy) {
  std::mt19937 g(test_seed());
  const int64_t r = 4;
  const int32_t n = 300;
  auto x = randn(static_cast<size_t>(r * n), g, 3.0f);
  x[5] = x[6] = x[7];  // ties
  std::vector<double> e(r);
  for (int32_t k : {0, 1, 10, 300, 1000}) {
    cpu::topk_entropy_rows(e.data(), x.data(), r, n, k);
    for (int64_t i = 0; i < r; ++i) EXPECT_DOUBLE_EQ(e[i], cpu::topk_entropy(x.data() + i * n, n, k));
  }
  // the k-th largest found by the heap: the same entropy, to the bit, as the threshold from a full sort (a
  // vocabulary-sized row with runs of equal values around the threshold)
  const int32_t v = 5000;
  auto big = randn(static_cast<size_t>(v), g, 4.0f);
  for (int32_t i = 0; i < v; i += 7) big[static_cast<size_t>(i)] = std::round(big[static_cast<size_t>(i)]);
  for (int32_t k : {1, 2, 63, 256, 999, 4999}) {
    std::vector<float> sorted(big);
    std::sort(sorted.begin(), sorted.end(), [](float a, float b) { return a > b; });
    const float thr = sorted[static_cast<size_t>(k - 1)];
    double mx = sorted[0], z = 0, zl = 0;
    int32_t above = 0;
    for (float y : big) above += y > thr;
    int32_t ties = k - above;
    for (float y : big) {
      if (!(y > thr || (y == thr && ties-- > 0))) continue;
      const double l = static_cast<double>(y) - mx;
      z += std::exp(l);
      zl += std::exp(l) * l;
    }
    EXPECT_EQ(cpu::topk_entropy(big.data(), v, k), std::log(z) - zl / z) << "k " << k;
  }
  // uniform logits: entropy is log(k)
  std::vector<float> u(64, 1.5f);
  cpu::topk_entropy_rows(e.data(), u.data(), 1, 64, 16);
  EXPECT_NEAR(e[0], std::log(16.0), 1e-12);
}
