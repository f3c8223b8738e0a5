#include "util/fault_injection.hpp"

#include <atomic>
#include <cerrno>

namespace infokv {
namespace fault {

namespace {

constexpr int kOps = static_cast<int>(Op::count);
std::atomic<bool> g_armed{false};
std::atomic<int64_t> g_nth[kOps];
std::atomic<int64_t> g_calls[kOps];

}  // namespace

void arm(Op op, int64_t nth) {
  const int i = static_cast<int>(op);
  g_calls[i].store(0);
  g_nth[i].store(nth > 0 ? nth : 0);
  bool any = false;
  for (int k = 0; k < kOps; ++k) any = any || g_nth[k].load() > 0;
  g_armed.store(any);
}

void disarm_all() {
  g_armed.store(false);
  for (int k = 0; k < kOps; ++k) {
    g_nth[k].store(0);
    g_calls[k].store(0);
  }
}

int64_t calls(Op op) { return g_calls[static_cast<int>(op)].load(); }

bool hit(Op op) {
  if (!g_armed.load(std::memory_order_relaxed)) return false;
  const int i = static_cast<int>(op);
  const int64_t n = g_calls[i].fetch_add(1) + 1;
  if (n != g_nth[i].load()) return false;
  errno = EIO;
  return true;
}

}  // namespace fault
}  // namespace infokv
