// The 8-bit-activation decode products (kernels/cpu/matmul_act8.hpp) on random weights of every type they cover:
// the vectorised quantisation gives the portable one's bytes, the vectorised dots the portable reference's integers
// (so the two agree to float rounding), both match a float64 sum over the dequantised weights and activations, the
// result is the same bits on one or two threads, it stays close to the exact f32 product, and a NaN in x comes out
// as NaN. On a CPU without AVX-512 VNNI the vectorised side is the reference itself (act8_fast() is false).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/matmul_act8.hpp"
#include "kernels/cpu/matmul_i16.hpp"
#include "kernels/thread_pool.hpp"
#include "kernels/fp16.hpp"
#include "kernels/ggml_types.hpp"
#include "kernels/ops.hpp"
#include "support/random_inputs.hpp"

using infokv::GgmlType;

namespace {

uint32_t u(GgmlType t) { return static_cast<uint32_t>(t); }

struct Geometry {
  GgmlType type;
  int64_t qk, bb;
};

// Random weight rows: random code bytes, and scales (f16 fields) drawn so the values are of order 0.1.
std::vector<uint8_t> random_rows(const Geometry &g, int64_t m, int64_t k, std::mt19937_64 &rng) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.002f, 0.03f);
  const int64_t nb = k / g.qk;
  std::vector<uint8_t> w(static_cast<size_t>(m * nb * g.bb));
  for (auto &b : w) b = static_cast<uint8_t>(byte(rng));
  auto put = [&](uint8_t *p, float v) {
    const uint16_t h = infokv::float_to_fp16(v);
    std::memcpy(p, &h, 2);
  };
  for (int64_t b = 0; b < m * nb; ++b) {
    uint8_t *blk = w.data() + b * g.bb;
    switch (g.type) {
      case GgmlType::Q4_1: case GgmlType::Q5_1: put(blk, scale(rng)); put(blk + 2, -8 * scale(rng)); break;
      case GgmlType::Q4_K: case GgmlType::Q5_K: put(blk, scale(rng) / 8); put(blk + 2, scale(rng) / 8); break;
      case GgmlType::Q6_K: put(blk + 208, scale(rng) / 16); break;
      default: put(blk, scale(rng)); break;
    }
  }
  return w;
}

const Geometry kTypes[] = {{GgmlType::Q4_0, 32, 18}, {GgmlType::Q4_1, 32, 20}, {GgmlType::Q5_0, 32, 22},
                           {GgmlType::Q8_0, 32, 34}, {GgmlType::Q4_K, 256, 144}, {GgmlType::Q6_K, 256, 210}};

TEST(MatmulAct8, QuantisationBytesMatchTheReference) {
  std::mt19937_64 rng(infokv_test::test_seed());
  for (const int planes : {1, 2})
  for (const Geometry &g : kTypes) {
    const int64_t k = 512;
    std::vector<float> x(static_cast<size_t>(k));
    std::normal_distribution<float> nd(0.0f, 2.0f);
    for (float &v : x) v = nd(rng);
    x[7] = 0.0f;
    infokv::cpu::Act8 fast, ref;
    infokv::cpu::act8_quantize(x.data(), k, u(g.type), planes, &fast);
    infokv::cpu::act8_quantize_ref(x.data(), k, u(g.type), planes, &ref);
    EXPECT_EQ(fast.q, ref.q) << infokv::ggml_type_name(u(g.type));
    EXPECT_EQ(fast.q2, ref.q2) << infokv::ggml_type_name(u(g.type));
    EXPECT_EQ(std::memcmp(fast.d.data(), ref.d.data(), ref.d.size() * 4), 0);
    EXPECT_EQ(fast.corr, ref.corr);
    EXPECT_EQ(fast.corr2, ref.corr2);
    EXPECT_EQ(std::memcmp(fast.qsum32.data(), ref.qsum32.data(), ref.qsum32.size() * 4), 0);
    // each value is its block's unit times a code within 127 * 257, off by at most half a unit (plus the last
    // plane's clamp at 127 of 128), and by float's rounding of t = x * (1 / d): up to |t| * 2^-23 of a step for the
    // first plane, 256 times that in the second plane's units (about 0.004: seed 2529934848 reached 1.00047)
    for (int64_t i = 0; i < k; ++i) {
      const size_t at = static_cast<size_t>(i);
      const double unit = ref.unit[static_cast<size_t>(i / ref.block)];
      const double code = planes == 2 ? 256.0 * ref.q[at] + ref.q2[at] : ref.q[at];
      EXPECT_LE(std::abs(ref.q[at]), 127);
      if (planes == 2) { EXPECT_LE(std::abs(ref.q2[at]), 127); }
      const double t_err = 128.0 * std::ldexp(1.0, -23) * (planes == 2 ? 256.0 : 1.0);
      EXPECT_LE(std::fabs(x[at] - unit * code), ((planes == 2 ? 1.0 : 0.5) + t_err) * unit);
    }
  }
}

