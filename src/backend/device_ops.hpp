// The operations a device backend supplies to the forward pass (src/backend/ops_forward.cpp): memory, copies,
// resident weights and one call per kernel, with the parameters of the cpu:: twins in kernels/ops.hpp. The CPU
// implements it with those twins on host memory (cpu/host_ops.cpp); CUDA with its kernels and cuBLAS on one stream
// (cuda/cuda_ops.cpp). So there is one forward pass, and every CPU test runs the code the GPU runs, except
// the kernels themselves (those are compared with their twins in tests/gpu). No CUDA header here.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/ops.hpp"
#include "kv/kv_store.hpp"

namespace infokv {

struct Weight;
class Model;
class ThreadPool;

// A weight matrix [rows, cols] (ggml type) as the device reads it: device memory, or the host mapping on the CPU.
struct DevMatrix {
  const void *data = nullptr;
  uint32_t type = 0;
  int64_t rows = 0, cols = 0;
};

// "Device memory" below means host memory for the CPU backend. Every call is ordered after the previous ones
// (one stream); results reach the host at sync(). Failures throw Error.
class DeviceOps {
 public:
  virtual ~DeviceOps() = default;
  virtual std::string name() const = 0;  // "cpu", "cuda:0"
  // Makes the device current for the calling thread (a session may move between threads).
  virtual void activate() {}
  // Bytes free on the device now (CPU: available physical memory); -1 when unknown.
  virtual int64_t free_memory() const = 0;
  // The share of free_memory() a KV pool takes when its size is not given; 0: size it from the model's context.
  virtual double default_pool_fraction() const = 0;
  // The chunk size from which each token's results depend on that token alone (cpu::chunk_invariant_from); 0: none
  // promised (only the same cuts of a prompt give the same bits).
  virtual int64_t chunk_invariant_from() const { return 0; }

  // ---- memory ----
  virtual void *alloc(size_t bytes) = 0;  // throws Error(out_of_memory)
  virtual void release(void *p) noexcept = 0;
  virtual void upload(void *dst, const void *host, size_t bytes) = 0;
  virtual void download(void *host, const void *src, size_t bytes) = 0;  // host bytes valid after sync()
  virtual void copy(void *dst, const void *src, size_t bytes) = 0;
  virtual void zero(void *dst, size_t bytes) = 0;
  virtual void sync() = 0;  // waits for the work so far; throws Error(internal) naming a failed kernel

  // ---- resident weights (live as long as this object) ----
  // A matrix matmul and get_rows accept, for weight w of `model`: the CPU uses the mapping as is (f32 and quantised
  // types) or the model's grouped copy of f16/bf16 rows (kernels/ops.hpp); CUDA keeps 16-bit copies (f32 and
  // quantised types converted to f16 on load).
  virtual DevMatrix matrix(const Model &model, const Weight &w) = 0;
  virtual const float *vec(const std::vector<float> &v) = 0;  // [v.size()] f32

  // The KV block pool of a cache with this geometry (src/kv/kv_store.hpp).
  virtual std::unique_ptr<KvStore> make_kv_store(const PagedKv &geometry, int64_t n_blocks) = 0;

