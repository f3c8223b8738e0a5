#include "handles.hpp"

#include <algorithm>
#include <cstring>
#include <string>

namespace infokv {
namespace capi {

namespace {
struct Entry {
  HandleKind kind;
  std::shared_ptr<void> obj;
};
struct Registry {
  std::mutex mutex;
  std::unordered_map<uintptr_t, Entry> live;
  // Handle values are next << 4: never 0, never reused, and aligned like a pointer (some tools look). 2^60 handles
  // before a 64-bit value would wrap; on 32-bit targets 2^28, which is the one case where a value can recur.
  uint64_t next = 1;
};
Registry &registry() {
  static Registry r;
  return r;
}
thread_local std::string t_last_error;
}  // namespace

uintptr_t register_object(std::shared_ptr<void> obj, HandleKind kind) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto handle = static_cast<uintptr_t>(r.next++ << 4);
  r.live.emplace(handle, Entry{kind, std::move(obj)});
  return handle;
}

std::shared_ptr<void> find_object(uintptr_t handle, HandleKind kind) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.live.find(handle);
  if (it == r.live.end() || it->second.kind != kind) return nullptr;
  return it->second.obj;
}

std::shared_ptr<void> unregister_object(uintptr_t handle, HandleKind kind) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.live.find(handle);
  if (it == r.live.end() || it->second.kind != kind) return nullptr;
  std::shared_ptr<void> obj = std::move(it->second.obj);
  r.live.erase(it);
  return obj;  // destroyed by the caller, outside the lock (a session's destructor may take a while)
}

int32_t fail_status(int32_t status, const std::string &msg) {
  t_last_error = msg;
  return status;
}

namespace {

void check_out_buffer(const void *out, size_t capacity, const size_t *out_len) {
  if (out_len == nullptr) fail(Status::invalid_argument, "out_len must not be NULL");
  if (out == nullptr && capacity != 0) fail(Status::invalid_argument, "out is NULL but capacity is not 0");
}

int32_t too_small(size_t capacity, size_t needed) {
  return fail_status(IKV_ERR_BUFFER_TOO_SMALL, "buffer of " + std::to_string(capacity) + " bytes is too small; " +
                                                   std::to_string(needed) + " needed");
}

}  // namespace

int32_t copy_out(void *out, size_t capacity, size_t *out_len, const void *data, size_t n) {
  check_out_buffer(out, capacity, out_len);
  *out_len = n;
  if (capacity < n) return too_small(capacity, n);
  if (n > 0) std::memcpy(out, data, n);
  return IKV_OK;
}

int32_t copy_out_ids(int32_t *out_tokens, size_t capacity, size_t *out_count, const std::vector<int32_t> &ids) {
  if (out_count == nullptr) fail(Status::invalid_argument, "out_count must not be NULL");
  if (out_tokens == nullptr && capacity != 0) fail(Status::invalid_argument, "out_tokens is NULL but capacity is not 0");
  *out_count = ids.size();
  if (capacity < ids.size())
    return fail_status(IKV_ERR_BUFFER_TOO_SMALL, "token buffer holds " + std::to_string(capacity) + ", " +
                                                     std::to_string(ids.size()) + " needed");
  std::copy(ids.begin(), ids.end(), out_tokens);
  return IKV_OK;
}

int32_t run_generation(int32_t *out_tokens, size_t capacity, size_t *out_count, int32_t max_tokens,
                       ikv_token_callback callback, void *user_data,
                       const std::function<GenerateResult(const TokenCallback &)> &generate) {
  require(out_tokens != nullptr || capacity == 0, "out_tokens is NULL but capacity is not 0");
  require(max_tokens >= 0, "max_tokens must be >= 0");
  if (out_tokens != nullptr && capacity < static_cast<size_t>(max_tokens)) {
    if (out_count != nullptr) *out_count = static_cast<size_t>(max_tokens);
    return fail_status(IKV_ERR_BUFFER_TOO_SMALL, "out_tokens holds " + std::to_string(capacity) + " ids but max_tokens is " +
                                                     std::to_string(max_tokens) + " (nothing was generated)");
  }
  TokenCallback cb;
  if (callback != nullptr)
    cb = [&](int32_t token, const std::string &text) { return callback(user_data, token, text.data(), text.size()) == 0; };
  const GenerateResult r = generate(cb);
  if (out_count != nullptr) *out_count = r.tokens.size();
  for (size_t i = 0; i < r.tokens.size() && i < capacity; ++i) out_tokens[i] = r.tokens[i];
  if (r.error != Status::ok)
    return fail_status(static_cast<int32_t>(r.error),
                       "after " + std::to_string(r.tokens.size()) + " generated tokens: " + r.error_message);
  if (r.cancelled) return fail_status(IKV_ERR_CANCELLED, "generation stopped by the callback");
  return IKV_OK;
}

int32_t copy_out_text(char *out, size_t capacity, size_t *out_len, const std::string &text) {
  check_out_buffer(out, capacity, out_len);
  *out_len = text.size();
  if (capacity < text.size() + 1) {
    if (out != nullptr && capacity > 0) out[0] = '\0';
    return too_small(capacity, text.size() + 1);
  }
  std::memcpy(out, text.data(), text.size() + 1);
  return IKV_OK;
}

}  // namespace capi
}  // namespace infokv

extern "C" const char *ikv_last_error_message(void) { return infokv::capi::t_last_error.c_str(); }
