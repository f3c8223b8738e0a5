// The C ABI's model calls (infokv/model.h): load failures return a status and no handle.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "infokv/infokv.h"
#include "support/capi.hpp"
#include "support/util.hpp"
#include "util/version.hpp"

using namespace infokv_capi_test;  // NOLINT: the shared C ABI test helpers

TEST(Capi, ModelLoadFailuresReturnStatusAndNoHandle) {
  ikv_model *mm = reinterpret_cast<ikv_model *>(0x8);
  EXPECT_EQ(ikv_model_load(&mm, "/nonexistent/model.gguf"), IKV_ERR_IO);
  EXPECT_EQ(mm, nullptr);
  infokv_test::TempFile junk(std::vector<uint8_t>(1000, 0x42));
  EXPECT_EQ(ikv_model_load(&mm, junk.path().c_str()), IKV_ERR_BAD_MODEL);
  EXPECT_EQ(mm, nullptr);
  EXPECT_NE(std::string(ikv_last_error_message()).find("magic"), std::string::npos);
  std::vector<uint8_t> v4 = infokv_test::GgufBuilder().set_version(4).build();
  infokv_test::TempFile f4(v4);
  EXPECT_EQ(ikv_model_load(&mm, f4.path().c_str()), IKV_ERR_UNSUPPORTED);
  EXPECT_EQ(mm, nullptr);
}

// ---- generation ----
