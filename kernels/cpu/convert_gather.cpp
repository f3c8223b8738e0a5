// Dtype conversion, embedding-row gather, KV compaction gather, row softmax and batched entropy: the CPU twins of
// the CUDA backend's kernels of the same names.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/ops.hpp"
#include "util/fp16.hpp"

namespace infokv {
namespace cpu {

namespace {

inline float load_one(const void *p, KvDtype t, int64_t i) {
  switch (t) {
    case KvDtype::f32: return static_cast<const float *>(p)[i];
    case KvDtype::f16: return fp16_to_float(static_cast<const uint16_t *>(p)[i]);
    case KvDtype::bf16: return bf16_to_float(static_cast<const uint16_t *>(p)[i]);
  }
  return 0.0f;
}

inline void store_one(void *p, KvDtype t, int64_t i, float v) {
  switch (t) {
    case KvDtype::f32: static_cast<float *>(p)[i] = v; break;
    case KvDtype::f16: static_cast<uint16_t *>(p)[i] = float_to_fp16(v); break;
    case KvDtype::bf16: static_cast<uint16_t *>(p)[i] = float_to_bf16(v); break;
  }
}

}  // namespace

void convert(void *dst, KvDtype dst_type, const void *src, KvDtype src_type, int64_t n) {
  if (dst_type == src_type) {
    std::memmove(dst, src, static_cast<size_t>(n) * static_cast<size_t>(kv_dtype_size(src_type)));
    return;
  }
  for (int64_t i = 0; i < n; ++i) store_one(dst, dst_type, i, load_one(src, src_type, i));
}

bool get_rows(float *out, const void *emb, uint32_t type, const int32_t *rows, int64_t n_rows, int64_t d) {
  for (int64_t r = 0; r < n_rows; ++r)
    if (!get_row(out + r * d, emb, type, rows[r], d)) return false;
  return true;
}

void kv_gather(const PagedKv &dst, const PagedKv &src, const int32_t *keep, int32_t n_keep) {
  const size_t bytes = static_cast<size_t>(src.head_dim) * static_cast<size_t>(kv_dtype_size(src.dtype));
  auto at = [](const PagedKv &kv, int32_t slot, int32_t h, int which) {
    const int32_t b = kv.block_table[slot / kv.block_size];
    const int64_t off = ((static_cast<int64_t>(which) * kv.n_kv_heads + h) * kv.block_size + slot % kv.block_size) *
                        kv.head_dim * kv_dtype_size(kv.dtype);
    return kv.pool + static_cast<int64_t>(b) * kv.block_stride + off;
  };
  // ascending j with keep[j] >= j: an in-place gather never overwrites a slot it still has to read
  for (int32_t j = 0; j < n_keep; ++j)
    for (int which = 0; which < 2; ++which)
      for (int32_t h = 0; h < src.n_kv_heads; ++h) {
        uint8_t *d = at(dst, j, h, which);
        const uint8_t *s = at(src, keep[j], h, which);
        if (d != s) std::memmove(d, s, bytes);
      }
}

void softmax_rows(float *out, const float *x, int64_t n_rows, int64_t n) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float *xr = x + r * n;
    float *o = out + r * n;
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; ++i) mx = std::max(mx, xr[i]);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      o[i] = std::exp(xr[i] - mx);
      sum += o[i];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t i = 0; i < n; ++i) o[i] *= inv;
  }
}

void topk_entropy_rows(double *out, const float *logits, int64_t n_rows, int32_t n, int32_t top_k) {
  for (int64_t r = 0; r < n_rows; ++r) out[r] = topk_entropy(logits + r * n, n, top_k);
}

}  // namespace cpu
}  // namespace infokv
