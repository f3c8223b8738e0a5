// The paged KV layout every backend's kernels read and write: element types and the view of one sequence's KV for
// one layer. Pointers are host memory for the CPU kernels and device memory for the CUDA ones.
#pragma once
#include <cstdint>

#include "kernels/ggml_blocks.hpp"

namespace infokv {

// f32/f16/bf16 store each element; q8_0 and q4_0 store blocks of kKvQuantBlock elements with an f16 scale, in
// ggml's block layouts (kernels/kv_quant.hpp), q4_0 after a randomised Hadamard rotation of each block.
enum class KvDtype : int32_t { f32 = 1, f16 = 2, bf16 = 3, q8_0 = 4, q4_0 = 5 };
constexpr int32_t kKvQuantBlock = 32;
inline bool kv_dtype_valid(int32_t t) { return t >= 1 && t <= 5; }
inline bool kv_dtype_quantised(KvDtype t) { return t == KvDtype::q8_0 || t == KvDtype::q4_0; }
// Bytes of n elements of dtype t; n is a multiple of kKvQuantBlock for the quantised dtypes.
inline int64_t kv_bytes(KvDtype t, int64_t n) {
  switch (t) {
    case KvDtype::f32: return 4 * n;
    case KvDtype::q8_0: return n / kKvQuantBlock * static_cast<int64_t>(sizeof(block::Q8_0));
    case KvDtype::q4_0: return n / kKvQuantBlock * static_cast<int64_t>(sizeof(block::Q4_0));
    default: return 2 * n;
  }
}
// Whether rows of head_dim elements can be stored as t (the quantised dtypes need whole blocks).
inline bool kv_dtype_fits(KvDtype t, int32_t head_dim) { return !kv_dtype_quantised(t) || head_dim % kKvQuantBlock == 0; }
// The dtype the observation window's queries are held in beside a cache of dtype t: the cache's own for the float
// dtypes, f16 beside a quantised cache (a query row is not quantised; the keys it is scored against are).
inline KvDtype kv_window_dtype(KvDtype t) { return kv_dtype_quantised(t) ? KvDtype::f16 : t; }
// Whether a cache of dtype t stores each key less its layer's K bias (k - b_k, for a model that has one). Attention
// cannot tell (q.(k - b) = q.k - q.b, the same for every key of the query, and softmax ignores a shift), but the
// quantiser can: Qwen2's biases put near-constant values of 100+ in a few channels, whose block scale then drowns the
// rest (q8_0 KL to f16 0.016 with them, 0.0007 without, Qwen2.5-Coder-0.5B). The quantised dtypes do; whoever reads
// keys as values (a conversion to a float dtype, key norms) adds the bias back.
inline bool kv_keys_less_bias(KvDtype t) { return kv_dtype_quantised(t); }
const char *kv_dtype_name(KvDtype t);
// The dtype named `name` (f32, f16, bf16, q8_0, q4_0); false for any other name.
bool kv_dtype_parse(const char *name, KvDtype *out);
constexpr const char *kKvDtypeNames = "f32, f16, bf16, q8_0 or q4_0";

// A sequence's KV for one layer, as a paged view. Block b holds, for `block_size` token slots,
// K then V: pool + b * block_stride -> [2][n_kv_heads][block_size][head_dim] elements of `dtype` (each row of
// head_dim elements kv_bytes(dtype, head_dim) bytes).
struct PagedKv {
  uint8_t *pool;
  int64_t block_stride;       // bytes per block
  const int32_t *block_table; // [ceil(n_slots / block_size)]
  int32_t n_slots;            // kept tokens of the layer (valid slots)
  int32_t block_size;
  int32_t n_kv_heads;
  int32_t head_dim;
  KvDtype dtype;
};

}  // namespace infokv
