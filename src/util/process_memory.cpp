#include "util/process_memory.hpp"

#include <cstdio>
#include <cstring>

namespace infokv {

namespace {
// A "Name:   1234 kB" line of /proc/self/status, in bytes.
int64_t status_kb(const char *name) {
  std::FILE *f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  int64_t out = -1;
  const size_t n = std::strlen(name);
  while (std::fgets(line, sizeof line, f) != nullptr) {
    long long kb = 0;
    if (std::strncmp(line, name, n) == 0 && line[n] == ':' && std::sscanf(line + n + 1, "%lld", &kb) == 1) {
      out = static_cast<int64_t>(kb) * 1024;
      break;
    }
  }
  std::fclose(f);
  return out;
}
}  // namespace

int64_t peak_rss_bytes() { return status_kb("VmHWM"); }
int64_t current_rss_bytes() { return status_kb("VmRSS"); }

}  // namespace infokv
