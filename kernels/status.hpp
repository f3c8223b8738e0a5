// Status codes and the error type shared by every layer, from the kernels up. Kernel launchers return a Status;
// code above them throws infokv::Error, which the C shim maps back to a status.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

namespace infokv {

// The values are the IKV_* statuses of capi/include/infokv/infokv.h; capi/src/infokv_capi.cpp checks every one of
// them with a static_assert, so a change on either side fails to compile.
enum class Status : int32_t {
  ok = 0,
  invalid_argument = -1,
  io = -2,
  bad_model = -3,
  unsupported = -4,
  out_of_memory = -5,
  kv_full = -6,
  out_of_range = -7,
  cancelled = -8,
  bad_snapshot = -9,
  wrong_model = -10,
  version = -11,
  bad_config = -12,
  no_device = -13,
  buffer_too_small = -14,
  not_found = -15,
  bad_state = -16,
  bad_handle = -17,
  busy = -18,
  internal = -100,
};

class Error : public std::runtime_error {
 public:
  Error(Status status, const std::string &message) : std::runtime_error(message), status_(status) {}
  Status status() const noexcept { return status_; }

 private:
  Status status_;
};

[[noreturn]] inline void fail(Status status, const std::string &message) { throw Error(status, message); }

}  // namespace infokv
