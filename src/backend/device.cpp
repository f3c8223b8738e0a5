#include "backend/device.hpp"

#include <cstdio>
#include <cstdlib>

#include "backend/device_forward.hpp"
#include "backend/device_ops.hpp"
#include "kernels/cpu/cpu_features.hpp"
#include "util/json_escape.hpp"
#include "util/error.hpp"

#ifdef INFOKV_WITH_CUDA
#include "backend/cuda/cuda_backend.hpp"
#endif

namespace infokv {

DeviceReport device_report() {
  DeviceReport r;
#ifdef INFOKV_WITH_CUDA
  r = cuda::probe();
#else
  r.cuda_compiled = false;
  r.cuda_devices = 0;
  r.reason = "built without CUDA (INFOKV_WITH_CUDA=OFF)";
#endif
  r.cpu_arch = cpu_arch_name();
  r.cpu_kernels = cpu_kernels_name();
  return r;
}

std::string device_report_json(const DeviceReport &r) {
  std::string s = "{\"cuda_compiled\": ";
  s += r.cuda_compiled ? "true" : "false";
  s += ", \"cuda_devices\": " + std::to_string(r.cuda_devices);
  s += ", \"reason\": \"" + json_escape(r.reason) + "\"";
  s += ", \"driver_version\": " + std::to_string(r.driver_version);
  s += ", \"runtime_version\": " + std::to_string(r.runtime_version);
  s += ", \"cpu_arch\": \"" + r.cpu_arch + "\", \"cpu_kernels\": \"" + r.cpu_kernels + "\"";
  s += ", \"cuda_forward\": ";
  s += cuda_forward_available() ? "true" : "false";
  s += ", \"devices\": [";
  for (size_t i = 0; i < r.devices.size(); ++i) {
    const CudaDeviceInfo &d = r.devices[i];
    char bw[64];
    std::snprintf(bw, sizeof bw, "%.1f", d.peak_bandwidth_gbs);
    if (i) s += ", ";
    s += "{\"index\": " + std::to_string(d.index) + ", \"name\": \"" + json_escape(d.name) + "\", \"compute_capability\": \"" +
         std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor) + "\", \"total_bytes\": " + std::to_string(d.total_bytes) +
         ", \"free_bytes\": " + std::to_string(d.free_bytes) + ", \"sm_count\": " + std::to_string(d.sm_count) +
         ", \"peak_bandwidth_gbs\": " + bw + "}";
  }
  s += "]}";
  return s;
}

bool cuda_forward_available() {
#ifdef INFOKV_WITH_CUDA
  return true;
#else
  return false;
#endif
}

std::unique_ptr<DeviceForward> make_device_forward(const Model &model, const DeviceChoice &choice, ThreadPool *pool) {
  if (choice.kind == DeviceKind::cpu) return make_ops_forward(model, make_host_ops(pool));
#ifdef INFOKV_WITH_CUDA
  return make_ops_forward(model, cuda::make_ops(choice.index));
#else
  fail(Status::unsupported, "this build has no CUDA backend (INFOKV_WITH_CUDA=OFF)");
#endif
}

DeviceChoice select_device(const std::string &spec) {
  DeviceChoice c;
  if (spec.empty() || spec == "cpu") {
    c.reason = "cpu requested";
    return c;
  }
  if (spec == "auto") {
    // The CUDA forward path has been compiled and twin-tested on the CPU, never run on hardware: "auto" stays on
    // the CPU until tests/gpu/run.sh has shown parity on a GPU, and CUDA is opt-in with "cuda" / "cuda:N". It does
    // not probe the GPUs either: a probe starts a CUDA context on each, costing start-up time and device memory to a
    // caller who runs on the CPU (the default device).
    c.reason = "auto: the CPU (the CUDA backend is chosen with device cuda until it has shown parity on hardware)";
    return c;
  }
  if (spec.compare(0, 4, "cuda") == 0) {
    int32_t index = 0;
    if (spec.size() > 4) {
      if (spec[4] != ':' || spec.size() == 5) fail(Status::invalid_argument, "bad device '" + spec + "' (expected cpu, cuda, cuda:N or auto)");
      char *end = nullptr;
      long v = std::strtol(spec.c_str() + 5, &end, 10);
      if (*end != '\0' || v < 0 || v > 1024) fail(Status::invalid_argument, "bad device '" + spec + "' (expected cpu, cuda, cuda:N or auto)");
      index = static_cast<int32_t>(v);
    }
    DeviceReport r = device_report();
    if (r.cuda_devices == 0) fail(Status::no_device, "device '" + spec + "' requested but no CUDA device is usable: " + r.reason);
    if (index >= r.cuda_devices)
      fail(Status::no_device, "device '" + spec + "' requested but only " + std::to_string(r.cuda_devices) + " CUDA device(s) exist");
    c.kind = DeviceKind::cuda;
    c.index = index;
    c.reason = "requested: CUDA device " + std::to_string(index) + " (" + r.devices[static_cast<size_t>(index)].name + ")";
    return c;
  }
  fail(Status::invalid_argument, "bad device '" + spec + "' (expected cpu, cuda, cuda:N or auto)");
}

}  // namespace infokv
