#include "kernels/cuda/elementwise.cuh"
#include "kernels/ggml_types.hpp"

namespace infokv {
namespace cuda {

namespace {
constexpr int kThreads = 256;
}

Status swiglu(float *out, const float *gate, const float *up, int64_t n, Stream *stream) {
  if (n < 0) return Status::invalid_argument;
  if (n == 0) return Status::ok;
  swiglu_kernel<<<grid_for(n, kThreads), kThreads, 0, raw_stream(stream)>>>(out, gate, up, n);
  return launch_status();
}

Status add_inplace(float *x, const float *y, int64_t n, Stream *stream) {
  if (n < 0) return Status::invalid_argument;
  if (n == 0) return Status::ok;
  add_kernel<<<grid_for(n, kThreads), kThreads, 0, raw_stream(stream)>>>(x, y, n);
  return launch_status();
}

Status add_bias(float *x, const float *b, int64_t n, int64_t d, Stream *stream) {
  if (n < 0 || d <= 0) return Status::invalid_argument;
  if (n == 0) return Status::ok;
  add_bias_kernel<<<grid_for(n * d, kThreads), kThreads, 0, raw_stream(stream)>>>(x, b, n * d, d);
  return launch_status();
}

Status convert(void *dst, KvDtype dst_type, const void *src, KvDtype src_type, int64_t n, Stream *stream) {
  if (n < 0) return Status::invalid_argument;
  if (n == 0) return Status::ok;
  bool launched = false;
  bool known = dispatch_kv_dtype(dst_type, [&](auto d) {
    using D = decltype(d);
    dispatch_kv_dtype(src_type, [&](auto s) {
      using S = decltype(s);
      convert_kernel<D, S><<<grid_for(n, kThreads), kThreads, 0, raw_stream(stream)>>>(static_cast<D *>(dst),
                                                                                       static_cast<const S *>(src), n);
      launched = true;
    });
  });
  if (!known || !launched) return Status::unsupported;
  return launch_status();
}

Status get_rows(float *out, const void *emb, uint32_t type, const int32_t *rows, int64_t n_rows, int64_t d, Stream *stream) {
  if (n_rows < 0 || d <= 0) return Status::invalid_argument;
  if (n_rows == 0) return Status::ok;
  const unsigned g = grid_for(n_rows * d, kThreads);
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::F32: get_rows_kernel<float><<<g, kThreads, 0, raw_stream(stream)>>>(out, static_cast<const float *>(emb), rows, n_rows, d); break;
    case GgmlType::F16: get_rows_kernel<__half><<<g, kThreads, 0, raw_stream(stream)>>>(out, static_cast<const __half *>(emb), rows, n_rows, d); break;
    case GgmlType::BF16:
      get_rows_kernel<__nv_bfloat16><<<g, kThreads, 0, raw_stream(stream)>>>(out, static_cast<const __nv_bfloat16 *>(emb), rows, n_rows, d);
      break;
    default: return Status::unsupported;
  }
  return launch_status();
}

}  // namespace cuda
}  // namespace infokv
