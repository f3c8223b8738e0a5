// Operations of the decoder on host memory: the CPU kernels, one family per file of kernels/cpu/ named like its CUDA
// twin's file in kernels/cuda/ (declared in kernels/cuda/ops_cuda.hpp with the same parameters, a stream in place of
// the ThreadPool; compared in tests). Pointers are row-major; shapes in comments.
#pragma once
#include <cstdint>

#include "kernels/paged_kv.hpp"

namespace infokv {

class ThreadPool;

namespace cpu {

// out[n, d] = x[n, d] / rms(x) * w[d]
void rmsnorm(float *out, const float *x, const float *w, int64_t n, int64_t d, float eps);

// In place on x[n, n_heads, head_dim]: rotates adjacent pairs (2i, 2i+1) of each head by the angle
// pos[t] * inv_freq[i] (formed in double), i < head_dim / 2. inv_freq: [head_dim / 2], theta^(-2i/head_dim) for plain
// RoPE, scaled for models stretched past their training context (src/model/rope.hpp makes it).
void rope(float *x, const int32_t *pos, int64_t n, int64_t n_heads, int64_t head_dim, const double *inv_freq);
// rope in two steps, so that the angles of one batch serve every layer's queries and keys: rope_angles writes
// cs[t][i] = {cos, sin} of pos[t] * inv_freq[i] for i < head_dim / 2 (formed in double, rounded to float), and
// rope_apply rotates x with them; together the same bits as rope.
void rope_angles(float *cs, const int32_t *pos, int64_t n, int64_t half, const double *inv_freq);
void rope_apply(float *x, const float *cs, int64_t n, int64_t n_heads, int64_t head_dim);

// True for the weight types matmul, get_row and dequantize handle: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
// Q4_K, Q5_K, Q6_K.
bool weight_type_supported(uint32_t type);

// out[n] = the n values of a tensor of ggml type `type` starting at src (n a multiple of the type's block size).
// Bit-exact with ggml's dequantize_row_*. False (nothing written) for an unsupported type or a partial block.
bool dequantize(float *out, const void *src, uint32_t type, int64_t n);

// out[n] as f16 bits = dequantize(src) rounded to nearest even, for the quantised types (Q4_0 ... Q6_K; not the
// float types). The CUDA twin expands weights on the device at load. False for other types or a partial block.
bool dequantize_f16(uint16_t *out, const void *src, uint32_t type, int64_t n);

// out[n, m] = x[n, k] · W[m, k]^T with W of ggml type `w_type` (any weight_type_supported type; rows of k elements,
// k a multiple of the block size; quantised rows are dequantised on the fly, never expanded in memory).
// F32/F16/BF16 (and the grouped kF16Grouped/kBf16Grouped): each output is summed in one order whatever n, the row and
// the thread count, so a token's result does not depend on what it is batched with. Quantised W: fewer than 4
// tokens take the decode dots (with integer activations where cpu_activations() and the CPU allow:
// kernels/cpu/matmul_act8.hpp), 4 to 15 the f32 tiles, 16 or more the integer-activation panels where
// cpu_activations() and the CPU allow (kernels/cpu/matmul_i16.hpp; each token's result then depends on that token
// alone), else the f32 tiles; all agree to rounding. Returns false for a weight type it does not handle (nothing
// written).
bool matmul(float *out, const float *x, const void *w, uint32_t w_type, int64_t n, int64_t m, int64_t k, ThreadPool *pool);

// The token count from which a forward chunk's results for each token depend on that token (and the cache) alone:
// every matmul of n >= this many tokens and every prefill attention computes each token's outputs in an order of its
// own, so a prompt prefilled in chunks of this size or more gets the same bits however the chunks were cut. 16 where
// the quantised products of 16 tokens or more take the panels (x86 with AVX-512: the f32 panels or the integer
// ones); 0 where no count is promised (elsewhere the f32 tiles serve every count). Float weights are independent at
// every count.
int64_t chunk_invariant_from();

// A decode step of several sequences (one token each) wants each token's result not to depend on the others: while
// a RowsIndependent(true) lives on a thread, that thread's quantised matmuls of fewer than kRowsIndependentTokens
// tokens take the decode dots row by row (integer activations per token, where the CPU has them), so a sequence
// decoded in such a batch gets the same bits as decoded alone. Up to 4 tokens this costs nothing; at 8 it is ~8%
// slower than the f32 tiles, at 12 ~23% (SmolLM2-135M Q4_1, 2 threads). Nests; restores the previous state.
constexpr int64_t kRowsIndependentTokens = 16;
class RowsIndependent {
 public:
  explicit RowsIndependent(bool on);
  ~RowsIndependent();
  RowsIndependent(const RowsIndependent &) = delete;
  RowsIndependent &operator=(const RowsIndependent &) = delete;

