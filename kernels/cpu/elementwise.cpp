// Element-wise operations: SwiGLU, residual add, dtype conversion, embedding row lookup and gather. CUDA twins:
// kernels/cuda/elementwise.cu.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/kv_rows.hpp"
#include "kernels/fp16.hpp"
#include "kernels/ggml_types.hpp"
#include "kernels/ops.hpp"

namespace infokv {
namespace cpu {

void swiglu(float *out, const float *gate, const float *up, int64_t n) {
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
  const GgmlTypeTraits tr = ggml_type_traits(type);
  if (tr.name == nullptr || tr.block_elems == 0 || d % tr.block_elems != 0) return false;
  const size_t row_bytes = static_cast<size_t>(d / tr.block_elems) * tr.block_bytes;
  return dequantize(out, static_cast<const uint8_t *>(emb) + static_cast<size_t>(row) * row_bytes, type, d);
}


void convert(void *dst, KvDtype dst_type, const void *src, KvDtype src_type, int64_t n) {
  if (dst_type == src_type) {
    std::memmove(dst, src, static_cast<size_t>(n) * static_cast<size_t>(kv_dtype_size(src_type)));
    return;
  }
  // Through an f32 buffer a chunk at a time, with the KV rows' own conversions (round to nearest even).
  constexpr int32_t kChunk = 256;
  float buf[kChunk];
  const int64_t ss = kv_dtype_size(src_type), ds = kv_dtype_size(dst_type);
  for (int64_t i = 0; i < n; i += kChunk) {
    const auto cnt = static_cast<int32_t>(std::min<int64_t>(kChunk, n - i));
    load_row(buf, static_cast<const uint8_t *>(src) + i * ss, cnt, src_type);
    store_row(static_cast<uint8_t *>(dst) + i * ds, buf, cnt, dst_type);
  }
}

bool get_rows(float *out, const void *emb, uint32_t type, const int32_t *rows, int64_t n_rows, int64_t d) {
  for (int64_t r = 0; r < n_rows; ++r)
    if (!get_row(out + r * d, emb, type, rows[r], d)) return false;
  return true;
}

}  // namespace cpu
}  // namespace infokv
