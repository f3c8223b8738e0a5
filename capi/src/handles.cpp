#include "handles.hpp"

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

void set_error(const std::string &msg) { t_last_error = msg; }
void clear_error() { t_last_error.clear(); }
int32_t fail_status(int32_t status, const std::string &msg) {
  t_last_error = msg;
  return status;
}

}  // namespace capi
}  // namespace infokv

extern "C" const char *ikv_last_error_message(void) { return infokv::capi::t_last_error.c_str(); }
