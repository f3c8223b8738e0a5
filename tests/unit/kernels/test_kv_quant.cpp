// The quantised KV blocks (kernels/kv_quant.hpp) against float64 references: the rotation, the two quantisers'
// rounding, the AVX2 widening, conversions between every pair of dtypes, and what non-finite or huge values give.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/kv_rows.hpp"
#include "kernels/kv_quant.hpp"
#include "kernels/ops.hpp"
#include "support/random_inputs.hpp"

using namespace infokv;
using infokv_test::randn;
using infokv_test::test_seed;

namespace {

// R = H32 diag(s) / sqrt(32) as a float64 matrix, H32 built from its definition (H[i][j] = (-1)^popcount(i & j)).
std::vector<double> rotation_matrix() {
  std::vector<double> r(32 * 32);
  for (int i = 0; i < 32; ++i)
    for (int j = 0; j < 32; ++j) {
      const double h = __builtin_popcount(static_cast<unsigned>(i & j)) % 2 ? -1.0 : 1.0;
      const double s = (kvq::kSigns >> j) & 1u ? -1.0 : 1.0;
      r[static_cast<size_t>(i * 32 + j)] = h * s / std::sqrt(32.0);
    }
  return r;
}

std::vector<double> rotate_ref(const float *x) {
  static const std::vector<double> r = rotation_matrix();
  std::vector<double> y(32, 0.0);
  for (int i = 0; i < 32; ++i)
    for (int j = 0; j < 32; ++j) y[static_cast<size_t>(i)] += r[static_cast<size_t>(i * 32 + j)] * x[j];
  return y;
}

// Random blocks with the outliers real keys have: one channel 30x the rest in a third of the blocks.
std::vector<float> blocks_with_outliers(int n_blocks, std::mt19937 &g) {
  std::vector<float> x = randn(static_cast<size_t>(n_blocks) * 32, g, 1.5f);
  std::uniform_int_distribution<int> ch(0, 31);
  for (int b = 0; b < n_blocks; b += 3) x[static_cast<size_t>(b * 32 + ch(g))] *= 30.0f;
  return x;
}

}  // namespace

TEST(KvQuant, RotationIsTheOrthonormalMatrixAndUnrotateUndoesIt) {
  std::mt19937 g(test_seed());
  const std::vector<float> x = blocks_with_outliers(64, g);
  double worst = 0, back = 0;
  for (int b = 0; b < 64; ++b) {
    const float *xb = x.data() + b * 32;
    float y[32];
    kvq::rotate32(y, xb);
    const std::vector<double> want = rotate_ref(xb);
    double norm_x = 0, norm_y = 0;
    for (int i = 0; i < 32; ++i) {
      worst = std::max(worst, std::fabs(y[i] - want[static_cast<size_t>(i)]));
      norm_x += static_cast<double>(xb[i]) * xb[i];
      norm_y += static_cast<double>(y[i]) * y[i];
    }
    EXPECT_NEAR(norm_y / norm_x, 1.0, 1e-5) << "block " << b;
    kvq::unrotate32(y);
    for (int i = 0; i < 32; ++i) back = std::max(back, static_cast<double>(std::fabs(y[i] - xb[i])) / (1.0 + std::fabs(xb[i])));
  }
  EXPECT_LT(worst, 1e-4);
  EXPECT_LT(back, 1e-5);
}