TEST(MatmulAct8, DotsMatchTheReferenceAndFloat64OnEveryType) {
  std::mt19937_64 rng(infokv_test::test_seed());
  infokv::ThreadPool pool2(2);
  for (const int planes : {1, 2})
  for (const Geometry &g : kTypes) {
    // an odd number of 32-blocks where the type allows it (the vector kernels take blocks two at a time)
    for (const int64_t k : {g.qk == 32 ? int64_t{288} : int64_t{512}, g.qk == 32 ? int64_t{576} : int64_t{768}, int64_t{1024}}) {
      const int64_t m = 37;
      const std::vector<uint8_t> w = random_rows(g, m, k, rng);
      std::vector<float> wf(static_cast<size_t>(m * k));
      ASSERT_TRUE(infokv::cpu::dequantize(wf.data(), w.data(), u(g.type), m * k));
      for (const int64_t n : {1, 3, 9}) {
        std::vector<float> x(static_cast<size_t>(n * k));
        std::normal_distribution<float> nd(0.0f, 1.0f);
        for (float &v : x) v = nd(rng);
        std::vector<float> out1(static_cast<size_t>(n * m), NAN), out2(out1.size(), NAN);
        ASSERT_TRUE(infokv::cpu::matmul_act8(out1.data(), x.data(), w.data(), u(g.type), n, m, k, planes, nullptr));
        ASSERT_TRUE(infokv::cpu::matmul_act8(out2.data(), x.data(), w.data(), u(g.type), n, m, k, planes, &pool2));
        EXPECT_EQ(std::memcmp(out1.data(), out2.data(), out1.size() * 4), 0) << "thread count changed the bits";
        for (int64_t t = 0; t < n; ++t) {
          infokv::cpu::Act8 a;
          infokv::cpu::act8_quantize_ref(x.data() + t * k, k, u(g.type), planes, &a);
          for (int64_t r = 0; r < m; ++r) {
            // float64 over the dequantised weights and the activations as their codes times their scales
            double exact = 0.0, mag = 0.0, full = 0.0;
            for (int64_t i = 0; i < k; ++i) {
              const double wi = wf[static_cast<size_t>(r * k + i)];
              const size_t at = static_cast<size_t>(i);
              const double code = planes == 2 ? 256.0 * a.q[at] + a.q2[at] : a.q[at];
              const double xi = static_cast<double>(a.unit[static_cast<size_t>(i / a.block)]) * code;
              exact += wi * xi;
              mag += std::fabs(wi * xi);
              full += wi * x[static_cast<size_t>(t * k + i)];
            }
            const float ref = infokv::cpu::act8_dot_ref(w.data() + r * (k / g.qk) * g.bb, u(g.type), a);
            const float got = out1[static_cast<size_t>(t * m + r)];
            const double tol = 1e-5 * mag + 1e-30;
            EXPECT_NEAR(ref, exact, tol) << infokv::ggml_type_name(u(g.type)) << " k " << k << " row " << r;
            EXPECT_NEAR(got, exact, tol) << infokv::ggml_type_name(u(g.type)) << " k " << k << " row " << r;
            // rounding x to 8 (16) bits moves the product by a small part of its magnitude
            EXPECT_NEAR(got, full, (planes == 2 ? 1e-4 : 0.02) * mag) << infokv::ggml_type_name(u(g.type));
          }
        }
      }
    }
  }
}

