#include "util/sys_memory.hpp"

#include <unistd.h>

namespace infokv {

int64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : -1;
}

}  // namespace infokv