  // ---- kernels: see the cpu:: twin of the same name for shapes and semantics ----
  virtual void get_rows(float *out, const DevMatrix &emb, const int32_t *ids, int64_t n, int64_t d) = 0;
  virtual void rmsnorm(float *out, const float *x, const float *w, int64_t n, int64_t d, float eps) = 0;
  // inv_freq: device memory, [head_dim / 2] doubles
  virtual void rope(float *x, const int32_t *pos, int64_t n, int64_t n_heads, int64_t head_dim, const double *inv_freq) = 0;
  // The chunk about to run is a decode step of several sequences, one token each (true), or anything else: a
  // backend whose products could depend on the batch computes each row alone in the first case (the CPU:
  // cpu::RowsIndependent), so a sequence's logits do not depend on what it is batched with.
  virtual void set_decode_batch(bool) {}
  // out[n, w.rows] = x[n, w.cols] · W^T
  virtual void matmul(float *out, const float *x, const DevMatrix &w, int64_t n) = 0;
  // outs[i][n, ws[i]->rows] = x[n, cols] · W_i^T for matrices of one input width (q, k and v; gate and up): the
  // results of matmul on each; a backend may run them as one job (the CPU does for a lone token).
  virtual void matmul_parts(float *const *outs, const float *x, const DevMatrix *const *ws, int count, int64_t n) {
    for (int i = 0; i < count; ++i) matmul(outs[i], x, *ws[i], n);
  }
  virtual void swiglu(float *out, const float *gate, const float *up, int64_t n) = 0;
  virtual void add_inplace(float *x, const float *y, int64_t n) = 0;
  virtual void add_bias(float *x, const float *b, int64_t n, int64_t d) = 0;
  virtual void kv_append(const PagedKv &kv, int32_t first_slot, const float *k, const float *v, int64_t n) = 0;
  virtual void paged_attention(float *out, const float *q, int64_t n_q, int32_t n_heads, const PagedKv &kv,
                               int32_t visible0, float scale, float *acc, float *acc_count) = 0;
  virtual void kv_append_rows(const PagedKv &kv, const int32_t *slot_addr, const float *k, const float *v, int64_t n) = 0;
  virtual void paged_attention_rows(float *out, const float *q, int64_t n_q, int32_t n_heads, const PagedKv &kv,
                                    const int32_t *table_off, const int32_t *vis, int32_t max_vis, float scale) = 0;
  virtual void attention_probs_mean(float *probs, const float *q, int64_t n_q, int32_t n_heads, const PagedKv &kv,
                                    int32_t visible0, float scale) = 0;
  virtual void topk_entropy_rows(double *out, const float *logits, int64_t n_rows, int32_t n, int32_t top_k) = 0;
  virtual void rep_change_rows(float *out, const float *hidden, int64_t n_layer, int64_t n, int64_t d) = 0;
  virtual void kv_move_slots(const PagedKv &kv, const int32_t *moves, int64_t n, uint8_t *scratch) = 0;
};

// Owns an allocation of a DeviceOps; grows on demand (contents not kept).
class DevBuf {
 public:
  DevBuf() = default;
  ~DevBuf() { reset(); }
  DevBuf(DevBuf &&o) noexcept : ops_(o.ops_), p_(o.p_), bytes_(o.bytes_) { o.p_ = nullptr; o.bytes_ = 0; }
  DevBuf &operator=(DevBuf &&o) noexcept {
    if (this != &o) {
      reset();
      ops_ = o.ops_;
      p_ = o.p_;
      bytes_ = o.bytes_;
      o.p_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  DevBuf(const DevBuf &) = delete;
  DevBuf &operator=(const DevBuf &) = delete;

  // At least `bytes` (at least 1 byte is always allocated, so the pointer is never null).
  void ensure(DeviceOps &ops, size_t bytes) {
    if (p_ != nullptr && bytes_ >= bytes) return;
    reset();
    ops_ = &ops;
    p_ = ops.alloc(bytes > 0 ? bytes : 1);
    bytes_ = bytes;
  }
  void reset() noexcept {
    if (p_ != nullptr) ops_->release(p_);
    p_ = nullptr;
    bytes_ = 0;
  }
  template <typename T> T *as() const { return static_cast<T *>(p_); }
  size_t bytes() const { return bytes_; }

 private:
  DeviceOps *ops_ = nullptr;
  void *p_ = nullptr;
  size_t bytes_ = 0;
};

// The CPU's DeviceOps (cpu/host_ops.cpp): the cpu:: kernels, multithreaded on `pool` (not owned; must outlive it).
// With like_device it behaves as a device would where the CPU normally takes a shortcut, so the tests run the device
// code paths without a GPU: its KV pool is the generic store a device backend uses (make_ops_kv_store, in malloc'ed
// memory) instead of the memory-mapped host store, and a download reaches the host only at sync() (the
// destination holds a poison pattern until then), as with an asynchronous copy on a GPU stream.
std::unique_ptr<DeviceOps> make_host_ops(ThreadPool *pool, bool like_device = false);

// A KvStore in a DeviceOps's memory, moving bytes with its copy and kv_move_slots (ops_forward.cpp).
std::unique_ptr<KvStore> make_ops_kv_store(DeviceOps &ops, const PagedKv &geometry, int64_t n_blocks);

}  // namespace infokv

namespace infokv {
class Model;
class DeviceForward;
// The forward pass over any DeviceOps (ops_forward.cpp): uploads the model's weights through `ops` at once.
std::unique_ptr<DeviceForward> make_ops_forward(const Model &model, std::unique_ptr<DeviceOps> ops);
}  // namespace infokv