// Tokens dotted together (rows unpacked once for four of them) get the bits each gets alone: a sequence decoded in a
// batch of several gets the logits it gets alone (cpu::RowsIndependent).
TEST(MatmulAct8, ManyTokensGiveEachTokenTheBitsItGetsAlone) {
  std::mt19937_64 rng(infokv_test::test_seed());
  for (const int planes : {1, 2})
  for (const Geometry &g : kTypes) {
    for (const int64_t k : {g.qk == 32 ? int64_t{160} : int64_t{512}, g.qk == 32 ? int64_t{576} : int64_t{768}}) {
      const int64_t m = 21;
      const std::vector<uint8_t> w = random_rows(g, m, k, rng);
      for (const int64_t n : {4, 5, 8, 11, 15}) {
        std::vector<float> x(static_cast<size_t>(n * k));
        std::normal_distribution<float> nd(0.0f, 1.5f);
        for (float &v : x) v = nd(rng);
        std::vector<float> together(static_cast<size_t>(n * m), NAN), alone(static_cast<size_t>(m), NAN);
        ASSERT_TRUE(infokv::cpu::matmul_act8(together.data(), x.data(), w.data(), u(g.type), n, m, k, planes, nullptr));
        for (int64_t t = 0; t < n; ++t) {
          ASSERT_TRUE(infokv::cpu::matmul_act8(alone.data(), x.data() + t * k, w.data(), u(g.type), 1, m, k, planes, nullptr));
          EXPECT_EQ(std::memcmp(alone.data(), together.data() + t * m, static_cast<size_t>(m) * 4), 0)
              << infokv::ggml_type_name(u(g.type)) << " k " << k << " n " << n << " token " << t << " planes " << planes;
        }
      }
    }
  }
}

TEST(MatmulAct8, NonFiniteActivationsGiveNaN) {
  std::mt19937_64 rng(infokv_test::test_seed());
  for (const int planes : {1, 2})
  for (const Geometry &g : kTypes) {
    const int64_t k = 512, m = 5;
    const std::vector<uint8_t> w = random_rows(g, m, k, rng);
    std::vector<float> x(static_cast<size_t>(k), 0.5f);
    for (const float bad : {NAN, INFINITY}) {
      x[300] = bad;
      std::vector<float> out(static_cast<size_t>(m), 0.0f);
      ASSERT_TRUE(infokv::cpu::matmul_act8(out.data(), x.data(), w.data(), u(g.type), 1, m, k, planes, nullptr));
      for (float o : out) EXPECT_TRUE(std::isnan(o)) << infokv::ggml_type_name(u(g.type));
    }
  }
}

// Values so small that 1 / (max|x| / 127) is infinite (and 0 * inf would be NaN): the block counts as zeros, the
// same bytes on both quantisations, and the products stay finite.
TEST(MatmulAct8, TinyActivationsGiveFiniteResults) {
  std::mt19937_64 rng(infokv_test::test_seed());
  for (const int planes : {1, 2})
  for (const Geometry &g : kTypes) {
    const int64_t k = 512, m = 5;
    const std::vector<uint8_t> w = random_rows(g, m, k, rng);
    std::vector<float> x(static_cast<size_t>(k));
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (float &v : x) v = nd(rng) * 1e-38f;
    x[3] = 0.0f;
    infokv::cpu::Act8 fast, ref;
    infokv::cpu::act8_quantize(x.data(), k, u(g.type), planes, &fast);
    infokv::cpu::act8_quantize_ref(x.data(), k, u(g.type), planes, &ref);
    EXPECT_EQ(fast.q, ref.q);
    EXPECT_EQ(fast.q2, ref.q2);
    std::vector<float> out(static_cast<size_t>(m), NAN);
    ASSERT_TRUE(infokv::cpu::matmul_act8(out.data(), x.data(), w.data(), u(g.type), 1, m, k, planes, nullptr));
    for (float o : out) EXPECT_TRUE(std::isfinite(o)) << infokv::ggml_type_name(u(g.type));
  }
}

