// Test-only I/O fault injection (libgit2/SQLite style: fail the Nth call for every N over a scenario). Compiled
// into the core but not part of the C ABI (libinfokv.so exports only ikv_*): the unit tests, which link the
// static core, arm it. Disarmed, each hook is one relaxed atomic load.
//
// The state is process-wide on purpose (the calls it fails sit deep in file I/O with no context to carry it): arm
// it only from a test that does no file I/O on other threads meanwhile.
#pragma once
#include <cstdint>

namespace infokv {
namespace fault {

enum class Op : int { write = 0, fsync = 1, rename = 2, read = 3, count = 4 };

// Makes the nth call (1-based) of `op` from now fail as with EIO; n <= 0 disarms that op. Resets its counter.
void arm(Op op, int64_t nth);
// Disarms every op and resets the counters.
void disarm_all();
// Calls of `op` seen since it was last armed or reset (counted only while some op is armed).
int64_t calls(Op op);
// At each injection site: true (and errno = EIO) when this call is the one to fail.
bool hit(Op op);

}  // namespace fault
}  // namespace infokv
