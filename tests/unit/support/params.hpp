// gtest parameters shared by tests that run once per device or dtype (TEST_P over these, each run named by its value).
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "kernels/paged_kv.hpp"

namespace infokv_test {

inline auto float_kv_dtypes() { return ::testing::Values(infokv::KvDtype::f32, infokv::KvDtype::f16, infokv::KvDtype::bf16); }
inline auto all_kv_dtypes() {
  return ::testing::Values(infokv::KvDtype::f32, infokv::KvDtype::f16, infokv::KvDtype::bf16, infokv::KvDtype::q8_0,
                           infokv::KvDtype::q4_0);
}

inline std::string kv_dtype_param_name(const ::testing::TestParamInfo<infokv::KvDtype> &info) {
  return infokv::kv_dtype_name(info.param);
}

}  // namespace infokv_test