 private:
  bool prev_;
};
bool rows_independent();

// Several products of one input x[n, k] (a layer's q, k and v; gate and up): parts[i].out[n, parts[i].m] =
// x · W_i^T, each the same bits as matmul of that part alone. For a lone token (n == 1) on a pool the parts share one
// hand-off to the threads, split by rows across all of them: alone, k and v (192 rows on SmolLM2) are too small to
// share and run on the calling thread while the others wait. False, with nothing written, when a part's type is not
// one matmul handles or k is not a multiple of its block size.
struct MatmulPart {
  float *out;
  const void *w;
  uint32_t type;
  int64_t m;
};
bool matmul_parts(const MatmulPart *parts, int count, const float *x, int64_t n, int64_t k, ThreadPool *pool);

// ---- f16/bf16 weights in the CPU's grouped layout ----
// Rows in groups of kWeightGroup, each group k-major: element (r, i) of W[m, k] at ((r / 32) * k + i) * 32 + r % 32,
// the last group padded with zero rows (grouped_elems(m, k) elements in all). The CPU backend makes this copy of
// every f16/bf16 matrix once per model (src/backend/cpu/host_ops.cpp). With it, decode and prefill both multiply
// whole vectors of a group's rows and each output is one chain of FMAs over i = 0 .. k-1 in order: a token's result
// is the same bits alone and batched, on any thread count and with any of the kernels (AVX-512, AVX2, portable),
// and prefill needs no lane sums (matmul_grouped.cpp).
constexpr int64_t kWeightGroup = 32;
// Type ids of the layout, beyond ggml's numbers; only matmul and get_row take them.
constexpr uint32_t kF16Grouped = 0x10001, kBf16Grouped = 0x1001E;
// kF16Grouped for ggml's F16, kBf16Grouped for BF16, 0 for any other type.
uint32_t grouped_type(uint32_t type);
// Elements (16-bit) of the grouped copy of an [m, k] matrix.
int64_t grouped_elems(int64_t m, int64_t k);
// dst[grouped_elems(m, k)] = w[m, k] (16-bit elements, f16 or bf16 alike) in the grouped layout.
void group_rows(uint16_t *dst, const uint16_t *w, int64_t m, int64_t k, ThreadPool *pool);

// out[i] = silu(gate[i]) * up[i], i < n
void swiglu(float *out, const float *gate, const float *up, int64_t n);

// x[i] += y[i]
void add_inplace(float *x, const float *y, int64_t n);

// x[t, i] += b[i] for t < n, i < d (a projection's bias). x: [n, d]; b: [d]
void add_bias(float *x, const float *b, int64_t n, int64_t d);

// Converts row `row` of an embedding table emb[rows, d] of ggml type `type` (or a grouped type) to f32. False for
// unsupported types.
bool get_row(float *out, const void *emb, uint32_t type, int64_t row, int64_t d);

// Writes k, v [n, n_kv_heads, head_dim] into slots [first_slot, first_slot + n) of the paged view.
void kv_append(const PagedKv &kv, int32_t first_slot, const float *k, const float *v, int64_t n);

// Reads slot `slot` of kv head `h` back as f32 (K when which = 0, V when which = 1) into out[head_dim].
void kv_read(float *out, const PagedKv &kv, int32_t slot, int32_t h, int which);

// Causal attention of n_q queries q[n_q, n_heads, head_dim] over the paged KV; query t sees slots
// [0, visible0 + t). out[n_q, n_heads, head_dim]. Grouped-query: head h reads kv head h / (n_heads / n_kv_heads).
// When acc is not null, acc[slot] += attention probability averaged over heads, for every query (H2O scores);
// when acc_count is not null, acc_count[slot] += 1 for every query that sees the slot.
void paged_attention(float *out, const float *q, int64_t n_q, int32_t n_heads, const PagedKv &kv, int32_t visible0,
                     float scale, float *acc, float *acc_count, ThreadPool *pool);

// Attention probabilities (not outputs) of queries q[n_q, n_heads, head_dim] over all n_slots of the view,
// averaged over heads and queries: probs[n_slots]. Query t sees slots [0, visible0 + t).
void attention_probs_mean(float *probs, const float *q, int64_t n_q, int32_t n_heads, const PagedKv &kv,
                          int32_t visible0, float scale);

// Context-replay scores (KVzip): probs_max[j] = max(probs_max[j], the attention probability slot j receives from any
// head of any query), for the queries q[n_q, n_heads, head_dim] over the view's slots, query t seeing slots
// [0, visible0 + t); only slots j < n_out are written (probs_max[n_out]). The caller initialises probs_max.
void attention_probs_max(float *probs_max, int32_t n_out, const float *q, int64_t n_q, int32_t n_heads, const PagedKv &kv,
                         int32_t visible0, float scale);

// Entropy (nats) of softmax(logits[n]) restricted to its top_k values, renormalised (top_k <= 0: all).
double topk_entropy(const float *logits, int32_t n, int32_t top_k);

// dst[n] (dst_type) = src[n] (src_type), any pair of f32/f16/bf16, round to nearest even.
void convert(void *dst, KvDtype dst_type, const void *src, KvDtype src_type, int64_t n);

// out[n_rows, d] = rows rows[n_rows] of emb[*, d] (ggml type F32/F16/BF16) as f32. False for other types.
bool get_rows(float *out, const void *emb, uint32_t type, const int32_t *rows, int64_t n_rows, int64_t d);

// kv_append to explicit slots (one token per sequence in a decode batch): token t goes to slot slot_addr[2t + 1]
// of block slot_addr[2t]. kv: geometry and pool (block table unused). k, v: [n, n_kv_heads, head_dim]; slot_addr: [n][2].
void kv_append_rows(const PagedKv &kv, const int32_t *slot_addr, const float *k, const float *v, int64_t n);

// Attention of n_q independent queries, each over its own sequence (a decode batch in one call): query t reads
// the block table kv.block_table + table_off[t] and sees its slots [0, vis[t]); max_vis >= every vis[t].
// q, out: [n_q, n_heads, head_dim]; table_off, vis: [n_q].
void paged_attention_rows(float *out, const float *q, int64_t n_q, int32_t n_heads, const PagedKv &kv, const int32_t *table_off,
                          const int32_t *vis, int32_t max_vis, float scale, ThreadPool *pool);

// Slot moves for compaction: K and V of every kv head of slot (moves[4i], moves[4i+1]) = (block id, slot in the
// block) go to (moves[4i+2], moves[4i+3]), for i < n. Every read happens before any write, so sources and
// destinations may overlap (in-place compaction). Only kv's geometry is used (pool, block_stride, block_size,
// n_kv_heads, head_dim, dtype), not its block table. moves: [n][4]; scratch: [n][2][n_kv_heads][head_dim] elements.
void kv_move_slots(const PagedKv &kv, const int32_t *moves, int64_t n, uint8_t *scratch);

// Representation change per layer: out[l, t] = 1 - cos(hidden[l, t], hidden[n_layer - 1, t]) (0 where either
// vector is zero), accumulated in double. hidden: [n_layer, n, d]; out: [n_layer, n].
void rep_change_rows(float *out, const float *hidden, int64_t n_layer, int64_t n, int64_t d);

// out[r] = topk_entropy(logits + r * n, n, top_k) for r < n_rows.
void topk_entropy_rows(double *out, const float *logits, int64_t n_rows, int32_t n, int32_t top_k);

}  // namespace cpu
}  // namespace infokv
