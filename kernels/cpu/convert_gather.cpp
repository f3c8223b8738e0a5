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

void kv_move_slots(const PagedKv &kv, const int32_t *moves, int64_t n, uint8_t *scratch) {
  const size_t row = static_cast<size_t>(kv.head_dim) * static_cast<size_t>(kv_dtype_size(kv.dtype));
  const int64_t per_slot = int64_t{2} * kv.n_kv_heads;  // rows per slot: K and V of every kv head
  auto at = [&](int32_t block, int32_t s, int64_t r) {  // r = which * n_kv_heads + h
    return kv.pool + static_cast<int64_t>(block) * kv.block_stride + (r * kv.block_size + s) * static_cast<int64_t>(row);
  };
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < per_slot; ++r)
      std::memcpy(scratch + (i * per_slot + r) * static_cast<int64_t>(row), at(moves[4 * i], moves[4 * i + 1], r), row);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < per_slot; ++r)
      std::memcpy(at(moves[4 * i + 2], moves[4 * i + 3], r), scratch + (i * per_slot + r) * static_cast<int64_t>(row), row);
}

void rep_change_rows(float *out, const float *hidden, int64_t n_layer, int64_t n, int64_t d) {
  const float *last = hidden + (n_layer - 1) * n * d;
  for (int64_t l = 0; l < n_layer; ++l)
    for (int64_t t = 0; t < n; ++t) {
      const float *a = hidden + (l * n + t) * d;
      const float *b = last + t * d;
      double ab = 0, aa = 0, bb = 0;
      for (int64_t e = 0; e < d; ++e) {
        ab += static_cast<double>(a[e]) * b[e];
        aa += static_cast<double>(a[e]) * a[e];
        bb += static_cast<double>(b[e]) * b[e];
      }
      const double c = (aa > 0 && bb > 0) ? ab / std::sqrt(aa * bb) : 1.0;
      out[l * n + t] = static_cast<float>(1.0 - c);
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
