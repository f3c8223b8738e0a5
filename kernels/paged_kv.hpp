// The paged KV layout every backend's kernels read and write: element types and the view of one sequence's KV for
// one layer. Pointers are host memory for the CPU kernels and device memory for the CUDA ones.
#pragma once
#include <cstdint>

namespace infokv {

enum class KvDtype : int32_t { f32 = 1, f16 = 2, bf16 = 3 };
inline int kv_dtype_size(KvDtype t) { return t == KvDtype::f32 ? 4 : 2; }
const char *kv_dtype_name(KvDtype t);

// A sequence's KV for one layer, as a paged view. Block b holds, for `block_size` token slots,
// K then V: pool + b * block_stride -> [2][n_kv_heads][block_size][head_dim] elements of `dtype`.
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
