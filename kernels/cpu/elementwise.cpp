// Element-wise operations: SwiGLU, residual add, dtype conversion, embedding row lookup and gather. CUDA twins:
// kernels/cuda/elementwise.cu.
#include "kernels/cpu/simd.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/matmul_quant.hpp"
#include "kernels/cpu/exp_avx2.hpp"
#include "kernels/cpu/kv_rows.hpp"
#include "kernels/fp16.hpp"
#include "kernels/ggml_types.hpp"
#include "kernels/ops.hpp"

namespace infokv {
namespace cpu {

#if IKV_X86
namespace {
// silu(g) * u, exp by exp256 (~2 ulp). Its clamp keeps exp(-g) finite, so a gate far above zero gives g and one far
// below gives a tiny multiple of g (std::exp's path gives -0 there), and a NaN gate stays NaN. Every element goes
// through the same lane arithmetic, the tail too (padded to eight), so an element's result does not depend on where
// it sits in the array: a row's activations are the same batched or alone.
IKV_TARGET_AVX2 inline __m256 silu_mul8(__m256 g, __m256 u) {
  const __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), g));
  return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

IKV_TARGET_AVX2 void swiglu_avx2(float *out, const float *gate, const float *up, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, silu_mul8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  if (i == n) return;
  float g[8] = {}, u[8] = {}, o[8];
  std::memcpy(g, gate + i, static_cast<size_t>(n - i) * 4);
  std::memcpy(u, up + i, static_cast<size_t>(n - i) * 4);
  _mm256_storeu_ps(o, silu_mul8(_mm256_loadu_ps(g), _mm256_loadu_ps(u)));
  std::memcpy(out + i, o, static_cast<size_t>(n - i) * 4);
}
}  // namespace
#endif

void swiglu(float *out, const float *gate, const float *up, int64_t n) {
#if IKV_X86
  if (cpu_has_avx2_fma_f16c()) {
    swiglu_avx2(out, gate, up, n);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) {
    float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void add_inplace(float *x, const float *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void add_bias(float *x, const float *b, int64_t n, int64_t d) {
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < d; ++i) x[t * d + i] += b[i];
}

bool get_row(float *out, const void *emb, uint32_t type, int64_t row, int64_t d) {
  if (type == kF16Grouped || type == kBf16Grouped) return get_row_grouped(out, emb, type, row, d);
  const GgmlTypeTraits tr = ggml_type_traits(type);
  if (tr.name == nullptr || tr.block_elems == 0 || d % tr.block_elems != 0) return false;
  const size_t row_bytes = static_cast<size_t>(d / tr.block_elems) * tr.block_bytes;
  return dequantize(out, static_cast<const uint8_t *>(emb) + static_cast<size_t>(row) * row_bytes, type, d);
}


void convert(void *dst, KvDtype dst_type, const void *src, KvDtype src_type, int64_t n) {
  if (dst_type == src_type) {
    std::memmove(dst, src, static_cast<size_t>(kv_bytes(src_type, n)));
    return;
  }
  // Through an f32 buffer a chunk at a time, with the KV rows' own conversions (round to nearest even).
  constexpr int32_t kChunk = 256;
  float buf[kChunk];
  static_assert(kChunk % kKvQuantBlock == 0, "a chunk holds whole quantised blocks");
  for (int64_t i = 0; i < n; i += kChunk) {
    const auto cnt = static_cast<int32_t>(std::min<int64_t>(kChunk, n - i));
    load_row(buf, static_cast<const uint8_t *>(src) + kv_bytes(src_type, i), cnt, src_type);
    store_row(static_cast<uint8_t *>(dst) + kv_bytes(dst_type, i), buf, cnt, dst_type);
  }
}

bool get_rows(float *out, const void *emb, uint32_t type, const int32_t *rows, int64_t n_rows, int64_t d) {
  for (int64_t r = 0; r < n_rows; ++r)
    if (!get_row(out + r * d, emb, type, rows[r], d)) return false;
  return true;
}

}  // namespace cpu
}  // namespace infokv
