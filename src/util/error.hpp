// Error type of the C++ core. The core throws infokv::Error; the C shim maps it to a status.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

namespace infokv {

// Keep in sync with the IKV_* status values of capi/include/infokv/infokv.h (checked by a static_assert there).
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
