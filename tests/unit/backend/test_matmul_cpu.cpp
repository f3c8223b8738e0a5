// CPU matrix products of float weights (f32/f16/bf16 read in place by the register-blocked tiles) against a float64
// reference, and each token's result the same bits alone, batched, and on one or two threads. Quantised weights
// are checked the same way in tests/unit/gguf/test_quant.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"
#include "kernels/fp16.hpp"
#include "kernels/ggml_types.hpp"
#include "kernels/ops.hpp"
#include "random_inputs.hpp"

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
