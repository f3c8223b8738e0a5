// Handle objects behind the opaque C types, the live-handle registry and the error plumbing of the C shim.
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>

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

// Every live handle is registered with its kind, so that a freed or foreign pointer, or a live handle of another
// kind (a model passed as a session), is refused instead of dereferenced.
// This is the one piece of process-wide state: handles cross threads, so the registry must too.
enum class HandleKind { model, session, sampler, config };
template <typename H> struct HandleKindOf;
template <> struct HandleKindOf<ikv_model> { static constexpr HandleKind value = HandleKind::model; };
template <> struct HandleKindOf<ikv_session> { static constexpr HandleKind value = HandleKind::session; };
template <> struct HandleKindOf<ikv_sampler> { static constexpr HandleKind value = HandleKind::sampler; };
template <> struct HandleKindOf<ikv_config> { static constexpr HandleKind value = HandleKind::config; };
template <typename H> constexpr HandleKind kind_of() { return HandleKindOf<std::remove_const_t<H>>::value; }

void register_handle(const void *p, HandleKind kind);
void unregister_handle(const void *p);
bool is_live(const void *p, HandleKind kind);
template <typename H> void register_handle(const H *h) { register_handle(h, kind_of<H>()); }
template <typename H> bool is_live(const H *h) { return is_live(static_cast<const void *>(h), kind_of<H>()); }

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
  if (!is_live(h))
    fail(Status::bad_handle, std::string(what) + " handle is not live (freed, of another kind, or not made by infokv)");
  return h;
}

}  // namespace capi
}  // namespace infokv
