// Device discovery and selection. No CUDA header here: in a CPU-only build this compiles to "no CUDA", in a CUDA
// build it asks the statically linked CUDA runtime, treating ANY error (no driver, cudaErrorInsufficientDriver = 35,
// no device, ...) as zero devices with the reason recorded.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace infokv {

struct CudaDeviceInfo {
  int32_t index = 0;
  std::string name;
  int32_t cc_major = 0, cc_minor = 0;  // compute capability
  int64_t total_bytes = 0;
  int64_t free_bytes = 0;
  int32_t sm_count = 0;
  double peak_bandwidth_gbs = 0;       // from memory clock and bus width (0 when the runtime does not say)
};

struct DeviceReport {
  bool cuda_compiled = false;          // this build contains the CUDA backend
  int32_t cuda_devices = 0;            // usable CUDA devices (0 on any runtime error)
  std::string reason;                  // why there are none, or "ok"
  int32_t driver_version = 0;          // cudaDriverGetVersion (0: no driver)
  int32_t runtime_version = 0;         // of the linked runtime
  std::vector<CudaDeviceInfo> devices;
  std::string cpu_arch;                // the CPU side: cpu_arch_name() and cpu_kernels_name()
  std::string cpu_kernels;
};

// Probes once per call (cheap after the first: the CUDA runtime caches its initialisation). Never throws for a
// missing GPU or driver.
DeviceReport device_report();
// {"cuda_compiled": ..., "cuda_devices": N, "reason": "...", "driver_version": ..., "runtime_version": ...,
//  "cpu_arch": "x86-64", "cpu_kernels": "avx512-vnni",
//  "devices": [{"index", "name", "compute_capability", "total_bytes", "free_bytes", "sm_count", "peak_bandwidth_gbs"}]}
std::string device_report_json(const DeviceReport &r);

enum class DeviceKind : int32_t { cpu = 0, cuda = 1 };

struct DeviceChoice {
  DeviceKind kind = DeviceKind::cpu;
  int32_t index = 0;       // CUDA ordinal when kind == cuda
  std::string reason;      // why this device (e.g. "auto: no CUDA device (...), using the CPU")
};

// Resolves "cpu", "cuda", "cuda:N", "auto" (also "" = "cpu"). "cuda"/"cuda:N" without such a device throws
// Error(Status::no_device) with the probe's reason; an unknown string throws Error(Status::invalid_argument).
// "auto" is the CPU, without probing the GPUs, until the CUDA forward path has shown parity on hardware
// (device.cpp); the choice's reason says so.
DeviceChoice select_device(const std::string &spec);

// Whether this build contains the CUDA backend (CudaOps, src/backend/cuda/cuda_ops.cpp): true in CUDA builds.
bool cuda_forward_available();

}  // namespace infokv
