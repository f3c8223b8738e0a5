#include "kernels/cuda/softmax_entropy.cuh"

namespace infokv {
namespace cuda {


Status topk_entropy_rows(double *out, const float *logits, int64_t n_rows, int32_t n, int32_t top_k, Stream *stream) {
  if (n_rows < 0 || n < 0) return Status::invalid_argument;
  if (n_rows == 0) return Status::ok;
  if (n_rows > 0x7fffffffLL || n > (1 << 24)) return Status::unsupported;  // counts are exact floats below 2^24
  if (n == 0) return cudaMemsetAsync(out, 0, static_cast<size_t>(n_rows) * sizeof(double), raw_stream(stream)) == cudaSuccess
                         ? Status::ok : Status::internal;
  const int32_t k = (top_k <= 0 || top_k > n) ? n : top_k;
  topk_entropy_kernel<<<static_cast<unsigned>(n_rows), 512, 0, raw_stream(stream)>>>(out, logits, n, k);
  return launch_status();
}

Status rep_change_rows(float *out, const float *hidden, int64_t n_layer, int64_t n, int64_t d, Stream *stream) {
  if (n_layer < 0 || n < 0 || d < 0 || (n_layer * n > 0 && (out == nullptr || hidden == nullptr))) return Status::invalid_argument;
  if (n_layer == 0 || n == 0) return Status::ok;
  if (n_layer * n > 0x7fffffffLL) return Status::unsupported;
  rep_change_kernel<<<static_cast<unsigned>(n_layer * n), 256, 0, raw_stream(stream)>>>(out, hidden, n_layer, n, d);
  return launch_status();
}

}  // namespace cuda
}  // namespace infokv
