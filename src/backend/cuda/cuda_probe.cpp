// CUDA device discovery for device_report(). Compiled only with INFOKV_WITH_CUDA; any CUDA error means zero devices.
#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/cuda_backend.hpp"
#include "kernels/cuda/runtime.hpp"

namespace infokv {
namespace cuda {

DeviceReport probe() {
  DeviceReport r;
  r.cuda_compiled = true;
  int rt = 0, drv = 0;
  if (cudaRuntimeGetVersion(&rt) == cudaSuccess) r.runtime_version = rt;
  if (cudaDriverGetVersion(&drv) == cudaSuccess) r.driver_version = drv;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-less error so later calls start clean
    r.cuda_devices = 0;
    r.reason = "cudaGetDeviceCount failed: " + error_text(static_cast<int>(e));
    return r;
  }
  if (n <= 0) {
    r.reason = "the CUDA driver reports no device";
    return r;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    CudaDeviceInfo d;
    d.index = i;
    d.name = p.name;
    d.cc_major = p.major;
    d.cc_minor = p.minor;
    d.total_bytes = static_cast<int64_t>(p.totalGlobalMem);
    d.sm_count = p.multiProcessorCount;
    int clock_khz = 0, bus_bits = 0;
    if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, i) == cudaSuccess &&
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, i) == cudaSuccess)
      d.peak_bandwidth_gbs = 2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;  // DDR: two transfers per clock
    else
      cudaGetLastError();
    int prev = 0;
    if (cudaGetDevice(&prev) == cudaSuccess && cudaSetDevice(i) == cudaSuccess) {
      size_t fr = 0, tot = 0;
      if (cudaMemGetInfo(&fr, &tot) == cudaSuccess) d.free_bytes = static_cast<int64_t>(fr);
      cudaSetDevice(prev);
    }
    cudaGetLastError();
    r.devices.push_back(d);
  }
  r.cuda_devices = static_cast<int32_t>(r.devices.size());
  r.reason = r.cuda_devices > 0 ? "ok" : "no device answered cudaGetDeviceProperties";
  return r;
}

}  // namespace cuda
}  // namespace infokv
