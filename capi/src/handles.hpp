// Handle objects behind the opaque C types, the handle registry and the error plumbing of the C shim.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "infokv/infokv.h"
#include "config/config.hpp"
#include "engine/engine.hpp"
#include "model/model.hpp"
#include "sampling/sampler.hpp"
#include "session/generate.hpp"
#include "session/session.hpp"
#include "util/error.hpp"

namespace infokv {
namespace capi {

// Marks an object as being used by one thread. A session or sampler may be used by one thread at a time; a second
// thread that enters while the first is inside gets Status::busy instead of racing it. The owning thread may
// re-enter (ikv_generate's callback may read the session it streams from), counted by depth_.
class InUse {
 public:
  bool try_enter() {
    const std::thread::id me = std::this_thread::get_id();
    std::thread::id expected{};
    if (owner_.compare_exchange_strong(expected, me, std::memory_order_acquire)) {
      depth_ = 1;
      return true;
    }
    if (expected != me) return false;
    ++depth_;  // only the owner gets here
    return true;
  }
  void leave() {
    if (--depth_ == 0) owner_.store(std::thread::id{}, std::memory_order_release);
  }

 private:
  std::atomic<std::thread::id> owner_{};
  int depth_ = 0;  // touched only by the owner
};

}  // namespace capi
}  // namespace infokv

// The objects. A C handle is NOT a pointer to one of these: it is a registry key (see below) that maps to one.
struct ikv_model {
  std::shared_ptr<const infokv::Model> model;
};
struct ikv_session {
  std::unique_ptr<infokv::Session> session;
  infokv::capi::InUse in_use;
};
struct ikv_config {
  infokv::Config config;
};
struct ikv_sampler {
  std::unique_ptr<infokv::Sampler> sampler;
  infokv::capi::InUse in_use;
};
struct ikv_engine {
  std::unique_ptr<infokv::Engine> engine;
  infokv::capi::InUse in_use;
};

namespace infokv {
namespace capi {

// The registry maps handle values to live objects with their kind. Handle values come from a 64-bit counter and
// are never reused, so a freed handle stays refused for good, even when a new object lands at the freed object's
// address (a registry of addresses let such a stale handle pass, and a double free then freed the new object).
// A foreign pointer or a live handle of another kind (a model passed as a session) is refused as well.
// Objects are held by shared_ptr: a free that races a call on another thread (a caller bug) only unregisters the
// handle; the object goes when that call returns, never under it.
// This is the one piece of process-wide state: handles cross threads, so the registry must too.
enum class HandleKind { model, session, sampler, config, engine };
template <typename H> struct HandleKindOf;
template <> struct HandleKindOf<ikv_model> { static constexpr HandleKind value = HandleKind::model; };
template <> struct HandleKindOf<ikv_session> { static constexpr HandleKind value = HandleKind::session; };
template <> struct HandleKindOf<ikv_sampler> { static constexpr HandleKind value = HandleKind::sampler; };
template <> struct HandleKindOf<ikv_config> { static constexpr HandleKind value = HandleKind::config; };
template <> struct HandleKindOf<ikv_engine> { static constexpr HandleKind value = HandleKind::engine; };
template <typename H> constexpr HandleKind kind_of() { return HandleKindOf<std::remove_const_t<H>>::value; }

uintptr_t register_object(std::shared_ptr<void> obj, HandleKind kind);
std::shared_ptr<void> find_object(uintptr_t handle, HandleKind kind);  // nullptr when not live or of another kind
std::shared_ptr<void> unregister_object(uintptr_t handle, HandleKind kind);  // the object, or nullptr

// Registers a new object and returns its handle value.
template <typename H>
H *register_handle(std::unique_ptr<H> obj) {
  return reinterpret_cast<H *>(register_object(std::shared_ptr<H>(std::move(obj)), kind_of<H>()));
}

// Unregisters a handle (free functions). Stale, foreign and NULL handles are ignored. The object is destroyed
// here, or when a call still using it on another thread returns.
template <typename H>
void free_handle(H *h) {
  if (h == nullptr) return;
  std::shared_ptr<void> obj = unregister_object(reinterpret_cast<uintptr_t>(h), kind_of<H>());
  obj.reset();
}

// The object behind a handle for the length of one C call. Sessions and samplers are marked in use meanwhile.
template <typename H>
class Ref {
 public:
  Ref() = default;
  Ref(std::shared_ptr<H> obj, InUse *in_use) : obj_(std::move(obj)), in_use_(in_use) {}
  Ref(Ref &&o) noexcept : obj_(std::move(o.obj_)), in_use_(o.in_use_) { o.in_use_ = nullptr; }
  Ref(const Ref &) = delete;
  Ref &operator=(const Ref &) = delete;
  Ref &operator=(Ref &&) = delete;
  ~Ref() {
    if (in_use_ != nullptr) in_use_->leave();
  }
  H *operator->() const { return obj_.get(); }
  H &operator*() const { return *obj_; }
  H *get() const { return obj_.get(); }
  explicit operator bool() const { return obj_ != nullptr; }

