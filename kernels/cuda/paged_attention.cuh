// Paged attention, split along the context (flash-decoding), reading the block tables directly
// (templates; launchers in paged_attention.cu).
//
// Work item = (query t, head h). Pass 1 (attn_partial_kernel): grid [n_items, n_splits], each block covers
// `chunk` slots of the item's visible range with an online softmax per warp, merged across the block's warps,
// and writes an unnormalised partial (max, sum, o[head_dim]). Pass 2 (attn_combine_kernel) merges the splits and
// normalises; it also keeps each item's final (max, sum) so that pass 3 (attn_scores_kernel), only run when the
// caller wants attention scores, can turn scores back into probabilities and add them per slot.
// MAXD is the head-size bound turned into a compile-time constant (each lane holds MAXD / 32 dims).
#pragma once
#include "kernels/cuda/common.cuh"

namespace infokv {
namespace cuda {

constexpr int kAttnWarps = 4;

struct AttnArgs {
  const float *q;      // [n_q, n_heads, head_dim]
  PagedKv kv;     // device view
  int32_t n_heads;
  int32_t group;       // n_heads / n_kv_heads
  int32_t visible0;
  int32_t chunk;       // slots per split
  int32_t n_splits;
  float scale;
  // Rows mode (paged_attention_rows): query t reads the table kv.block_table + row_table_off[t] and sees slots
  // [0, row_vis[t]). Both null otherwise. [n_q] each.
  const int32_t *row_table_off;
  const int32_t *row_vis;
};

__device__ __forceinline__ int32_t visible_of(const AttnArgs &a, int32_t t) {
  const int32_t v = a.row_vis != nullptr ? a.row_vis[t] : a.visible0 + t;
  return v < a.kv.n_slots ? v : a.kv.n_slots;  // never read past the valid slots
}

__device__ __forceinline__ const int32_t *table_of(const AttnArgs &a, int32_t t) {
  return a.row_table_off != nullptr ? a.kv.block_table + a.row_table_off[t] : a.kv.block_table;
}

// The (query, head) item of this thread block (blockIdx.x) and its split's slot range [s0, s1) (blockIdx.y): what
// the partial and the scores passes both start from.
struct WorkItem {
  int64_t item;
  int32_t g;           // KV head
  const int32_t *tbl;  // the query's block table
  int32_t s0, s1;
};

__device__ __forceinline__ WorkItem work_item(const AttnArgs &a) {
  WorkItem w;
  w.item = blockIdx.x;
  const int32_t t = static_cast<int32_t>(w.item / a.n_heads), h = static_cast<int32_t>(w.item % a.n_heads);
  w.g = h / a.group;
  w.tbl = table_of(a, t);
  w.s0 = blockIdx.y * a.chunk;
  w.s1 = min(visible_of(a, t), w.s0 + a.chunk);
  return w;
}

template <typename T, int MAXD>
__device__ __forceinline__ float slot_score(const AttnArgs &a, const int32_t *tbl, const float (&qr)[MAXD / 32], int32_t s,
                                            int32_t g, int lane) {
  const T *k = kv_slot_in<T>(a.kv, tbl, s, g, 0);
  float d = 0;
#pragma unroll
  for (int j = 0; j < MAXD / 32; ++j) {
    const int i = lane + 32 * j;
    if (i < a.kv.head_dim) d += qr[j] * to_f32(k[i]);
  }
  return warp_sum(d) * a.scale;
}

template <int MAXD>
__device__ __forceinline__ void load_q(float (&qr)[MAXD / 32], const AttnArgs &a, int64_t item, int lane) {
  const float *qh = a.q + item * a.kv.head_dim;
#pragma unroll
  for (int j = 0; j < MAXD / 32; ++j) {
    const int i = lane + 32 * j;
    qr[j] = i < a.kv.head_dim ? qh[i] : 0.0f;
  }
}

// part_ml: [n_items, n_splits, 2] (max, sum); part_o: [n_items, n_splits, head_dim]
template <typename T, int MAXD>
__global__ void __launch_bounds__(kAttnWarps * 32) attn_partial_kernel(AttnArgs a, float *part_ml, float *part_o) {
  __shared__ float sh_m[kAttnWarps], sh_l[kAttnWarps];
  __shared__ float sh_o[kAttnWarps][MAXD];
  const WorkItem wi = work_item(a);
  const int64_t item = wi.item;
  const int32_t g = wi.g, s0 = wi.s0, s1 = wi.s1;
  const int32_t *tbl = wi.tbl;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  float qr[MAXD / 32];
  load_q<MAXD>(qr, a, item, lane);
  float m = -INFINITY, l = 0.0f, o[MAXD / 32];
#pragma unroll
  for (int j = 0; j < MAXD / 32; ++j) o[j] = 0.0f;

  for (int32_t s = s0 + warp; s < s1; s += kAttnWarps) {
    const float sc = slot_score<T, MAXD>(a, tbl, qr, s, g, lane);
    const float mn = fmaxf(m, sc);
    const float corr = expf(m - mn);  // m = -inf on the first slot: corr = 0
    const float p = expf(sc - mn);
    l = l * corr + p;
    const T *v = kv_slot_in<T>(a.kv, tbl, s, g, 1);
#pragma unroll
    for (int j = 0; j < MAXD / 32; ++j) {
      const int i = lane + 32 * j;
      o[j] = o[j] * corr + (i < a.kv.head_dim ? p * to_f32(v[i]) : 0.0f);
    }
    m = mn;
  }
  if (lane == 0) {
    sh_m[warp] = m;
    sh_l[warp] = l;
  }
#pragma unroll
  for (int j = 0; j < MAXD / 32; ++j) sh_o[warp][lane + 32 * j] = o[j];
  __syncthreads();

  float M = -INFINITY;
  for (int w = 0; w < kAttnWarps; ++w) M = fmaxf(M, sh_m[w]);
  const int64_t part = item * a.n_splits + blockIdx.y;
  if (threadIdx.x == 0) {
    float L = 0;
    for (int w = 0; w < kAttnWarps; ++w) L += M == -INFINITY ? 0.0f : sh_l[w] * expf(sh_m[w] - M);
    part_ml[2 * part] = M;
    part_ml[2 * part + 1] = L;
  }
  for (int i = threadIdx.x; i < a.kv.head_dim; i += blockDim.x) {
    float acc = 0;
    for (int w = 0; w < kAttnWarps; ++w) acc += M == -INFINITY ? 0.0f : sh_o[w][i] * expf(sh_m[w] - M);
    part_o[part * a.kv.head_dim + i] = acc;
  }
}

// One block per item. out: [n_items, head_dim] or null; stats: [n_items, 2] (final max, sum).
__global__ void attn_combine_kernel(float *out, float *stats, const float *part_ml, const float *part_o, int32_t n_splits,
                                    int32_t head_dim) {
  const int64_t item = blockIdx.x;
  const float *ml = part_ml + item * n_splits * 2;
  float M = -INFINITY;
  for (int32_t s = 0; s < n_splits; ++s) M = fmaxf(M, ml[2 * s]);
  float L = 0;
  for (int32_t s = 0; s < n_splits; ++s) L += ml[2 * s + 1] > 0 ? ml[2 * s + 1] * expf(ml[2 * s] - M) : 0.0f;
  if (threadIdx.x == 0) {
    stats[2 * item] = M;
    stats[2 * item + 1] = L;
  }
  if (out == nullptr) return;
  const float inv = L > 0 ? 1.0f / L : 0.0f;
  for (int i = threadIdx.x; i < head_dim; i += blockDim.x) {
    float acc = 0;
    for (int32_t s = 0; s < n_splits; ++s)
      if (ml[2 * s + 1] > 0) acc += part_o[(item * n_splits + s) * head_dim + i] * expf(ml[2 * s] - M);
    out[item * head_dim + i] = acc * inv;
  }
}

// Adds weight * p(t, h, slot) to acc[slot] for every item; grid [n_items, n_splits]. stats: [n_items, 2].
template <typename T, int MAXD>
__global__ void __launch_bounds__(kAttnWarps * 32) attn_scores_kernel(AttnArgs a, const float *stats, float *acc, float weight) {
  const WorkItem wi = work_item(a);
  const int64_t item = wi.item;
  const int32_t g = wi.g, s0 = wi.s0, s1 = wi.s1;
  const int32_t *tbl = wi.tbl;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const float M = stats[2 * item], L = stats[2 * item + 1];
  if (!(L > 0)) return;
  const float w = weight / L;
  float qr[MAXD / 32];
  load_q<MAXD>(qr, a, item, lane);
  for (int32_t s = s0 + warp; s < s1; s += kAttnWarps) {
    const float sc = slot_score<T, MAXD>(a, tbl, qr, s, g, lane);
    if (lane == 0) atomicAdd(acc + s, expf(sc - M) * w);
  }
}

// acc_count[j] += number of queries t < n_q that see slot j (j < visible0 + t). acc_count: [n_slots]
__global__ void attn_count_kernel(float *acc_count, int32_t n_slots, int32_t visible0, int32_t n_q) {
  for (int32_t j = blockIdx.x * blockDim.x + threadIdx.x; j < n_slots; j += gridDim.x * blockDim.x) {
    int32_t first = j - visible0 + 1;  // smallest t that sees j
    if (first < 0) first = 0;
    if (first < n_q) acc_count[j] += static_cast<float>(n_q - first);
  }
}

}  // namespace cuda
}  // namespace infokv
