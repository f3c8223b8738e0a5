// CUDA runtime glue: device selection, device buffers, streams. Compiled only with INFOKV_WITH_CUDA; the runtime is the
// static cudart, which opens libcuda.so.1 only at the first call, so the library loads on machines without CUDA.
#include "kernels/cuda/runtime.hpp"

#include <cuda_runtime.h>

#include <string>

#include "kernels/status.hpp"

namespace infokv {
namespace cuda {

namespace {

std::string err_text(cudaError_t e) { return error_text(static_cast<int>(e)); }

cudaStream_t raw(Stream *s) { return reinterpret_cast<cudaStream_t>(s); }

}  // namespace

std::string error_text(int cuda_error) {
  const auto e = static_cast<cudaError_t>(cuda_error);
  return std::string(cudaGetErrorName(e)) + " (" + std::to_string(cuda_error) + "): " + cudaGetErrorString(e);
}

void set_device(int32_t index) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    fail(Status::no_device, "no CUDA device: " + err_text(e));
  }
  if (index < 0 || index >= n) fail(Status::no_device, "CUDA device " + std::to_string(index) + " does not exist");
  e = cudaSetDevice(index);
  if (e != cudaSuccess) fail(Status::no_device, "cudaSetDevice(" + std::to_string(index) + "): " + err_text(e));
  // Stream-ordered scratch (cudaMallocAsync in the launchers) should stay in the pool between steps instead of
  // going back to the driver at every synchronisation.
  cudaMemPool_t mp = nullptr;
  if (cudaDeviceGetDefaultMemPool(&mp, index) == cudaSuccess) {
    uint64_t keep = UINT64_MAX;
    cudaMemPoolSetAttribute(mp, cudaMemPoolAttrReleaseThreshold, &keep);
  }
  cudaGetLastError();
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  cudaError_t e = cudaMalloc(&ptr_, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    ptr_ = nullptr;
    bytes_ = 0;
    fail(e == cudaErrorMemoryAllocation ? Status::out_of_memory : Status::no_device,
         "cudaMalloc(" + std::to_string(bytes) + "): " + err_text(e));
  }
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) cudaFree(ptr_);
}

DeviceBuffer &DeviceBuffer::operator=(DeviceBuffer &&o) noexcept {
  if (this != &o) {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void DeviceBuffer::upload(const void *host, size_t bytes, Stream *stream, size_t offset) {
  if (offset + bytes > bytes_) fail(Status::invalid_argument, "DeviceBuffer::upload past the end");
  if (bytes == 0) return;
  cudaError_t e = stream ? cudaMemcpyAsync(static_cast<char *>(ptr_) + offset, host, bytes, cudaMemcpyHostToDevice, raw(stream))
                         : cudaMemcpy(static_cast<char *>(ptr_) + offset, host, bytes, cudaMemcpyHostToDevice);
  if (e != cudaSuccess) fail(Status::internal, "upload: " + err_text(e));
}

void DeviceBuffer::download(void *host, size_t bytes, Stream *stream, size_t offset) const {
  if (offset + bytes > bytes_) fail(Status::invalid_argument, "DeviceBuffer::download past the end");
  if (bytes == 0) return;
  cudaError_t e = stream ? cudaMemcpyAsync(host, static_cast<const char *>(ptr_) + offset, bytes, cudaMemcpyDeviceToHost, raw(stream))
                         : cudaMemcpy(host, static_cast<const char *>(ptr_) + offset, bytes, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) fail(Status::internal, "download: " + err_text(e));
}

void DeviceBuffer::zero(Stream *stream) {
  if (bytes_ == 0) return;
  cudaError_t e = stream ? cudaMemsetAsync(ptr_, 0, bytes_, raw(stream)) : cudaMemset(ptr_, 0, bytes_);
  if (e != cudaSuccess) fail(Status::internal, "memset: " + err_text(e));
}

StreamOwner::StreamOwner() {
  cudaStream_t s = nullptr;
  cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    cudaGetLastError();
    fail(Status::no_device, "cudaStreamCreate: " + err_text(e));
  }
  s_ = reinterpret_cast<Stream *>(s);
}

StreamOwner::~StreamOwner() {
  if (s_ != nullptr) cudaStreamDestroy(raw(s_));
}

void StreamOwner::synchronize() const {
  cudaError_t e = cudaStreamSynchronize(raw(s_));
  if (e != cudaSuccess) fail(Status::internal, "cudaStreamSynchronize: " + err_text(e));
}

void check_last_error(const char *what) {
  // After a stream synchronisation: the sticky error of this thread's last launch or of work that failed
  // asynchronously. Not cudaDeviceSynchronize, which would also wait for every other session's stream.
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fail(Status::internal, std::string(what) + ": " + err_text(e));
}

}  // namespace cuda
}  // namespace infokv
