// CPU matrix products of float weights (f32/f16/bf16 read in place by the register-blocked tiles) against a float64
// reference, and each token's result the same bits alone, batched, and on one or two threads. Quantised weights
// are checked the same way in tests/unit/kernels/test_quant.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/thread_pool.hpp"
#include "kernels/fp16.hpp"
#include "kernels/ggml_types.hpp"
#include "kernels/ops.hpp"
#include "support/random_inputs.hpp"

using infokv::GgmlType;

namespace {

uint32_t u(GgmlType t) { return static_cast<uint32_t>(t); }

std::vector<float> normal(size_t n, std::mt19937_64 &rng, float sd = 1.0f) {
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(n);
  for (float &x : v) x = nd(rng);
  return v;
}

// Weights of a float type (raw bytes) and their f32 values.
std::vector<uint8_t> float_weights(GgmlType t, const std::vector<float> &f, std::vector<float> *exact) {
  const size_t esz = t == GgmlType::F32 ? 4 : 2;
  std::vector<uint8_t> b(f.size() * esz);
  exact->resize(f.size());
  for (size_t i = 0; i < f.size(); ++i) {
    if (t == GgmlType::F32) {
      std::memcpy(&b[4 * i], &f[i], 4);
      (*exact)[i] = f[i];
    } else {
      const uint16_t h = t == GgmlType::F16 ? infokv::float_to_fp16(f[i]) : infokv::float_to_bf16(f[i]);
      std::memcpy(&b[2 * i], &h, 2);
      (*exact)[i] = t == GgmlType::F16 ? infokv::fp16_to_float(h) : infokv::bf16_to_float(h);
    }
  }
  return b;
}

bool same_bits(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

class FloatMatmul : public ::testing::TestWithParam<GgmlType> {};

}  // namespace

// Shapes with a row count that is not a multiple of the tile and spans two of the blocks that prefill widens at a
// time (tile::block_rows: 28 rows at k = 576, 32 at k = 100 or 120), k with and without an 8-wide tail (and, for the
// 16-wide AVX-512 tile, 120 = 7 x 16 + 8 takes its extra 8-wide step), token counts
// from one (decode) past the 64-token chunk.
TEST_P(FloatMatmul, MatchesFloat64AndEveryTokenIsTheSameAloneOrBatchedOnAnyThreadCount) {
  const GgmlType t = GetParam();
  std::mt19937_64 rng(infokv_test::test_seed());
  infokv::ThreadPool pool2(2);
  for (int64_t k : {576, 100, 120}) {
    const int64_t m = 45;
    std::vector<float> wf;
    const std::vector<uint8_t> w = float_weights(t, normal(static_cast<size_t>(m * k), rng, 0.05f), &wf);
    const int64_t n = 70;
    const std::vector<float> x = normal(static_cast<size_t>(n * k), rng);
    std::vector<float> batched(static_cast<size_t>(n * m), NAN), batched2(batched.size(), NAN);
    ASSERT_TRUE(infokv::cpu::matmul(batched.data(), x.data(), w.data(), u(t), n, m, k, nullptr));
    ASSERT_TRUE(infokv::cpu::matmul(batched2.data(), x.data(), w.data(), u(t), n, m, k, &pool2));
    EXPECT_TRUE(same_bits(batched, batched2)) << "two threads changed the result, k=" << k;
    for (int64_t i = 0; i < n; ++i) {
      std::vector<float> alone(static_cast<size_t>(m), NAN);
      ASSERT_TRUE(infokv::cpu::matmul(alone.data(), x.data() + i * k, w.data(), u(t), 1, m, k, i % 2 ? &pool2 : nullptr));
      ASSERT_EQ(0, std::memcmp(alone.data(), batched.data() + i * m, static_cast<size_t>(m) * 4))
          << "token " << i << " differs alone and batched, k=" << k;
      for (int64_t r = 0; r < m; ++r) {
        double ref = 0, mag = 0;
        for (int64_t j = 0; j < k; ++j) {
          ref += static_cast<double>(x[i * k + j]) * wf[r * k + j];
          mag += std::fabs(static_cast<double>(x[i * k + j]) * wf[r * k + j]);
        }
        ASSERT_NEAR(batched[i * m + r], ref, 1e-6 * mag + 1e-7) << "token " << i << " row " << r << " k=" << k;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Weights, FloatMatmul, ::testing::Values(GgmlType::F32, GgmlType::F16, GgmlType::BF16),
                         [](const ::testing::TestParamInfo<GgmlType> &i) {
                           return std::string(infokv::ggml_type_name(u(i.param)));
                         });

namespace {

class GroupedMatmul : public ::testing::TestWithParam<GgmlType> {};

// The definition the grouped kernels must meet bit for bit: one fused multiply-add per element, i = 0 .. k-1 in
// order, starting from +0.
float fma_chain(const float *x, const float *w, int64_t k) {
  float s = 0.0f;
  for (int64_t i = 0; i < k; ++i) s = std::fma(w[i], x[i], s);
  return s;
}

}  // namespace

// f16/bf16 rows in the CPU's grouped layout (cpu::group_rows, what the CPU backend multiplies): the row lookup gives
// back each original row; every output is exactly the in-order FMA chain (so the AVX-512, AVX2 and portable kernels,
// which ctest runs this suite on, agree bit for bit), whether its token is alone, in a decode-sized product of 2 or 3,
// or in a prefill (panels of 6 or 12 tokens, a 64+ token chunk, past a 512-token span), on one or two threads; and it
// is within float64's reach. Row counts leave the last group of 32 partial (45, 100) or fill it (64).
TEST_P(GroupedMatmul, EveryOutputIsTheInOrderFmaChainWhateverTheBatchAndThreads) {
  const GgmlType t = GetParam();
  const uint32_t gt = infokv::cpu::grouped_type(u(t));
  ASSERT_NE(gt, 0u);
  std::mt19937_64 rng(infokv_test::test_seed());
  infokv::ThreadPool pool2(2);
  struct Shape {
    int64_t m, k, n;
  };
  for (const Shape sh : {Shape{45, 576, 70}, Shape{64, 100, 37}, Shape{100, 7, 13}, Shape{33, 40, 530}}) {
    const int64_t m = sh.m, k = sh.k, n = sh.n;
    std::vector<float> wf;
    const std::vector<uint8_t> w = float_weights(t, normal(static_cast<size_t>(m * k), rng, 0.05f), &wf);
    std::vector<uint16_t> g(static_cast<size_t>(infokv::cpu::grouped_elems(m, k)), 0xFFFF);
    infokv::cpu::group_rows(g.data(), reinterpret_cast<const uint16_t *>(w.data()), m, k, m % 2 ? &pool2 : nullptr);
    for (int64_t r = 0; r < m; ++r) {
      std::vector<float> row(static_cast<size_t>(k), NAN);
      ASSERT_TRUE(infokv::cpu::get_row(row.data(), g.data(), gt, r, k));
      ASSERT_EQ(0, std::memcmp(row.data(), wf.data() + r * k, static_cast<size_t>(k) * 4)) << "row " << r;
    }
    const std::vector<float> x = normal(static_cast<size_t>(n * k), rng);
    std::vector<float> batched(static_cast<size_t>(n * m), NAN), batched2(batched.size(), NAN);
    ASSERT_TRUE(infokv::cpu::matmul(batched.data(), x.data(), g.data(), gt, n, m, k, nullptr));
    ASSERT_TRUE(infokv::cpu::matmul(batched2.data(), x.data(), g.data(), gt, n, m, k, &pool2));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t r = 0; r < m; ++r) {
        const float want = fma_chain(x.data() + i * k, wf.data() + r * k, k);
        ASSERT_EQ(0, std::memcmp(&want, &batched[static_cast<size_t>(i * m + r)], 4))
            << "token " << i << " row " << r << " m=" << m << " k=" << k << ": " << batched[static_cast<size_t>(i * m + r)]
            << " vs " << want;
        double ref = 0, mag = 0;
        for (int64_t j = 0; j < k; ++j) {
          ref += static_cast<double>(x[i * k + j]) * wf[r * k + j];
          mag += std::fabs(static_cast<double>(x[i * k + j]) * wf[r * k + j]);
        }
        ASSERT_NEAR(want, ref, 1e-6 * mag + 1e-7) << "token " << i << " row " << r << " k=" << k;
      }
    EXPECT_TRUE(same_bits(batched, batched2)) << "two threads changed the result, m=" << m << " k=" << k;
    // Decode-sized products: tokens alone, in pairs and in threes.
    for (int64_t step : {1, 2, 3})
      for (int64_t i = 0; i + step <= std::min<int64_t>(n, 24); i += step) {
        std::vector<float> few(static_cast<size_t>(step * m), NAN);
        ASSERT_TRUE(infokv::cpu::matmul(few.data(), x.data() + i * k, g.data(), gt, step, m, k, i % 2 ? &pool2 : nullptr));
        ASSERT_EQ(0, std::memcmp(few.data(), batched.data() + i * m, few.size() * 4))
            << "tokens " << i << ".." << i + step - 1 << " differ from the batch, m=" << m << " k=" << k;
      }
  }
  EXPECT_EQ(infokv::cpu::grouped_type(u(GgmlType::F32)), 0u);
  EXPECT_EQ(infokv::cpu::grouped_type(u(GgmlType::Q8_0)), 0u);
}

INSTANTIATE_TEST_SUITE_P(Weights, GroupedMatmul, ::testing::Values(GgmlType::F16, GgmlType::BF16),
                         [](const ::testing::TestParamInfo<GgmlType> &i) {
                           return std::string(infokv::ggml_type_name(u(i.param)));
                         });
