// Host-side owners for CUDA resources (device buffers, streams, the cuBLAS handle) and device selection, declared
// without CUDA headers (the definitions in runtime.cpp and matmul.cpp include them). Nothing here knows models or
// sessions: the CUDA backend (src/backend/cuda/) builds on it.
#pragma once
#include <cstddef>
#include <cstdint>

#include <string>

#include "kernels/cuda/ops_cuda.hpp"
#include "kernels/status.hpp"

namespace infokv {
namespace cuda {

// "cudaErrorX (n): text" for a cudaError_t value.
std::string error_text(int cuda_error);

// Throws Error(no_device) unless a device with that ordinal is usable; makes it current for the calling thread.
void set_device(int32_t index);

// Owns a device allocation (cudaMalloc/cudaFree). Throws Error(out_of_memory) when it cannot be made.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer &&o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; o.bytes_ = 0; }
  DeviceBuffer &operator=(DeviceBuffer &&o) noexcept;
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;

  void *get() const { return ptr_; }
  template <typename T> T *as() const { return static_cast<T *>(ptr_); }
  size_t bytes() const { return bytes_; }
  // Host <-> device copies, ordered on `stream` (synchronous with respect to the host when stream is null).
  void upload(const void *host, size_t bytes, Stream *stream = nullptr, size_t offset = 0);
  void download(void *host, size_t bytes, Stream *stream = nullptr, size_t offset = 0) const;
  void zero(Stream *stream = nullptr);

 private:
  void *ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Owns a non-blocking stream (one per session in the device model).
class StreamOwner {
 public:
  StreamOwner();   // throws Error(no_device) when no stream can be made
  ~StreamOwner();
  StreamOwner(const StreamOwner &) = delete;
  StreamOwner &operator=(const StreamOwner &) = delete;
  Stream *get() const { return s_; }
  void synchronize() const;  // throws Error(internal) with the CUDA error text

 private:
  Stream *s_ = nullptr;
};

// Throws Error(internal) naming the pending CUDA error, if any (checks cudaGetLastError after a stream sync).
void check_last_error(const char *what);

// ---- cuBLAS, opened with dlopen("libcublas.so.13") on first use (matmul.cpp) ----
// Whether the library could be opened and its symbols resolved; *why receives the dlerror text otherwise.
bool cublas_available(std::string *why = nullptr);

// Owns a cublasHandle_t bound to a stream. Throws Error(no_device) when cuBLAS cannot be loaded or initialised.
class CublasHandle {
 public:
  explicit CublasHandle(Stream *stream);
  ~CublasHandle();
  CublasHandle(const CublasHandle &) = delete;
  CublasHandle &operator=(const CublasHandle &) = delete;
  void *get() const { return h_; }
  void set_stream(Stream *stream);

 private:
  void *h_ = nullptr;
};

}  // namespace cuda
}  // namespace infokv
