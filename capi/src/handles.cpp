#include "handles.hpp"

namespace infokv {
namespace capi {

namespace {
std::mutex &registry_mutex() {
  static std::mutex m;
  return m;
}
std::unordered_map<const void *, HandleKind> &registry() {
  static std::unordered_map<const void *, HandleKind> r;
  return r;
}
thread_local std::string t_last_error;
}  // namespace

void register_handle(const void *p, HandleKind kind) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry()[p] = kind;
}

void unregister_handle(const void *p) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry().erase(p);
}

bool is_live(const void *p, HandleKind kind) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto it = registry().find(p);
  return it != registry().end() && it->second == kind;
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
