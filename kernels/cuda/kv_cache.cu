#include "kernels/cuda/kv_cache.cuh"

namespace infokv {
namespace cuda {

namespace {
constexpr int kThreads = 256;

bool valid_view(const PagedKv &kv) {
  return kv.pool != nullptr && kv.block_table != nullptr && kv.block_size > 0 && kv.n_kv_heads > 0 && kv.head_dim > 0 &&
         !kv_dtype_quantised(kv.dtype) && kv.block_stride >= 2LL * kv.n_kv_heads * kv.block_size * kv_bytes(kv.dtype, kv.head_dim);
}
}  // namespace

Status kv_append(const PagedKv &kv, int32_t first_slot, const float *k, const float *v, int64_t n, Stream *stream) {
  if (n < 0 || first_slot < 0 || !valid_view(kv)) return Status::invalid_argument;
  if (n == 0) return Status::ok;
  bool ok = dispatch_kv_dtype(kv.dtype, [&](auto t) {
    using T = decltype(t);
    kv_append_kernel<T><<<grid_for(n * kv.n_kv_heads * kv.head_dim, kThreads), kThreads, 0, raw_stream(stream)>>>(kv, first_slot, k, v, n);
  });
  return ok ? launch_status() : Status::unsupported;
}

Status kv_move_slots(const PagedKv &kv, const int32_t *moves, int64_t n, uint8_t *scratch, Stream *stream) {
  if (n < 0 || kv.pool == nullptr || kv.block_size <= 0 || kv.n_kv_heads <= 0 || kv.head_dim <= 0 ||
      (n > 0 && (moves == nullptr || scratch == nullptr)))
    return Status::invalid_argument;
  if (n == 0) return Status::ok;
  const int64_t total = 2LL * n * kv.n_kv_heads * kv.head_dim;
  bool ok = dispatch_kv_dtype(kv.dtype, [&](auto t) {
    using T = decltype(t);
    for (bool scatter : {false, true})
      kv_move_kernel<T><<<grid_for(total, kThreads), kThreads, 0, raw_stream(stream)>>>(kv, moves, n, reinterpret_cast<T *>(scratch), scatter);
  });
  return ok ? launch_status() : Status::unsupported;
}

Status kv_append_rows(const PagedKv &kv, const int32_t *slot_addr, const float *k, const float *v, int64_t n, Stream *stream) {
  if (n < 0 || kv.pool == nullptr || kv.block_size <= 0 || kv.n_kv_heads <= 0 || kv.head_dim <= 0 ||
      (n > 0 && (slot_addr == nullptr || k == nullptr || v == nullptr)))
    return Status::invalid_argument;
  if (n == 0) return Status::ok;
  bool ok = dispatch_kv_dtype(kv.dtype, [&](auto t) {
    using T = decltype(t);
    kv_append_rows_kernel<T><<<grid_for(n * kv.n_kv_heads * kv.head_dim, kThreads), kThreads, 0, raw_stream(stream)>>>(kv, slot_addr, k, v, n);
  });
  return ok ? launch_status() : Status::unsupported;
}

}  // namespace cuda
}  // namespace infokv