// In the rotated basis each value is within half a step of its float64 rotation (q8_0: d = max|y| / 127; q4_0:
// d = -m / 8, within a step at the clamped end), and the scale is the f16 of the float64 one.
TEST(KvQuant, BlocksRoundWithinHalfAStepOfTheFloat64Rotation) {
  std::mt19937 g(test_seed());
  const std::vector<float> x = blocks_with_outliers(256, g);
  for (KvDtype dt : {KvDtype::q8_0, KvDtype::q4_0}) {
    const int64_t bb = kv_bytes(dt, 32);
    std::vector<uint8_t> q(static_cast<size_t>(bb));
    for (int b = 0; b < 256; ++b) {
      const float *xb = x.data() + b * 32;
      cpu::store_row(q.data(), xb, 32, dt);
      const std::vector<double> y = rotate_ref(xb);
      double amax = 0, m = 0;
      for (double v : y)
        if (std::fabs(v) > amax) amax = std::fabs(v), m = v;
      const double d = dt == KvDtype::q8_0 ? amax / 127.0 : -m / 8.0;
      const float scale = kvq::scale_of(q.data());
      EXPECT_NEAR(scale, d, std::fabs(d) * 1e-3 + 1e-6) << kv_dtype_name(dt) << " block " << b;
      float got[32];
      cpu::load_row_rotated(got, q.data(), 32, dt);
      // Half a step, plus the f32 rotation's rounding (the blocks are rounded from it, not from the float64 one: a
      // value half a step from two levels may go either way); q4_0's clamp at +7 steps may also carry the f16
      // rounding of the scale, 8 steps' worth.
      const double tol = dt == KvDtype::q8_0 ? std::fabs(scale) * 0.5 + amax * 1e-5
                                             : std::fabs(scale) * 1.0 + std::fabs(d) * 8.0 / 2048.0 + amax * 1e-5;
      for (int i = 0; i < 32; ++i)
        ASSERT_LE(std::fabs(got[i] - y[static_cast<size_t>(i)]), tol) << kv_dtype_name(dt) << " block " << b << " value " << i;
      // and back in the original basis the error is the same size (R is orthogonal)
      float back[32];
      cpu::load_row(back, q.data(), 32, dt);
      double err = 0, ref = 0;
      for (int i = 0; i < 32; ++i) {
        err += (back[i] - xb[i]) * static_cast<double>(back[i] - xb[i]);
        ref += (got[i] - y[static_cast<size_t>(i)]) * (got[i] - y[static_cast<size_t>(i)]);
      }
      EXPECT_NEAR(std::sqrt(err), std::sqrt(ref), 1e-4 * (1.0 + amax)) << kv_dtype_name(dt) << " block " << b;
    }
  }
}

#if IKV_X86
// The AVX2 and AVX-512 widenings of q8_0, and AVX2's of q4_0, give the scalar dequantisers' bits (a small integer times
// an f16 scale is exact in f32).
TEST(KvQuant, WidenedWithAvx2AndAvx512EqualsTheScalarBlocks) {
  if (!cpu_has_avx2_fma_f16c()) GTEST_SKIP() << "no AVX2 on this CPU";
  std::mt19937 g(test_seed());
  const int n = 32 * 37;
  const std::vector<float> x = blocks_with_outliers(37, g);
  std::vector<uint8_t> q(static_cast<size_t>(kv_bytes(KvDtype::q8_0, n)));
  cpu::store_row(q.data(), x.data(), n, KvDtype::q8_0);
  std::vector<float> hw(static_cast<size_t>(n)), sc(static_cast<size_t>(n));
  cpu::load_q8_0_hw(hw.data(), q.data(), 37);
  for (int b = 0; b < 37; ++b) kvq::dequantize_q8_0_rotated(sc.data() + b * 32, q.data() + b * kvq::kQ8Bytes);
  EXPECT_EQ(0, std::memcmp(hw.data(), sc.data(), hw.size() * 4));
  std::vector<uint8_t> q4(static_cast<size_t>(kv_bytes(KvDtype::q4_0, n)));
  cpu::store_row(q4.data(), x.data(), n, KvDtype::q4_0);
  cpu::load_q4_0_hw(hw.data(), q4.data(), 37);
  std::vector<float> sc4(static_cast<size_t>(n));
  for (int b = 0; b < 37; ++b) kvq::dequantize_q4_0_rotated(sc4.data() + b * 32, q4.data() + b * kvq::kQ4Bytes);
  EXPECT_EQ(0, std::memcmp(hw.data(), sc4.data(), hw.size() * 4));
  if (!cpu_has_avx512()) return;
  std::vector<float> wide(static_cast<size_t>(n), NAN);
  cpu::load_q8_0_512(wide.data(), q.data(), 37);
  EXPECT_EQ(0, std::memcmp(wide.data(), sc.data(), wide.size() * 4));
}
#endif  // IKV_X86

