// Device selection and discovery. On a machine without a GPU (CI) "cuda" must fail with no_device and "auto"
// must fall back to the CPU; on a GPU machine the same tests check the other branch.
#include <gtest/gtest.h>

#include <string>

#include "backend/device.hpp"
#include "kernels/cpu/cpu_features.hpp"
#include "infokv/infokv.h"
#include "util/error.hpp"

using namespace infokv;

TEST(Device, ReportIsConsistent) {
  DeviceReport r = device_report();
#ifdef INFOKV_WITH_CUDA
  EXPECT_TRUE(r.cuda_compiled);
#else
  EXPECT_FALSE(r.cuda_compiled);
#endif
  EXPECT_EQ(r.cuda_devices, static_cast<int32_t>(r.devices.size()));
  EXPECT_FALSE(r.reason.empty());
  const std::string j = device_report_json(r);
  EXPECT_NE(j.find("\"cuda_compiled\": "), std::string::npos);
  EXPECT_NE(j.find("\"cuda_devices\": " + std::to_string(r.cuda_devices)), std::string::npos);
  // the CPU side: the kernels this process runs, and the architecture it was compiled for
  EXPECT_EQ(r.cpu_kernels, cpu_kernels_name());
  EXPECT_NE(j.find("\"cpu_kernels\": \"" + r.cpu_kernels + "\""), std::string::npos);
#if defined(__aarch64__)
  EXPECT_EQ(r.cpu_arch, "aarch64");
  EXPECT_EQ(r.cpu_kernels, "portable");  // no NEON kernels yet (packaging/docs/arm64.md)
#elif defined(__x86_64__)
  EXPECT_EQ(r.cpu_arch, "x86-64");
  if (cpu_has_avx512_vnni()) {
    EXPECT_EQ(r.cpu_kernels, "avx512-vnni");
  }
#endif
  EXPECT_NE(j.find("\"cpu_arch\": \"" + r.cpu_arch + "\""), std::string::npos);
  std::printf("device report: %s\n", j.c_str());
}

TEST(Device, CpuIsAlwaysSelectable) {
  EXPECT_EQ(select_device("cpu").kind, DeviceKind::cpu);
  EXPECT_EQ(select_device("").kind, DeviceKind::cpu);
}

TEST(Device, AutoFallsBackToCpuWithoutACudaForwardPath) {
  DeviceChoice c = select_device("auto");
  if (!cuda_forward_available() || device_report().cuda_devices == 0) {
    EXPECT_EQ(c.kind, DeviceKind::cpu);
    EXPECT_NE(c.reason.find("auto"), std::string::npos);
  }
}

TEST(Device, CudaWithoutDeviceFailsWithNoDevice) {
  if (device_report().cuda_devices > 0) GTEST_SKIP() << "a CUDA device exists; this checks the no-GPU branch";
  for (const char *spec : {"cuda", "cuda:0", "cuda:3"}) {
    try {
      select_device(spec);
      ADD_FAILURE() << spec << " should fail";
    } catch (const Error &e) {
      EXPECT_EQ(e.status(), Status::no_device) << spec;
      EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
    }
  }
}

TEST(Device, BadSpecsAreInvalidArguments) {
  for (const char *spec : {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda0", "CPU"}) {
    try {
      select_device(spec);
      ADD_FAILURE() << spec << " should fail";
    } catch (const Error &e) {
      EXPECT_EQ(e.status(), Status::invalid_argument) << spec;
    }
  }
}

TEST(Device, CAbiCountAndName) {
  int32_t n = -1;
  ASSERT_EQ(ikv_device_count(&n), IKV_OK);
  EXPECT_EQ(n, device_report().cuda_devices);
  EXPECT_EQ(ikv_device_count(nullptr), IKV_ERR_INVALID_ARGUMENT);
  size_t len = 99;
  char buf[256];
  EXPECT_EQ(ikv_device_name(buf, sizeof buf, &len, n), IKV_ERR_NO_DEVICE);  // one past the last
  EXPECT_EQ(len, 0u);
  EXPECT_EQ(ikv_device_name(buf, sizeof buf, nullptr, 0), IKV_ERR_INVALID_ARGUMENT);
  if (n > 0) {
    ASSERT_EQ(ikv_device_name(nullptr, 0, &len, 0), IKV_ERR_BUFFER_TOO_SMALL);
    ASSERT_GT(len, 0u);
    ASSERT_EQ(ikv_device_name(buf, sizeof buf, &len, 0), IKV_OK);
    EXPECT_EQ(std::string(buf).size(), len);
  }
}

#include "model/model.hpp"
#include "session/session.hpp"
#include "support/paths.hpp"

TEST(Device, SessionDeviceOptionCpuAutoAndCudaWithoutGpu) {
  const std::string p = infokv_test::models_dir() + "/stories260K/stories260K.gguf";
  auto m = Model::load(p);
  SessionOptions cpu_o, auto_o, cuda_o, bad_o;
  auto_o.device = "auto";
  cuda_o.device = "cuda";
  bad_o.device = "tpu";
  Session a(m, cpu_o), b(m, auto_o);
  EXPECT_EQ(a.device_name(), "cpu");
  EXPECT_EQ(b.device_name(), "cpu");  // auto stays on the CPU until the CUDA path is verified on hardware
  const int32_t sa = a.add_sequence(), sb = b.add_sequence();
  a.decode({{sa, 1, false}, {sa, 403, false}});
  b.decode({{sb, 1, false}, {sb, 403, false}});
  EXPECT_EQ(a.logits(sa), b.logits(sb));
  try {
    Session bad(m, bad_o);
    ADD_FAILURE() << "device 'tpu' should be rejected";
  } catch (const Error &e) {
    EXPECT_EQ(e.status(), Status::invalid_argument);
  }
  if (device_report().cuda_devices == 0) {
    try {
      Session c(m, cuda_o);
      ADD_FAILURE() << "device 'cuda' without a GPU should fail";
    } catch (const Error &e) {
      EXPECT_EQ(e.status(), Status::no_device);
    }
  }
}
