// Base fixture of the GPU parity tests: a test is skipped, with the reason, where no CUDA device can run it (a build
// without CUDA, or a machine without a usable device), so the same binary runs everywhere.
#pragma once
#include <gtest/gtest.h>

#include "backend/device.hpp"

namespace infokv_test {

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const infokv::DeviceReport r = infokv::device_report();
    if (!r.cuda_compiled) GTEST_SKIP() << "built without CUDA";
    if (r.cuda_devices == 0) GTEST_SKIP() << "no CUDA device: " << r.reason;
  }
};

}  // namespace infokv_test