// Every pair of dtypes converts through f32: a quantised source reads back its dequantised values, a quantised
// destination holds what storing those values gives, and a dtype converted to itself is copied bit for bit.
TEST(KvQuant, ConversionsBetweenEveryPairGoThroughF32) {
  std::mt19937 g(test_seed());
  const int n = 32 * 20;
  const std::vector<float> x = blocks_with_outliers(20, g);
  const KvDtype all[] = {KvDtype::f32, KvDtype::f16, KvDtype::bf16, KvDtype::q8_0, KvDtype::q4_0};
  for (KvDtype s : all)
    for (KvDtype d : all) {
      std::vector<uint8_t> src(static_cast<size_t>(kv_bytes(s, n))), got(static_cast<size_t>(kv_bytes(d, n))),
          want(got.size());
      cpu::store_row(src.data(), x.data(), n, s);
      cpu::convert(got.data(), d, src.data(), s, n);
      if (s == d) {
        EXPECT_EQ(got, src) << kv_dtype_name(s);
        continue;
      }
      std::vector<float> mid(static_cast<size_t>(n));
      cpu::load_row(mid.data(), src.data(), n, s);
      cpu::store_row(want.data(), mid.data(), n, d);
      EXPECT_EQ(got, want) << kv_dtype_name(s) << " -> " << kv_dtype_name(d);
    }
}

// A block holding NaN or an infinity gets a NaN scale (every value reads back NaN; a snapshot with one is refused);
// magnitudes whose scale would pass f16's range saturate at its largest scale instead of becoming infinite; zeros
// stay zeros.
TEST(KvQuant, NonFiniteBlocksGetANanScaleAndHugeOnesSaturate) {
  for (KvDtype dt : {KvDtype::q8_0, KvDtype::q4_0}) {
    std::vector<uint8_t> q(static_cast<size_t>(kv_bytes(dt, 32)));
    float x[32], y[32];
    for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
      for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i) - 7.0f;
      x[5] = bad;
      cpu::store_row(q.data(), x, 32, dt);
      EXPECT_FALSE(kvq::scale_finite(q.data())) << kv_dtype_name(dt);
      cpu::load_row(y, q.data(), 32, dt);
      for (float v : y) EXPECT_TRUE(std::isnan(v)) << kv_dtype_name(dt);
    }
    for (int i = 0; i < 32; ++i) x[i] = (i % 2 ? -1.0f : 1.0f) * 1e30f;
    cpu::store_row(q.data(), x, 32, dt);
    EXPECT_TRUE(kvq::scale_finite(q.data())) << kv_dtype_name(dt);
    cpu::load_row(y, q.data(), 32, dt);
    for (float v : y) EXPECT_TRUE(std::isfinite(v)) << kv_dtype_name(dt);
    for (float &v : x) v = 0.0f;
    cpu::store_row(q.data(), x, 32, dt);
    cpu::load_row(y, q.data(), 32, dt);
    for (float v : y) EXPECT_EQ(v, 0.0f) << kv_dtype_name(dt);
  }
}

TEST(KvQuant, LayoutAndNames) {
  EXPECT_EQ(kv_bytes(KvDtype::q8_0, 64), 68);
  EXPECT_EQ(kv_bytes(KvDtype::q4_0, 64), 36);
  EXPECT_EQ(kv_bytes(KvDtype::f16, 64), 128);
  EXPECT_TRUE(kv_dtype_fits(KvDtype::q8_0, 64));
  EXPECT_FALSE(kv_dtype_fits(KvDtype::q4_0, 8));
  EXPECT_TRUE(kv_dtype_fits(KvDtype::f16, 8));
  for (int32_t t = 1; t <= 5; ++t) {
    KvDtype got = KvDtype::f32;
    ASSERT_TRUE(kv_dtype_parse(kv_dtype_name(static_cast<KvDtype>(t)), &got));
    EXPECT_EQ(static_cast<int32_t>(got), t);
  }
  KvDtype got;
  EXPECT_FALSE(kv_dtype_parse("q8", &got));
  EXPECT_FALSE(kv_dtype_parse(nullptr, &got));
  EXPECT_FALSE(kv_dtype_valid(0));
  EXPECT_FALSE(kv_dtype_valid(6));
}