 private:
  std::shared_ptr<H> obj_;
  InUse *in_use_ = nullptr;
};

template <typename H> InUse *in_use_of(H &) { return nullptr; }
inline InUse *in_use_of(ikv_session &s) { return &s.in_use; }
inline InUse *in_use_of(ikv_sampler &s) { return &s.in_use; }
inline InUse *in_use_of(ikv_engine &e) { return &e.in_use; }

// Resolves a handle: Status::bad_handle when it is NULL, freed, foreign or of another kind; Status::busy when
// another thread is inside a call on the same session or sampler.
template <typename H>
Ref<std::remove_const_t<H>> use(H *h, const char *what) {
  using T = std::remove_const_t<H>;
  if (h == nullptr) fail(Status::bad_handle, std::string(what) + " handle is NULL");
  auto obj = std::static_pointer_cast<T>(find_object(reinterpret_cast<uintptr_t>(h), kind_of<T>()));
  if (obj == nullptr)
    fail(Status::bad_handle, std::string(what) + " handle is not live (freed, of another kind, or not made by infokv)");
  InUse *u = in_use_of(*obj);
  if (u != nullptr && !u->try_enter())
    fail(Status::busy, std::string(what) +
                           " is in use by another thread (a session or sampler must be used by one thread at a time)");
  return Ref<T>(std::move(obj), u);
}

// As use(), but NULL gives an empty Ref (for optional handles).
template <typename H>
Ref<std::remove_const_t<H>> use_optional(H *h, const char *what) {
  if (h == nullptr) return Ref<std::remove_const_t<H>>();
  return use(h, what);
}

int32_t fail_status(int32_t status, const std::string &msg);

// The C option structs read into their C++ forms (capi/src/infokv_capi.cpp); NULL gives the defaults. Throw
// Error(invalid_argument) / Error(version) as the functions taking them document.
SessionOptions session_options_from_c(const ikv_session_options *o);
SamplerParams sampler_params_from_c(const ikv_sampler_options *o);

// An argument check of a C function: Error(invalid_argument) with `msg` unless `cond`.
inline void require(bool cond, const char *msg) {
  if (!cond) fail(Status::invalid_argument, msg);
}

// The size-query convention of the C API (see infokv.h): *out_len = n, the size of `data` (text: without the NUL);
// a capacity under n (text: n + 1) returns IKV_ERR_BUFFER_TOO_SMALL naming both sizes and copies nothing (text: out
// gets an empty string when capacity > 0); otherwise the bytes are copied (text: and a NUL). out_len must not be
// NULL; out may be NULL only with capacity 0 (both throw invalid_argument).
int32_t copy_out(void *out, size_t capacity, size_t *out_len, const void *data, size_t n);
int32_t copy_out_text(char *out, size_t capacity, size_t *out_len, const std::string &text);
// The same for token ids: capacity and *out_count count ids.
int32_t copy_out_ids(int32_t *out_tokens, size_t capacity, size_t *out_count, const std::vector<int32_t> &ids);

// The half that ikv_generate and ikv_chat_reply share: checks max_tokens and the id buffer (too small: nothing is
// generated, *out_count = max_tokens), runs `generate` with the C callback behind a TokenCallback, stores the ids and
// maps how it ended (a failed decode, a callback that stopped it) to a status. Call inside guard().
int32_t run_generation(int32_t *out_tokens, size_t capacity, size_t *out_count, int32_t max_tokens,
                       ikv_token_callback callback, void *user_data,
                       const std::function<GenerateResult(const TokenCallback &)> &generate);

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

}  // namespace capi
}  // namespace infokv
