// C ABI for device discovery (ikv_device_*): kept apart from infokv_capi.cpp so the backend owns its own shims.
#include <cstring>
#include <string>

#include "backend/device.hpp"
#include "handles.hpp"

using infokv::capi::fail_status;
using infokv::capi::guard;

int32_t ikv_device_count(int32_t *out) {
  if (out != nullptr) *out = 0;
  return guard([&] {
    if (out == nullptr) return fail_status(IKV_ERR_INVALID_ARGUMENT, "out must not be NULL");
    *out = infokv::device_report().cuda_devices;
    return static_cast<int32_t>(IKV_OK);
  });
}

int32_t ikv_device_name(char *out, size_t capacity, size_t *out_len, int32_t index) {
  if (out_len != nullptr) *out_len = 0;
  if (out != nullptr && capacity > 0) out[0] = '\0';
  return guard([&] {
    if (out_len == nullptr) return fail_status(IKV_ERR_INVALID_ARGUMENT, "out_len must not be NULL");
    if (out == nullptr && capacity != 0) return fail_status(IKV_ERR_INVALID_ARGUMENT, "out is NULL but capacity is not 0");
    const infokv::DeviceReport r = infokv::device_report();
    if (index < 0 || index >= r.cuda_devices)
      return fail_status(IKV_ERR_NO_DEVICE, "no CUDA device " + std::to_string(index) + " (" + std::to_string(r.cuda_devices) +
                                                " usable; " + r.reason + ")");
    return infokv::capi::copy_out_text(out, capacity, out_len, r.devices[static_cast<size_t>(index)].name);
  });
}
