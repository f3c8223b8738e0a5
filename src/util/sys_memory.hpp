// The machine's memory as the OS reports it.
#pragma once
#include <cstdint>

namespace infokv {

// Physical memory of the machine in bytes (sysconf _SC_PHYS_PAGES x page size); -1 when the OS does not say.
int64_t physical_memory_bytes();

}  // namespace infokv
