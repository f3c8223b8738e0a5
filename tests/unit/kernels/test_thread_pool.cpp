// kernels/thread_pool.hpp: every item of a loop runs once on some thread; an exception thrown on a worker (a
// kernel's scratch allocation failing, say) comes back to the caller instead of ending the process, and the pool
// runs the next loop as before.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <new>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kernels/thread_pool.hpp"

namespace {

TEST(ThreadPool, EveryItemRunsOnce) {
  infokv::ThreadPool pool(3);
  std::vector<std::atomic<int>> seen(1000);
  pool.parallel_for(1000, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)].fetch_add(1);
  });
  for (auto &s : seen) EXPECT_EQ(s.load(), 1);
}

TEST(ThreadPool, AnExceptionOnAWorkerComesBackToTheCallerAndThePoolGoesOn) {
  infokv::ThreadPool pool(2);
  const std::thread::id caller = std::this_thread::get_id();
  for (int round = 0; round < 20; ++round) {
    std::atomic<bool> thrown{false};
    // a worker's item throws; the caller's items wait (up to 10 s) until it has, so the exception has to cross
    EXPECT_THROW(pool.parallel_for(64, 1, [&](int64_t, int64_t) {
                   if (std::this_thread::get_id() != caller) {
                     if (!thrown.exchange(true)) throw std::bad_alloc();
                     return;
                   }
                   const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
                   while (!thrown.load() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
                 }),
                 std::bad_alloc)
        << "round " << round;
    std::atomic<int64_t> sum{0};
    pool.parallel_for(100, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sum.fetch_add(i);
    });
    EXPECT_EQ(sum.load(), 4950);
  }
  // one from the caller's own chunks too
  EXPECT_THROW(pool.parallel_for(8, 1, [&](int64_t b, int64_t) {
                 if (b == 0) throw std::runtime_error("first chunk");
               }),
               std::runtime_error);
}

}  // namespace
