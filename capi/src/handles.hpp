// Handle objects behind the opaque C types, the live-handle registry and the error plumbing of the C shim.
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>

#include "infokv/infokv.h"
#include "config/config.hpp"
#include "model/model.hpp"
#include "sampling/sampler.hpp"
#include "session/session.hpp"
#include "util/error.hpp"

struct ikv_model {
  std::shared_ptr<const infokv::Model> model;
};
struct ikv_session {
  std::unique_ptr<infokv::Session> session;
  int64_t protect_prefix = 0;  // from a config: applied to every new sequence
};
struct ikv_config {
  infokv::Config config;
};
struct ikv_sampler {
  std::unique_ptr<infokv::Sampler> sampler;
};

namespace infokv {
namespace capi {

// Every live handle is registered, so that a freed or foreign pointer is refused instead of dereferenced.
// This is the one piece of process-wide state: handles cross threads, so the registry must too.
void register_handle(const void *p);
void unregister_handle(const void *p);
bool is_live(const void *p);

void set_error(const std::string &msg);
void clear_error();
int32_t fail_status(int32_t status, const std::string &msg);

// Runs body(), turning every exception into a status and message.
template <typename F>
int32_t guard(F &&body) noexcept {
  try {
    return body();
  } catch (const Error &e) {
    return fail_status(static_cast<int32_t>(e.status()), e.what());
  } catch (const std::bad_alloc &) {
    return fail_status(IKV_ERR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception &e) {
    return fail_status(IKV_ERR_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return fail_status(IKV_ERR_INTERNAL, "internal error: unknown exception");
  }
}

template <typename H>
H *check_handle(H *h, const char *what) {
  if (h == nullptr) fail(Status::bad_handle, std::string(what) + " handle is NULL");
  if (!is_live(h)) fail(Status::bad_handle, std::string(what) + " handle is not live (freed, or not made by infokv)");
  return h;
}

}  // namespace capi
}  // namespace infokv
