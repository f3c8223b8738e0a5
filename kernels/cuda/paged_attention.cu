#include "kernels/cuda/paged_attention.cuh"

namespace infokv {
namespace cuda {

namespace {

// Calls f(T{}, std::integral_constant<int, MAXD>{}) for the instantiated head-size bounds.
template <typename F> bool dispatch_head(int32_t head_dim, KvDtype dt, F &&f) {
  bool ok = false;
  auto by_d = [&](auto t) {
    if (head_dim <= 32) { f(t, std::integral_constant<int, 32>{}); ok = true; }
    else if (head_dim <= 64) { f(t, std::integral_constant<int, 64>{}); ok = true; }
    else if (head_dim <= 128) { f(t, std::integral_constant<int, 128>{}); ok = true; }
    else if (head_dim <= 256) { f(t, std::integral_constant<int, 256>{}); ok = true; }
  };
  if (!dispatch_kv_dtype(dt, by_d)) return false;
  return ok;
}

bool valid(const PagedKv &kv, int32_t n_heads) {
  return kv.pool != nullptr && kv.block_table != nullptr && kv.block_size > 0 && kv.n_kv_heads > 0 && kv.head_dim > 0 &&
         kv.n_slots >= 0 && n_heads > 0 && n_heads % kv.n_kv_heads == 0;
}

// Runs passes 1 and 2 (and 3 when `acc` is set, with weight `acc_weight`). out may be null (scores only).
Status run_attention(float *out, const float *q, int64_t n_q, int32_t n_heads, const PagedKv &kv, int32_t visible0,
                     float scale, float *acc, float acc_weight, Stream *stream, const int32_t *row_table_off = nullptr,
                     const int32_t *row_vis = nullptr) {
  const cudaStream_t st = raw_stream(stream);
  const int64_t n_items = n_q * n_heads;
  // The longest visible range sizes the split: causal queries see up to visible0 + n_q - 1 slots; in rows mode
  // (each query over its own sequence) the caller has put the longest row's count in kv.n_slots.
  int64_t max_vis = row_vis != nullptr ? kv.n_slots : static_cast<int64_t>(visible0) + n_q - 1;
  if (max_vis > kv.n_slots) max_vis = kv.n_slots;
  if (max_vis < 1) max_vis = 1;
  // Split long contexts so that a single decode query still fills the GPU; cap the partials (n_items * n_splits
  // rows of head_dim + 2 floats) at 64 MiB, which long prefills would otherwise exceed.
  int32_t chunk = 256;
  int64_t n_splits = (max_vis + chunk - 1) / chunk;
  while (n_splits > 1 && (n_splits > 256 || n_items * n_splits * (kv.head_dim + 2) > (int64_t{1} << 24))) {
    chunk *= 2;
    n_splits = (max_vis + chunk - 1) / chunk;
  }
  if (n_items > 0x7fffffffLL || n_splits > 65535) return Status::unsupported;

  AttnArgs a{q, kv, n_heads, n_heads / kv.n_kv_heads, visible0, chunk, static_cast<int32_t>(n_splits), scale, row_table_off, row_vis};
  const size_t n_part = static_cast<size_t>(n_items * n_splits);
  const size_t bytes = (n_part * 2 + n_part * static_cast<size_t>(kv.head_dim) + static_cast<size_t>(n_items) * 2) * sizeof(float);
  float *scratch = nullptr;
  if (cudaMallocAsync(reinterpret_cast<void **>(&scratch), bytes, st) != cudaSuccess) {
    cudaGetLastError();
    return Status::out_of_memory;
  }
  float *part_ml = scratch;
  float *part_o = part_ml + n_part * 2;
  float *stats = part_o + n_part * static_cast<size_t>(kv.head_dim);

  const dim3 grid(static_cast<unsigned>(n_items), static_cast<unsigned>(n_splits));
  dispatch_head(kv.head_dim, kv.dtype, [&](auto t, auto d) {
    using T = decltype(t);
    constexpr int D = decltype(d)::value;
    attn_partial_kernel<T, D><<<grid, kAttnWarps * 32, 0, st>>>(a, part_ml, part_o);
  });
  const int cthreads = kv.head_dim >= 128 ? 128 : (kv.head_dim >= 64 ? 64 : 32);
  attn_combine_kernel<<<static_cast<unsigned>(n_items), cthreads, 0, st>>>(out, stats, part_ml, part_o,
                                                                           static_cast<int32_t>(n_splits), kv.head_dim);
  if (acc != nullptr) {
    dispatch_head(kv.head_dim, kv.dtype, [&](auto t, auto d) {
      using T = decltype(t);
      constexpr int D = decltype(d)::value;
      attn_scores_kernel<T, D><<<grid, kAttnWarps * 32, 0, st>>>(a, stats, acc, acc_weight);
    });
  }
  Status s = launch_status();
  cudaFreeAsync(scratch, st);
  return s;
}

}  // namespace

Status paged_attention(float *out, const float *q, int64_t n_q, int32_t n_heads, const PagedKv &kv, int32_t visible0,
                       float scale, float *acc, float *acc_count, Stream *stream) {
  if (n_q < 0 || visible0 < 0 || out == nullptr || !valid(kv, n_heads)) return Status::invalid_argument;
  if (kv.head_dim > 256) return Status::unsupported;
  if (n_q == 0) return Status::ok;
  // Prefill without score outputs: the query-tiled kernel reads each K/V tile once per tile of queries (and all
  // query heads of a KV group) instead of once per (query, head). It declines shapes it does not instantiate
  // (Status::unsupported, nothing launched); those run split-K below.
  if (acc == nullptr && acc_count == nullptr && n_q >= kPrefillTiledMinQueries) {
    const Status p = prefill_attention(out, q, n_q, n_heads, kv, visible0, scale, stream);
    if (p != Status::unsupported) return p;
  }
  Status s = run_attention(out, q, n_q, n_heads, kv, visible0, scale, acc, 1.0f / static_cast<float>(n_heads), stream);
  if (s != Status::ok) return s;
  if (acc_count != nullptr && kv.n_slots > 0) {
    attn_count_kernel<<<grid_for(kv.n_slots, 256), 256, 0, raw_stream(stream)>>>(acc_count, kv.n_slots, visible0,
                                                                                 static_cast<int32_t>(n_q));
    s = launch_status();
  }
  return s;
}

Status attention_probs_mean(float *probs, const float *q, int64_t n_q, int32_t n_heads, const PagedKv &kv,
                            int32_t visible0, float scale, Stream *stream) {
  if (n_q < 0 || visible0 < 0 || probs == nullptr || !valid(kv, n_heads)) return Status::invalid_argument;
  if (kv.head_dim > 256) return Status::unsupported;
  if (kv.n_slots > 0 && cudaMemsetAsync(probs, 0, static_cast<size_t>(kv.n_slots) * sizeof(float), raw_stream(stream)) != cudaSuccess)
    return Status::internal;
  if (n_q == 0) return Status::ok;
  return run_attention(nullptr, q, n_q, n_heads, kv, visible0, scale, probs,
                       1.0f / static_cast<float>(n_q * n_heads), stream);
}

Status paged_attention_rows(float *out, const float *q, int64_t n_q, int32_t n_heads, const PagedKv &kv,
                            const int32_t *table_off, const int32_t *vis, int32_t max_vis, float scale, Stream *stream) {
  if (n_q < 0 || max_vis < 0 || out == nullptr || !valid(kv, n_heads) || (n_q > 0 && (table_off == nullptr || vis == nullptr)))
    return Status::invalid_argument;
  if (kv.head_dim > 256) return Status::unsupported;
  if (n_q == 0) return Status::ok;
  // visible_of clamps each row's count to kv.n_slots: here the longest row, which also sizes the context split.
  PagedKv k = kv;
  k.n_slots = max_vis;
  return run_attention(out, q, n_q, n_heads, k, 0, scale, nullptr, 0.0f, stream, table_off, vis);
}

}  // namespace cuda
}  // namespace infokv
