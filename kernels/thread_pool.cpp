#include "kernels/thread_pool.hpp"

#include <algorithm>
#include <chrono>
#include <sched.h>
#if defined(__x86_64__) || defined(__i386__)
#include "kernels/cpu/simd.hpp"
#define IKV_PAUSE() _mm_pause()
#else
#define IKV_PAUSE() std::this_thread::yield()
#endif

namespace infokv {

namespace {
// Workers spin this long for the next job before sleeping: a decode step issues a few dozen short loops, and waking
// a sleeping thread costs about as much as one of them.
constexpr auto kSpin = std::chrono::microseconds(200);
}  // namespace

int default_thread_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  unsigned hc = std::thread::hardware_concurrency();
  return hc > 0 ? static_cast<int>(hc) : 1;
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  cv_start_.notify_all();
  for (auto &t : workers_) t.join();
}

void ThreadPool::run_chunks() {
  const int chunks = job_chunks_;
  const int64_t n = job_n_;
  for (int c; (c = next_chunk_.fetch_add(1)) < chunks;) {
    try {
      (*job_)(n * c / chunks, n * (c + 1) / chunks);
    } catch (...) {  // kept for parallel_for to rethrow (an exception leaving a worker would end the process)
      std::lock_guard<std::mutex> lock(error_mu_);
      if (!error_) error_ = std::current_exception();
      next_chunk_.store(chunks);  // hand out no more chunks
    }
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)> &fn, int per_thread) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  // Up to per_thread chunks per thread, taken dynamically: work whose cost varies along the range (causal attention)
  // still balances.
  const int chunks = static_cast<int>(
      std::min<int64_t>(int64_t{std::max(1, per_thread)} * n_threads_, (n + grain - 1) / grain));
  if (chunks <= 1 || n_threads_ == 1) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_n_ = n;
    job_chunks_ = chunks;
    next_chunk_.store(0);
    // every worker checks in once per job, so no worker can still hold this job when the next one starts
    pending_.store(static_cast<int>(workers_.size()));
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_start_.notify_all();
  run_chunks();
  while (pending_.load(std::memory_order_acquire) != 0) IKV_PAUSE();
  job_ = nullptr;
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(error_mu_);
    std::swap(error, error_);
  }
  if (error) std::rethrow_exception(error);
}

void ThreadPool::worker(int) {
  uint64_t seen = 0;
  for (;;) {
    // Spin briefly for the next job, then sleep until one is published.
    const auto until = std::chrono::steady_clock::now() + kSpin;
    int spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen && !stop_.load()) {
      IKV_PAUSE();
      if (++spins % 256 == 0 && std::chrono::steady_clock::now() > until) {
        std::unique_lock<std::mutex> lock(mu_);
        cv_start_.wait(lock, [&] { return stop_.load() || generation_.load() != seen; });
      }
    }
    if (stop_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    run_chunks();
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace infokv
