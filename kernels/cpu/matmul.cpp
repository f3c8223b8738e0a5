// out[n, m] = x[n, k] · W[m, k]^T for f32/f16/bf16 weights. AVX2+FMA path chosen at run time, portable fallback.
#include "kernels/cpu/simd.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/dequant.hpp"
#include "kernels/cpu/gemm_tile.hpp"
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

using tile::WKind;

// k f16/bf16 weights widened to f32 (exactly).
template <WKind K>
__attribute__((target("avx2,fma,f16c"))) void widen_row(float *dst, const uint8_t *src, int64_t k) {
  const int64_t k8 = k & ~int64_t{7};
  for (int64_t i = 0; i < k8; i += 8) _mm256_storeu_ps(dst + i, tile::load8(src, i, K));
  for (int64_t i = k8; i < k; ++i) dst[i] = tile::load1(src, i, K);
}

// f32 weights are read in place, tokens in chunks that stay in L2. f16/bf16 weights are read in place (widened in
// registers) for fewer than 4 tokens; for more, a block of rows at a time (tile::block_rows) is widened into a
// per-thread f32 buffer once per token chunk, so the tile's inner loop does no conversion. The weights' values are the same either way, so
// are the results' bits.
template <WKind K>
void rows_avx2(float *out, const float *x, const void *w, int64_t n, int64_t m0, int64_t m1, int64_t m, int64_t k) {
  const int64_t stride = k * (K == WKind::f32 ? 4 : 2);
  const uint8_t *wb = static_cast<const uint8_t *>(w) + m0 * stride;
  if (K == WKind::f32 || n < 4) {
    for (int64_t tc = 0; tc < n; tc += tile::kTokenChunk)
      tile::run<K>(out, x, wb, stride, m0, m1, tc, std::min(n, tc + tile::kTokenChunk), m, k);
    return;
  }
  const int64_t rows = tile::block_rows(k);  // per widened block
  static thread_local std::vector<float> buf_;
  float *const buf = tile::scratch64(buf_, rows * k);
  for (int64_t tc = 0; tc < n; tc += tile::kTokenChunk) {
    const int64_t te = std::min(n, tc + tile::kTokenChunk);
    for (int64_t r = m0; r < m1; r += rows) {
      const int64_t re = std::min(m1, r + rows);
      if (re < m1) tile::prefetch_l2(wb + (re - m0) * stride, (std::min(m1, re + rows) - re) * stride);
      for (int64_t i = r; i < re; ++i) widen_row<K>(buf + (i - r) * k, wb + (i - m0) * stride, k);
      tile::run_block<WKind::f32>(out, x, reinterpret_cast<const uint8_t *>(buf), k * 4, r, re, tc, te, m, k);
    }
  }
}

// F16C is read from CPUID leaf 1 (ECX bit 29) because clang before 15 rejects __builtin_cpu_supports("f16c").
bool have_avx2() { return cpu_has_avx2_fma_f16c(); }

}  // namespace

bool matmul(float *out, const float *x, const void *w, uint32_t w_type, int64_t n, int64_t m, int64_t k, ThreadPool *pool) {
  if (w_type == kF16Grouped || w_type == kBf16Grouped) return matmul_grouped(out, x, w, w_type, n, m, k, pool);
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
