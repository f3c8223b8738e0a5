#include <cstdint>

#include "kernels/cuda/prefill_attention.cuh"

namespace infokv {
namespace cuda {

namespace {

bool aligned16(const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <typename T, int D>
Status launch(const PrefillArgs &a, int32_t n_kv_heads, cudaStream_t st) {
  constexpr int rows = prefill_rows<D>();
  const int64_t blocks = (a.n_rows + rows - 1) / rows;
  if (blocks > 0x7fffffffLL) return Status::unsupported;
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(n_kv_heads));
  prefill_attn_kernel<T, D><<<grid, PrefillTile<D>::kWarps * 32, 0, st>>>(a);
  return launch_status();
}

// The runtime head size as a compile-time bound, by one switch.
template <typename T> Status launch_for_head(const PrefillArgs &a, int32_t n_kv_heads, cudaStream_t st) {
  const int32_t hd = a.kv.head_dim;
  const int bound = hd <= 32 ? 32 : hd <= 64 ? 64 : hd <= 128 ? 128 : hd <= 256 ? 256 : 0;
  switch (bound) {
    case 32: return launch<T, 32>(a, n_kv_heads, st);
    case 64: return launch<T, 64>(a, n_kv_heads, st);
    case 128: return launch<T, 128>(a, n_kv_heads, st);
    case 256: return launch<T, 256>(a, n_kv_heads, st);
    default: return Status::unsupported;
  }
}

}  // namespace

Status prefill_attention(float *out, const float *q, int64_t n_q, int32_t n_heads, const PagedKv &kv,
                         int32_t visible0, float scale, Stream *stream) {
  if (n_q < 0 || visible0 < 0 || out == nullptr || q == nullptr || kv.pool == nullptr || kv.block_table == nullptr ||
      kv.block_size <= 0 || kv.n_kv_heads <= 0 || kv.head_dim <= 0 || kv.n_slots < 0 || n_heads <= 0 ||
      n_heads % kv.n_kv_heads != 0)
    return Status::invalid_argument;
  // Shapes the tiled kernel does not handle: the caller (cuda::paged_attention) falls back to split-K for these.
  if (kv.head_dim > 256 || kv.head_dim % 4 != 0 || !aligned16(q) || !aligned16(kv.pool) || kv.block_stride % 16 != 0 ||
      kv.n_kv_heads > 65535)
    return Status::unsupported;
  if (n_q == 0) return Status::ok;
  const int32_t group = n_heads / kv.n_kv_heads;
  const PrefillArgs a{out, q, kv, n_q * group, n_heads, group, visible0, scale * 1.4426950408889634f};
  const cudaStream_t st = raw_stream(stream);
  switch (kv.dtype) {
    case KvDtype::f32: return launch_for_head<float>(a, kv.n_kv_heads, st);
    case KvDtype::f16: return launch_for_head<__half>(a, kv.n_kv_heads, st);
    case KvDtype::bf16: return launch_for_head<__nv_bfloat16>(a, kv.n_kv_heads, st);
    default: break;  // the quantised dtypes: not on CUDA
  }
  return Status::unsupported;
}

}  // namespace cuda
}  // namespace infokv
