// The CUDA backend's entry points, declared without CUDA headers: discovery and the DeviceOps of one device.
// Only compiled when INFOKV_WITH_CUDA (device.cpp calls them behind that macro).
#pragma once
#include <cstdint>
#include <memory>

#include "backend/device.hpp"
#include "backend/device_ops.hpp"

namespace infokv {
namespace cuda {

// Device discovery: any CUDA error means zero devices, with the error's name and text as the reason.
DeviceReport probe();

// The CUDA DeviceOps (cuda_ops.cpp) on device `device`, with its own stream. Throws Error(no_device) when the
// device or cuBLAS is unusable.
std::unique_ptr<DeviceOps> make_ops(int32_t device);

}  // namespace cuda
}  // namespace infokv
