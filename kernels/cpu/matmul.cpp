// out[n, m] = x[n, k] · W[m, k]^T for f32/f16/bf16 weights. AVX2+FMA path chosen at run time, portable fallback.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/dequant.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "kernels/fp16.hpp"
#include "kernels/ggml_types.hpp"
#include "kernels/ops.hpp"

namespace infokv {
namespace cpu {

namespace {

inline float load_w(const float *w, int64_t i) { return w[i]; }
inline float load_w(const uint16_t *w, int64_t i, bool bf16) { return bf16 ? bf16_to_float(w[i]) : fp16_to_float(w[i]); }

// Portable: four independent partial sums per dot product keep the FP dependency chains short.
template <typename W>
void rows_generic(float *out, const float *x, const W *w, int64_t n, int64_t m0, int64_t m1, int64_t m, int64_t k,
                  bool bf16) {
  for (int64_t r = m0; r < m1; ++r) {
    const W *wr = w + r * k;
    for (int64_t t = 0; t < n; ++t) {
      const float *xr = x + t * k;
      float s[4] = {0, 0, 0, 0};
      int64_t i = 0;
      for (; i + 4 <= k; i += 4)
        for (int j = 0; j < 4; ++j) {
          float wv;
          if constexpr (sizeof(W) == 4) wv = load_w(reinterpret_cast<const float *>(wr), i + j);
          else wv = load_w(reinterpret_cast<const uint16_t *>(wr), i + j, bf16);
          s[j] += xr[i + j] * wv;
        }
      float acc = (s[0] + s[1]) + (s[2] + s[3]);
      for (; i < k; ++i) {
        float wv;
        if constexpr (sizeof(W) == 4) wv = load_w(reinterpret_cast<const float *>(wr), i);
        else wv = load_w(reinterpret_cast<const uint16_t *>(wr), i, bf16);
        acc += xr[i] * wv;
      }
      out[t * m + r] = acc;
    }
  }
}

enum class WKind { f32, f16, bf16 };

__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(const void *w, int64_t i, WKind kind) {
  switch (kind) {
    case WKind::f32: return _mm256_loadu_ps(static_cast<const float *>(w) + i);
    case WKind::f16:
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(static_cast<const uint16_t *>(w) + i)));
    case WKind::bf16: {
      __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i *>(static_cast<const uint16_t *>(w) + i));
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
  }
  return _mm256_setzero_ps();
}

inline float load1(const void *w, int64_t i, WKind kind) {
  switch (kind) {
    case WKind::f32: return static_cast<const float *>(w)[i];
    case WKind::f16: return fp16_to_float(static_cast<const uint16_t *>(w)[i]);
    case WKind::bf16: return bf16_to_float(static_cast<const uint16_t *>(w)[i]);
  }
  return 0;
}

__attribute__((target("avx2,fma"))) inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  __m128 hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  __m128 sh = _mm_movehdup_ps(lo);
  __m128 s = _mm_add_ps(lo, sh);
  sh = _mm_movehl_ps(sh, s);
  s = _mm_add_ss(s, sh);
  return _mm_cvtss_f32(s);
}

// Every output is summed in the same order whatever the batch size (two vector accumulators over alternating
// 8-wide chunks, then the scalar tail), so a token's result does not depend on what it was batched with.
template <WKind K>
__attribute__((target("avx2,fma,f16c"))) void rows_avx2(float *out, const float *x, const void *w, int64_t n, int64_t m0,
                                                        int64_t m1, int64_t m, int64_t k) {
  const int64_t k8 = k & ~int64_t{7};
  const int64_t k16 = k & ~int64_t{15};
  const size_t esz = K == WKind::f32 ? 4 : 2;
  for (int64_t r = m0; r < m1; ++r) {
    const void *wr = static_cast<const uint8_t *>(w) + static_cast<size_t>(r * k) * esz;
    int64_t t = 0;
    // Four tokens at a time share each loaded weight vector.
    for (; t + 4 <= n; t += 4) {
      const float *xs[4] = {x + t * k, x + (t + 1) * k, x + (t + 2) * k, x + (t + 3) * k};
      __m256 a0[4], a1[4];
      for (int j = 0; j < 4; ++j) a0[j] = a1[j] = _mm256_setzero_ps();
      for (int64_t i = 0; i < k16; i += 16) {
        const __m256 w0 = load8(wr, i, K), w1 = load8(wr, i + 8, K);
        for (int j = 0; j < 4; ++j) {
          a0[j] = _mm256_fmadd_ps(_mm256_loadu_ps(xs[j] + i), w0, a0[j]);
          a1[j] = _mm256_fmadd_ps(_mm256_loadu_ps(xs[j] + i + 8), w1, a1[j]);
        }
      }
      if (k8 > k16) {
        const __m256 w0 = load8(wr, k16, K);
        for (int j = 0; j < 4; ++j) a0[j] = _mm256_fmadd_ps(_mm256_loadu_ps(xs[j] + k16), w0, a0[j]);
      }
      for (int j = 0; j < 4; ++j) {
        float s = hsum(_mm256_add_ps(a0[j], a1[j]));
        for (int64_t i = k8; i < k; ++i) s += xs[j][i] * load1(wr, i, K);
        out[(t + j) * m + r] = s;
      }
    }
    for (; t < n; ++t) {
      const float *xr = x + t * k;
      __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
      for (int64_t i = 0; i < k16; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(xr + i), load8(wr, i, K), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(xr + i + 8), load8(wr, i + 8, K), a1);
      }
      if (k8 > k16) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(xr + k16), load8(wr, k16, K), a0);
      float s = hsum(_mm256_add_ps(a0, a1));
      for (int64_t i = k8; i < k; ++i) s += xr[i] * load1(wr, i, K);
      out[t * m + r] = s;
    }
  }
}

// F16C is read from CPUID leaf 1 (ECX bit 29) because clang before 15 rejects __builtin_cpu_supports("f16c").
bool have_avx2() { return cpu_has_avx2_fma_f16c(); }

}  // namespace

bool matmul(float *out, const float *x, const void *w, uint32_t w_type, int64_t n, int64_t m, int64_t k, ThreadPool *pool) {
  WKind kind;
  switch (static_cast<GgmlType>(w_type)) {
    case GgmlType::F32: kind = WKind::f32; break;
    case GgmlType::F16: kind = WKind::f16; break;
    case GgmlType::BF16: kind = WKind::bf16; break;
    default: return matmul_quant(out, x, w, w_type, n, m, k, pool);
  }
  auto body = [&](int64_t m0, int64_t m1) {
    if (have_avx2()) {
      switch (kind) {
        case WKind::f32: rows_avx2<WKind::f32>(out, x, w, n, m0, m1, m, k); break;
        case WKind::f16: rows_avx2<WKind::f16>(out, x, w, n, m0, m1, m, k); break;
        case WKind::bf16: rows_avx2<WKind::bf16>(out, x, w, n, m0, m1, m, k); break;
      }
    } else if (kind == WKind::f32) {
      rows_generic(out, x, static_cast<const float *>(w), n, m0, m1, m, k, false);
    } else {
      rows_generic(out, x, static_cast<const uint16_t *>(w), n, m0, m1, m, k, kind == WKind::bf16);
    }
  };
  // Share the rows among threads only when each gets enough multiply-adds to pay for the hand-off.
  const int64_t work = n * m * k;
  if (pool == nullptr || pool->size() <= 1 || work < (int64_t{1} << 17)) {
    body(0, m);
  } else {
    int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, n * k));
    pool->parallel_for(m, grain, body);
  }
  return true;
}

}  // namespace cpu
}  // namespace infokv
