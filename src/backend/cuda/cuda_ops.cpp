// DeviceOps on a CUDA device: cudaMalloc'ed memory, one non-blocking stream per session (every call enqueues on
// it), the kernels of kernels/cuda and cuBLAS (dlopen'ed) for the GEMMs. Weights are resident in 16 bits: f16/bf16
// as stored, f32 and the quantised types uploaded as they are and converted to f16 on the device at load.
// The forward pass over these operations (src/backend/ops_forward.cpp) is the one every CPU test runs; tests/gpu
// compares the kernels with their CPU twins and whole-model logits with the CPU's.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/device_ops.hpp"
#include "kernels/cuda/ops_cuda.hpp"
#include "kernels/cuda/runtime.hpp"
#include "kernels/ggml_types.hpp"
#include "model/model.hpp"
#include "util/error.hpp"

namespace infokv {
namespace cuda {

namespace {

void ok(Status s, const char *what) {
  if (s == Status::ok) return;
  fail(s == Status::out_of_memory || s == Status::unsupported || s == Status::no_device ? s : Status::internal,
       std::string("CUDA ") + what + " failed (status " + std::to_string(static_cast<int>(s)) + ")");
}

void ok(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  fail(Status::internal, std::string("CUDA ") + what + ": " + cudaGetErrorString(e));
}

class CudaOps final : public DeviceOps {
 public:
  explicit CudaOps(int32_t device) : device_(device) {
    set_device(device);
    std::string why;
    if (!cublas_available(&why)) fail(Status::no_device, "cuBLAS is not available: " + why);
    stream_ = std::make_unique<StreamOwner>();
  }
  ~CudaOps() override {
    // Resident weights and vectors go with the object; wait for work that may still read them.
    cudaSetDevice(device_);
    cudaStreamSynchronize(st());
  }

  std::string name() const override { return "cuda:" + std::to_string(device_); }
  void activate() override { set_device(device_); }
  int64_t free_memory() const override {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
      cudaGetLastError();
      return -1;
    }
    return static_cast<int64_t>(free_b);
  }
  // What is left after the weights, less room for activations, cuBLAS workspace and other sessions.
  double default_pool_fraction() const override { return 0.8; }