TEST(MatmulAct8, DecodeTakesTheChosenActivations) {
  // matmul (ops.hpp) takes the 8-bit products for decode only when chosen and the CPU has them
  std::mt19937_64 rng(infokv_test::test_seed());
  const Geometry g{GgmlType::Q4_0, 32, 18};
  const int64_t k = 512, m = 9;
  const std::vector<uint8_t> w = random_rows(g, m, k, rng);
  std::vector<float> x(static_cast<size_t>(k));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float &v : x) v = nd(rng);
  std::vector<float> f32(static_cast<size_t>(m)), int8(f32.size()), int16(f32.size()), d8(f32.size()), d16(f32.size());
  const infokv::CpuActivations before = infokv::cpu_activations();
  infokv::set_cpu_activations(infokv::CpuActivations::f32);
  ASSERT_TRUE(infokv::cpu::matmul(f32.data(), x.data(), w.data(), u(g.type), 1, m, k, nullptr));
  infokv::set_cpu_activations(infokv::CpuActivations::int8);
  ASSERT_TRUE(infokv::cpu::matmul(int8.data(), x.data(), w.data(), u(g.type), 1, m, k, nullptr));
  infokv::set_cpu_activations(infokv::CpuActivations::int16);
  ASSERT_TRUE(infokv::cpu::matmul(int16.data(), x.data(), w.data(), u(g.type), 1, m, k, nullptr));
  infokv::set_cpu_activations(before);
  ASSERT_TRUE(infokv::cpu::matmul_act8(d8.data(), x.data(), w.data(), u(g.type), 1, m, k, 1, nullptr));
  ASSERT_TRUE(infokv::cpu::matmul_act8(d16.data(), x.data(), w.data(), u(g.type), 1, m, k, 2, nullptr));
  auto same = [](const std::vector<float> &a, const std::vector<float> &b) { return std::memcmp(a.data(), b.data(), a.size() * 4) == 0; };
  if (infokv::cpu::act8_fast()) {
    EXPECT_TRUE(same(int8, d8));
    EXPECT_TRUE(same(int16, d16));
    EXPECT_FALSE(same(int8, f32));
    EXPECT_FALSE(same(int16, int8));
  } else {
    EXPECT_TRUE(same(int8, f32)) << "no VNNI: decode keeps f32";
    EXPECT_TRUE(same(int16, f32));
  }
}

}  // namespace

