// cuBLAS through dlopen: libinfokv never links libcublas (which would make it, and the 0.5 GB libcublasLt, a
// load-time dependency). The library is opened on first use; function pointer types come from cublas_api.h via
// decltype, so no cuBLAS symbol is referenced at link time.
#include <cublas_api.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <memory>
#include <mutex>
#include <string>

#include "kernels/cuda/runtime.hpp"
#include "kernels/ggml_types.hpp"
#include "kernels/status.hpp"

namespace infokv {
namespace cuda {

namespace {

struct CublasApi {
  void *lib = nullptr;
  std::string error;
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  // cublasGemmEx is overloaded in C++ (a legacy cudaDataType_t overload), so its pointer type is spelled out.
  using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                                    const void *, cudaDataType, int, const void *, cudaDataType, int, const void *, void *,
                                    cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  GemmEx gemm_ex = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
};

// Filled once, then read-only: the loaded library lives until the process ends (dlclose at exit would race
// with handles destroyed by static destructors).
const CublasApi &api() {
  static CublasApi a;
  static std::once_flag once;
  std::call_once(once, [] {
    const char *names[] = {"libcublas.so.13", "libcublas.so"};
    for (const char *n : names) {
      a.lib = dlopen(n, RTLD_NOW | RTLD_LOCAL);
      if (a.lib != nullptr) break;
      const char *e = dlerror();
      if (a.error.empty()) a.error = e ? e : "dlopen failed";
    }
    if (a.lib == nullptr) return;
    a.error.clear();
    auto sym = [&](const char *name) {
      void *p = dlsym(a.lib, name);
      if (p == nullptr && a.error.empty()) a.error = std::string("libcublas has no symbol ") + name;
      return p;
    };
    a.create = reinterpret_cast<decltype(a.create)>(sym("cublasCreate_v2"));
    a.destroy = reinterpret_cast<decltype(a.destroy)>(sym("cublasDestroy_v2"));
    a.set_stream = reinterpret_cast<decltype(a.set_stream)>(sym("cublasSetStream_v2"));
    a.gemm_ex = reinterpret_cast<decltype(a.gemm_ex)>(sym("cublasGemmEx"));
    a.set_math_mode = reinterpret_cast<decltype(a.set_math_mode)>(sym("cublasSetMathMode"));
    if (!a.error.empty()) a.create = nullptr;  // unusable
  });
  return a;
}

cudaStream_t raw(Stream *s) { return reinterpret_cast<cudaStream_t>(s); }

}  // namespace

bool cublas_available(std::string *why) {
  const CublasApi &a = api();
  if (a.create != nullptr) return true;
  if (why != nullptr) *why = a.error;
  return false;
}

CublasHandle::CublasHandle(Stream *stream) {
  const CublasApi &a = api();
  if (a.create == nullptr) fail(Status::no_device, "cuBLAS is not available: " + a.error);
  cublasHandle_t h = nullptr;
  cublasStatus_t st = a.create(&h);
  if (st != CUBLAS_STATUS_SUCCESS) fail(Status::no_device, "cublasCreate failed with status " + std::to_string(static_cast<int>(st)));
  h_ = h;
  set_stream(stream);
}

CublasHandle::~CublasHandle() {
  if (h_ != nullptr) api().destroy(static_cast<cublasHandle_t>(h_));
}

void CublasHandle::set_stream(Stream *stream) {
  cublasStatus_t st = api().set_stream(static_cast<cublasHandle_t>(h_), raw(stream));
  if (st != CUBLAS_STATUS_SUCCESS) fail(Status::internal, "cublasSetStream failed with status " + std::to_string(static_cast<int>(st)));
}

Status matmul(float *out, const float *x, const void *w, uint32_t w_type, int64_t n, int64_t m, int64_t k, Stream *stream) {
  if (n <= 0 || m <= 0 || k <= 0) return n == 0 ? Status::ok : Status::invalid_argument;
  if (n > INT32_MAX || m > INT32_MAX || k > INT32_MAX) return Status::unsupported;
  cudaDataType_t wt;
  KvDtype xt;
  switch (static_cast<GgmlType>(w_type)) {
    case GgmlType::F32: wt = CUDA_R_32F; xt = KvDtype::f32; break;
    case GgmlType::F16: wt = CUDA_R_16F; xt = KvDtype::f16; break;
    case GgmlType::BF16: wt = CUDA_R_16BF; xt = KvDtype::bf16; break;
    default: return Status::unsupported;
  }
  const CublasApi &a = api();
  if (a.create == nullptr) return Status::no_device;
  // One handle per thread and device, created on first use and rebound to the caller's stream each call
  // (cublasDestroy synchronises the device, so a handle per call would serialise everything).
  thread_local std::unique_ptr<CublasHandle> tl_handle;
  thread_local int tl_device = -1;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return Status::no_device;
  }
  if (!tl_handle || tl_device != dev) {
    try {
      tl_handle = std::make_unique<CublasHandle>(stream);
    } catch (const Error &) {
      return Status::no_device;
    }
    tl_device = dev;
  } else {
    if (a.set_stream(static_cast<cublasHandle_t>(tl_handle->get()), raw(stream)) != CUBLAS_STATUS_SUCCESS) return Status::internal;
  }
  CublasHandle &handle = *tl_handle;
  const void *xin = x;
  void *scratch = nullptr;
  if (xt != KvDtype::f32) {
    if (cudaMallocAsync(&scratch, static_cast<size_t>(n * k) * 2, raw(stream)) != cudaSuccess) {
      cudaGetLastError();
      return Status::out_of_memory;
    }
    Status s = convert(scratch, xt, x, KvDtype::f32, n * k, stream);
    if (s != Status::ok) {
      cudaFreeAsync(scratch, raw(stream));
      return s;
    }
    xin = scratch;
  }
  const float alpha = 1.0f, beta = 0.0f;
  // Row-major out[n, m] = x[n, k] W[m, k]^T is column-major out^T[m, n] = W^T(k x m)^T · x^T(k x n).
  cublasStatus_t st = a.gemm_ex(static_cast<cublasHandle_t>(handle.get()), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(m),
                                static_cast<int>(n), static_cast<int>(k), &alpha, w, wt, static_cast<int>(k), xin, wt,
                                static_cast<int>(k), &beta, out, CUDA_R_32F, static_cast<int>(m), CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT);
  if (scratch != nullptr) cudaFreeAsync(scratch, raw(stream));
  return st == CUBLAS_STATUS_SUCCESS ? Status::ok : Status::internal;
}

}  // namespace cuda
}  // namespace infokv
