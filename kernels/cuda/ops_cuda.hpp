// CUDA twins of the CPU kernels (kernels/ops.hpp; each in the file of the same name), declared without any CUDA
// header so that host C++ code and the tests can call them. Every pointer is DEVICE memory unless the comment says "host"; shapes are in comments,
// row-major. A launcher enqueues work on `stream` (nullptr: the legacy default stream) and returns at once; it
// returns Status::unsupported for a shape or dtype that is not instantiated and Status::invalid_argument for
// inconsistent arguments, launching nothing in either case, and Status::internal when the launch itself fails.
// The matching CPU function has the same parameters with `ThreadPool *` (or nothing) in place of the stream.
// Only compiled when INFOKV_WITH_CUDA; the definitions live in kernels/cuda/*.cu and matmul.cpp.
#pragma once
#include <cstdint>

#include "kernels/ops.hpp"
#include "kernels/status.hpp"

namespace infokv {
namespace cuda {

// Opaque stand-in for cudaStream_t (a pointer to the runtime's CUstream_st): CUDA files cast it back.
struct Stream;

// ---- norm_rope.cu ----
// out[n, d] = x[n, d] / rms(x) * w[d]. x, out: [n, d]; w: [d].
Status rmsnorm(float *out, const float *x, const float *w, int64_t n, int64_t d, float eps, Stream *stream);
// x[n, n_heads, head_dim] rotated in place (adjacent pairs); pos: [n]. Angles are formed in double.
Status rope(float *x, const int32_t *pos, int64_t n, int64_t n_heads, int64_t head_dim, const double *inv_freq,
            Stream *stream);

// ---- elementwise.cu ----
// out[n] = silu(gate[n]) * up[n]
Status swiglu(float *out, const float *gate, const float *up, int64_t n, Stream *stream);
// x[n] += y[n]
Status add_inplace(float *x, const float *y, int64_t n, Stream *stream);
// x[n, d] += b[d] on every row
Status add_bias(float *x, const float *b, int64_t n, int64_t d, Stream *stream);
// dst[n] (dst_type) = src[n] (src_type), any pair of f32/f16/bf16 (round to nearest even).
Status convert(void *dst, KvDtype dst_type, const void *src, KvDtype src_type, int64_t n, Stream *stream);
// out[n_rows, d] = rows rows[n_rows] (ids, device) of emb[*, d] of ggml type F32/F16/BF16, as f32.
Status get_rows(float *out, const void *emb, uint32_t type, const int32_t *rows, int64_t n_rows, int64_t d,
                Stream *stream);

// ---- dequant.cu ----
// out[n] f16 = the quantised weights src (Q4_0 ... Q6_K) expanded as cpu::dequantize_f16 does, bit for bit.
// n a multiple of the type's block; Status::unsupported for other types.
Status dequantize_f16(void *out, const void *src, uint32_t type, int64_t n, Stream *stream);

// ---- kv_cache.cu ----
// k, v: [n, n_kv_heads, head_dim] f32 written to slots [first_slot, first_slot + n) of the paged view
// (kv.pool and kv.block_table are device pointers).
Status kv_append(const PagedKv &kv, int32_t first_slot, const float *k, const float *v, int64_t n, Stream *stream);
// kv_append to explicit slots, as cpu::kv_append_rows. slot_addr: [n][2] (device); k, v: [n, n_kv_heads, head_dim].
Status kv_append_rows(const PagedKv &kv, const int32_t *slot_addr, const float *k, const float *v, int64_t n, Stream *stream);
// Slot moves for compaction, as cpu::kv_move_slots: every read before any write (two launches). moves: [n][4]
// (device); scratch: [n][2][n_kv_heads][head_dim] elements (device). kv: geometry only (pool is device memory).
Status kv_move_slots(const PagedKv &kv, const int32_t *moves, int64_t n, uint8_t *scratch, Stream *stream);

// ---- paged_attention.cu ----
// Causal attention over the paged KV: q: [n_q, n_heads, head_dim], out: [n_q, n_heads, head_dim]; query t sees
// slots [0, min(n_slots, visible0 + t)). acc: [kv.n_slots] or null, acc_count: [kv.n_slots] or null, as in
// cpu::paged_attention. Used for decode (n_q = 1) and prefill (n_q > 1). With n_q >= kPrefillTiledMinQueries and
// no score outputs it runs prefill_attention (query-tiled); otherwise, or when that declines the shape, the
// kernel split along the context (flash-decoding), one (query, head) item at a time.
// head_dim <= 256 and n_heads % n_kv_heads == 0, otherwise unsupported.
constexpr int64_t kPrefillTiledMinQueries = 16;
Status paged_attention(float *out, const float *q, int64_t n_q, int32_t n_heads, const PagedKv &kv,
                       int32_t visible0, float scale, float *acc, float *acc_count, Stream *stream);

// ---- prefill_attention.cu ----
// Query-tiled causal attention (FlashAttention-2 style): the same result as paged_attention without score outputs
// (CPU twin: cpu::paged_attention with acc = acc_count = null). q: [n_q, n_heads, head_dim] (16-byte aligned),
// out: [n_q, n_heads, head_dim]; query t sees slots [0, min(n_slots, visible0 + t)). Status::unsupported, nothing
// launched, unless head_dim <= 256, head_dim % 4 == 0, kv.pool and kv.block_stride are 16-byte aligned and
// n_kv_heads <= 65535; invalid_argument for inconsistent arguments (n_heads % n_kv_heads != 0, null pointers).
Status prefill_attention(float *out, const float *q, int64_t n_q, int32_t n_heads, const PagedKv &kv,
                         int32_t visible0, float scale, Stream *stream);

// ---- paged_attention.cu ----
// One query per sequence in one launch, as cpu::paged_attention_rows: query t reads the table kv.block_table +
// table_off[t] and sees slots [0, vis[t]); max_vis >= every vis[t] (host-known, sizes the split). q, out:
// [n_q, n_heads, head_dim]; table_off, vis: [n_q] (device).
Status paged_attention_rows(float *out, const float *q, int64_t n_q, int32_t n_heads, const PagedKv &kv,
                            const int32_t *table_off, const int32_t *vis, int32_t max_vis, float scale, Stream *stream);
// Observation-window score accumulation: probs[kv.n_slots] = attention probabilities of q[n_q, n_heads, head_dim]
// averaged over heads and queries (query t sees [0, min(n_slots, visible0 + t))).
Status attention_probs_mean(float *probs, const float *q, int64_t n_q, int32_t n_heads, const PagedKv &kv,
                            int32_t visible0, float scale, Stream *stream);

// ---- softmax_entropy.cu ----
// out[n_rows] = entropy (nats) of softmax over the top_k largest of each row of logits[n_rows, n] (top_k <= 0: all).
Status topk_entropy_rows(double *out, const float *logits, int64_t n_rows, int32_t n, int32_t top_k, Stream *stream);
// out[l, t] = 1 - cos(hidden[l, t], hidden[n_layer - 1, t]) as cpu::rep_change_rows (double accumulation).
// hidden: [n_layer, n, d]; out: [n_layer, n].
Status rep_change_rows(float *out, const float *hidden, int64_t n_layer, int64_t n, int64_t d, Stream *stream);

// ---- matmul.cpp (cuBLAS, dlopen'ed) ----
// out[n, m] f32 = x[n, k] f32 · W[m, k]^T, W of ggml type F32, F16 or BF16 (device). x is converted to W's type in
// a stream-ordered scratch buffer and cuBLAS accumulates in f32. Status::no_device when cuBLAS cannot be loaded.
Status matmul(float *out, const float *x, const void *w, uint32_t w_type, int64_t n, int64_t m, int64_t k,
              Stream *stream);

}  // namespace cuda
}  // namespace infokv
