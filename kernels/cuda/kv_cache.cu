#include "kernels/cuda/kv_cache.cuh"

namespace infokv {
namespace cuda {

namespace {
constexpr int kThreads = 256;

bool valid_view(const cpu::PagedKv &kv) {
  return kv.pool != nullptr && kv.block_table != nullptr && kv.block_size > 0 && kv.n_kv_heads > 0 && kv.head_dim > 0 &&
         kv.block_stride >= 2LL * kv.n_kv_heads * kv.block_size * kv.head_dim * kv_dtype_size(kv.dtype);
}
}  // namespace

Status kv_append(const cpu::PagedKv &kv, int32_t first_slot, const float *k, const float *v, int64_t n, Stream *stream) {
  if (n < 0 || first_slot < 0 || !valid_view(kv)) return Status::invalid_argument;
  if (n == 0) return Status::ok;
  bool ok = dispatch_kv_dtype(kv.dtype, [&](auto t) {
    using T = decltype(t);
    kv_append_kernel<T><<<grid_for(n * kv.n_kv_heads * kv.head_dim, kThreads), kThreads, 0, raw_stream(stream)>>>(kv, first_slot, k, v, n);
  });
  return ok ? launch_status() : Status::unsupported;
}

Status kv_gather(const cpu::PagedKv &dst, const cpu::PagedKv &src, const int32_t *keep, int32_t n_keep, Stream *stream) {
  if (n_keep < 0 || !valid_view(dst) || !valid_view(src)) return Status::invalid_argument;
  if (dst.dtype != src.dtype || dst.n_kv_heads != src.n_kv_heads || dst.head_dim != src.head_dim) return Status::invalid_argument;
  if (n_keep == 0) return Status::ok;
  bool ok = dispatch_kv_dtype(src.dtype, [&](auto t) {
    using T = decltype(t);
    kv_gather_kernel<T><<<grid_for(2LL * n_keep * src.n_kv_heads * src.head_dim, kThreads), kThreads, 0, raw_stream(stream)>>>(dst, src, keep, n_keep);
  });
  return ok ? launch_status() : Status::unsupported;
}

}  // namespace cuda
}  // namespace infokv