  void *alloc(size_t bytes) override {
    void *p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
      cudaGetLastError();
      fail(Status::out_of_memory, "cannot allocate " + std::to_string(bytes) + " bytes on " + name());
    }
    return p;
  }
  void release(void *p) noexcept override {
    // Work already enqueued may still use the memory: cudaFree waits for the device where needed.
    cudaFree(p);
  }
  void upload(void *dst, const void *host, size_t bytes) override {
    ok(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, st()), "upload");
  }
  void download(void *host, const void *src, size_t bytes) override {
    ok(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, st()), "download");
  }
  void copy(void *dst, const void *src, size_t bytes) override {
    ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st()), "copy");
  }
  void zero(void *dst, size_t bytes) override { ok(cudaMemsetAsync(dst, 0, bytes, st()), "memset"); }
  void sync() override {
    stream_->synchronize();
    check_last_error("forward");
  }

  DevMatrix matrix(const Model & /*model*/, const Weight &w) override {
    DevMatrix m{nullptr, w.type, w.rows, w.cols};
    const size_t n = static_cast<size_t>(w.rows * w.cols);
    const auto t = static_cast<GgmlType>(w.type);
    DeviceBuffer buf(n * 2);
    if (t == GgmlType::F16 || t == GgmlType::BF16) {
      buf.upload(w.data, n * 2, stream_->get());
    } else if (cpu::weight_type_supported(w.type)) {
      // f32 and quantised types travel in their own (smaller for quantised) form and become f16 on the device.
      const GgmlTypeTraits tt = ggml_type_traits(w.type);
      const size_t bytes = n / tt.block_elems * tt.block_bytes;
      DeviceBuffer raw(bytes);
      raw.upload(w.data, bytes, stream_->get());
      if (t == GgmlType::F32) ok(cuda::convert(buf.get(), KvDtype::f16, raw.get(), KvDtype::f32, static_cast<int64_t>(n), s()), "convert");
      else ok(cuda::dequantize_f16(buf.get(), raw.get(), w.type, static_cast<int64_t>(n), s()), "dequantize");
      stream_->synchronize();  // raw is freed on return
      m.type = static_cast<uint32_t>(GgmlType::F16);
    } else {
      fail(Status::unsupported, "CUDA backend: weight type of " + w.name + " is not supported");
    }
    m.data = buf.get();
    resident_.push_back(std::move(buf));
    return m;
  }
  const float *vec(const std::vector<float> &v) override {
    DeviceBuffer b(v.size() * 4);
    b.upload(v.data(), v.size() * 4, stream_->get());
    resident_.push_back(std::move(b));
    return resident_.back().as<float>();
  }
  std::unique_ptr<KvStore> make_kv_store(const PagedKv &geometry, int64_t n_blocks) override {
    return make_ops_kv_store(*this, geometry, n_blocks);
  }

  void get_rows(float *out, const DevMatrix &emb, const int32_t *ids, int64_t n, int64_t d) override {
    ok(cuda::get_rows(out, emb.data, emb.type, ids, n, d, s()), "get_rows");
  }
  void rmsnorm(float *out, const float *x, const float *w, int64_t n, int64_t d, float eps) override {
    ok(cuda::rmsnorm(out, x, w, n, d, eps, s()), "rmsnorm");
  }
  void rope(float *x, const int32_t *pos, int64_t n, int64_t n_heads, int64_t head_dim, const double *inv_freq) override {
    ok(cuda::rope(x, pos, n, n_heads, head_dim, inv_freq, s()), "rope");
  }
  void matmul(float *out, const float *x, const DevMatrix &w, int64_t n) override {
    ok(cuda::matmul(out, x, w.data, w.type, n, w.rows, w.cols, s()), "matmul");
  }
  void swiglu(float *out, const float *gate, const float *up, int64_t n) override {
    ok(cuda::swiglu(out, gate, up, n, s()), "swiglu");
  }
  void add_inplace(float *x, const float *y, int64_t n) override { ok(cuda::add_inplace(x, y, n, s()), "add"); }
  void add_bias(float *x, const float *b, int64_t n, int64_t d) override { ok(cuda::add_bias(x, b, n, d, s()), "add_bias"); }
  void kv_append(const PagedKv &kv, int32_t first_slot, const float *k, const float *v, int64_t n) override {
    ok(cuda::kv_append(kv, first_slot, k, v, n, s()), "kv_append");
  }
  void paged_attention(float *out, const float *q, int64_t n_q, int32_t n_heads, const PagedKv &kv, int32_t visible0,
                       float scale, float *acc, float *acc_count) override {
    ok(cuda::paged_attention(out, q, n_q, n_heads, kv, visible0, scale, acc, acc_count, s()), "paged_attention");
  }
  void kv_append_rows(const PagedKv &kv, const int32_t *slot_addr, const float *k, const float *v, int64_t n) override {
    ok(cuda::kv_append_rows(kv, slot_addr, k, v, n, s()), "kv_append_rows");
  }
  void paged_attention_rows(float *out, const float *q, int64_t n_q, int32_t n_heads, const PagedKv &kv,
                            const int32_t *table_off, const int32_t *vis, int32_t max_vis, float scale) override {
    ok(cuda::paged_attention_rows(out, q, n_q, n_heads, kv, table_off, vis, max_vis, scale, s()), "paged_attention_rows");
  }
  void attention_probs_mean(float *probs, const float *q, int64_t n_q, int32_t n_heads, const PagedKv &kv,
                            int32_t visible0, float scale) override {
    ok(cuda::attention_probs_mean(probs, q, n_q, n_heads, kv, visible0, scale, s()), "attention_probs_mean");
  }
  void topk_entropy_rows(double *out, const float *logits, int64_t n_rows, int32_t n, int32_t top_k) override {
    ok(cuda::topk_entropy_rows(out, logits, n_rows, n, top_k, s()), "topk_entropy_rows");
  }
  void rep_change_rows(float *out, const float *hidden, int64_t n_layer, int64_t n, int64_t d) override {
    ok(cuda::rep_change_rows(out, hidden, n_layer, n, d, s()), "rep_change_rows");
  }
  void kv_move_slots(const PagedKv &kv, const int32_t *moves, int64_t n, uint8_t *scratch) override {
    ok(cuda::kv_move_slots(kv, moves, n, scratch, s()), "kv_move_slots");
  }

 private:
  Stream *s() const { return stream_->get(); }
  cudaStream_t st() const { return reinterpret_cast<cudaStream_t>(stream_->get()); }

  int32_t device_;
  std::unique_ptr<StreamOwner> stream_;
  std::vector<DeviceBuffer> resident_;
};

}  // namespace

std::unique_ptr<DeviceOps> make_ops(int32_t device) { return std::make_unique<CudaOps>(device); }

}  // namespace cuda
}  // namespace infokv