// ---- Prefill products with integer activations (kernels/cpu/matmul_i16.hpp) ----
namespace {

const Geometry kI16Types[] = {{GgmlType::Q4_0, 32, 18}, {GgmlType::Q4_1, 32, 20}, {GgmlType::Q5_0, 32, 22},
                              {GgmlType::Q5_1, 32, 24}, {GgmlType::Q8_0, 32, 34}, {GgmlType::Q4_K, 256, 144},
                              {GgmlType::Q5_K, 256, 176}, {GgmlType::Q6_K, 256, 210}};

std::vector<float> normal_values(int64_t n, float sd, std::mt19937_64 &rng) {
  std::vector<float> x(static_cast<size_t>(n));
  std::normal_distribution<float> nd(0.0f, sd);
  for (float &v : x) v = nd(rng);
  return x;
}

bool same_bits(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// The reference against float64 over the dequantised weights and x: within the rounding of x to 16 (8) bits.
TEST(MatmulI16, ReferenceIsTheProductWithinTheActivationsRounding) {
  std::mt19937_64 rng(infokv_test::test_seed());
  for (const int32_t qmax : {127, 32767})
  for (const Geometry &g : kI16Types) {
    const int64_t k = 512, m = 13, n = 19;
    const std::vector<uint8_t> w = random_rows(g, m, k, rng);
    std::vector<float> wf(static_cast<size_t>(m * k));
    ASSERT_TRUE(infokv::cpu::dequantize(wf.data(), w.data(), u(g.type), m * k));
    const std::vector<float> x = normal_values(n * k, 1.0f, rng);
    std::vector<float> out(static_cast<size_t>(n * m), NAN);
    ASSERT_TRUE(infokv::cpu::matmul_i16_ref(out.data(), x.data(), w.data(), u(g.type), n, m, k, qmax));
    for (int64_t t = 0; t < n; ++t)
      for (int64_t r = 0; r < m; ++r) {
        double exact = 0.0, mag = 0.0;
        for (int64_t i = 0; i < k; ++i) {
          const double p = static_cast<double>(wf[static_cast<size_t>(r * k + i)]) * x[static_cast<size_t>(t * k + i)];
          exact += p;
          mag += std::fabs(p);
        }
        EXPECT_NEAR(out[static_cast<size_t>(t * m + r)], exact, (qmax == 127 ? 0.02 : 1e-4) * mag)
            << infokv::ggml_type_name(u(g.type)) << " qmax " << qmax << " token " << t << " row " << r;
      }
  }
}

// The vector kernels give the reference's bits, on one thread or two, for token counts that fill no whole group of
// 32 and row counts that fill no whole tile.
TEST(MatmulI16, VectorKernelsGiveTheReferenceBits) {
  if (!infokv::cpu_has_avx512_vnni()) GTEST_SKIP() << "no AVX-512 VNNI: the reference is all that runs";
  std::mt19937_64 rng(infokv_test::test_seed());
  infokv::ThreadPool pool2(2);
  for (const int32_t qmax : {127, 32767})
  for (const Geometry &g : kI16Types)
  for (const int64_t k : {int64_t{256}, g.qk == 32 ? int64_t{608} : int64_t{768}}) {
    const int64_t m = 47;
    const std::vector<uint8_t> w = random_rows(g, m, k, rng);
    for (const int64_t n : {int64_t{16}, int64_t{33}, int64_t{70}, k == 256 ? int64_t{530} : int64_t{17}}) {  // 530: two spans
      const std::vector<float> x = normal_values(n * k, 2.0f, rng);
      std::vector<float> ref(static_cast<size_t>(n * m), NAN), one(ref.size(), NAN), two(ref.size(), NAN);
      ASSERT_TRUE(infokv::cpu::matmul_i16_ref(ref.data(), x.data(), w.data(), u(g.type), n, m, k, qmax));
      ASSERT_TRUE(infokv::cpu::matmul_i16(one.data(), x.data(), w.data(), u(g.type), n, m, k, qmax, nullptr));
      ASSERT_TRUE(infokv::cpu::matmul_i16(two.data(), x.data(), w.data(), u(g.type), n, m, k, qmax, &pool2));
      EXPECT_TRUE(same_bits(ref, one)) << infokv::ggml_type_name(u(g.type)) << " k " << k << " n " << n << " qmax " << qmax;
      EXPECT_TRUE(same_bits(ref, two)) << infokv::ggml_type_name(u(g.type)) << " k " << k << " n " << n << " (2 threads)";
    }
  }
}

// A token's outputs do not depend on which tokens share its product (prefill in chunks of any size computes what
// one product computes), and a NaN or Inf in one token's x makes that token's outputs NaN and no other's.
TEST(MatmulI16, ATokenGetsTheSameBitsWhateverSharesItsProduct) {
  std::mt19937_64 rng(infokv_test::test_seed());
  for (const Geometry &g : kI16Types) {
    const int64_t k = 512, m = 11, n = 50;
    const std::vector<uint8_t> w = random_rows(g, m, k, rng);
    std::vector<float> x = normal_values(n * k, 1.0f, rng);
    x[static_cast<size_t>(40 * k + 100)] = NAN;
    x[static_cast<size_t>(45 * k + 7)] = INFINITY;
    // token 30: values too small for their scale to be inverted (and a zero among them): a block of zeros, not NaN
    for (int64_t i = 0; i < k; ++i) x[static_cast<size_t>(30 * k + i)] *= 1e-36f;
    x[static_cast<size_t>(30 * k + 5)] = 0.0f;
    std::vector<float> all(static_cast<size_t>(n * m)), part(static_cast<size_t>(20 * m));
    ASSERT_TRUE(infokv::cpu::matmul_i16_ref(all.data(), x.data(), w.data(), u(g.type), n, m, k, 32767));
    ASSERT_TRUE(infokv::cpu::matmul_i16_ref(part.data(), x.data() + 13 * k, w.data(), u(g.type), 20, m, k, 32767));
    EXPECT_EQ(std::memcmp(part.data(), all.data() + 13 * m, part.size() * 4), 0) << infokv::ggml_type_name(u(g.type));
    if (infokv::cpu_has_avx512_vnni()) {  // the vector kernels, NaN and Inf included
      std::vector<float> vec(all.size());
      ASSERT_TRUE(infokv::cpu::matmul_i16(vec.data(), x.data(), w.data(), u(g.type), n, m, k, 32767, nullptr));
      EXPECT_EQ(std::memcmp(vec.data(), all.data(), all.size() * 4), 0) << infokv::ggml_type_name(u(g.type));
    }
    for (int64_t t = 0; t < n; ++t)
      for (int64_t r = 0; r < m; ++r)
        EXPECT_EQ(std::isnan(all[static_cast<size_t>(t * m + r)]), t == 40 || t == 45) << "token " << t;
    for (int64_t r = 0; r < m; ++r) EXPECT_TRUE(std::isfinite(all[static_cast<size_t>(30 * m + r)]));
  }
}

// matmul (ops.hpp) takes the integer prefill products for 16 tokens or more when the activations setting and the CPU
// say so, and the f32 path otherwise.
TEST(MatmulI16, PrefillTakesTheChosenActivations) {
  std::mt19937_64 rng(infokv_test::test_seed());
  const Geometry g{GgmlType::Q4_K, 256, 144};
  const int64_t k = 512, m = 20, n = 24;
  const std::vector<uint8_t> w = random_rows(g, m, k, rng);
  const std::vector<float> x = normal_values(n * k, 1.0f, rng);
  std::vector<float> f32(static_cast<size_t>(n * m)), i8(f32.size()), i16(f32.size()), r8(f32.size()), r16(f32.size());
  const infokv::CpuActivations before = infokv::cpu_activations();
  infokv::set_cpu_activations(infokv::CpuActivations::f32);
  ASSERT_TRUE(infokv::cpu::matmul(f32.data(), x.data(), w.data(), u(g.type), n, m, k, nullptr));
  infokv::set_cpu_activations(infokv::CpuActivations::int8);
  ASSERT_TRUE(infokv::cpu::matmul(i8.data(), x.data(), w.data(), u(g.type), n, m, k, nullptr));
  infokv::set_cpu_activations(infokv::CpuActivations::int16);
  ASSERT_TRUE(infokv::cpu::matmul(i16.data(), x.data(), w.data(), u(g.type), n, m, k, nullptr));
  infokv::set_cpu_activations(before);
  ASSERT_TRUE(infokv::cpu::matmul_i16_ref(r8.data(), x.data(), w.data(), u(g.type), n, m, k, 127));
  ASSERT_TRUE(infokv::cpu::matmul_i16_ref(r16.data(), x.data(), w.data(), u(g.type), n, m, k, 32767));
  if (infokv::cpu_has_avx512_vnni()) {
    EXPECT_TRUE(same_bits(i8, r8));
    EXPECT_TRUE(same_bits(i16, r16));
    EXPECT_FALSE(same_bits(i16, f32));
  } else {
    EXPECT_TRUE(same_bits(i8, f32)) << "no VNNI: prefill keeps f32";
    EXPECT_TRUE(same_bits(i16, f32));
  }
}

}  // namespace
