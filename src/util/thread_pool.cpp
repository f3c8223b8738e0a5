#include "util/thread_pool.hpp"

#include <algorithm>
#include <sched.h>

namespace infokv {

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
    stop_ = true;
  }
  cv_start_.notify_all();
  for (auto &t : workers_) t.join();
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)> &fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  int chunks = static_cast<int>(std::min<int64_t>(n_threads_, (n + grain - 1) / grain));
  if (chunks <= 1) {
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
    pending_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  cv_start_.notify_all();
  // The caller works too: take chunks until none are left.
  for (int c; (c = next_chunk_.fetch_add(1)) < chunks;) fn(n * c / chunks, n * (c + 1) / chunks);
  std::unique_lock<std::mutex> lock(mu_);
  cv_done_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
}

void ThreadPool::worker(int) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t, int64_t)> *job;
    int64_t n;
    int chunks;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = job_n_;
      chunks = job_chunks_;
    }
    for (int c; (c = next_chunk_.fetch_add(1)) < chunks;) (*job)(n * c / chunks, n * (c + 1) / chunks);
    std::lock_guard<std::mutex> lock(mu_);
    if (--pending_ == 0) cv_done_.notify_all();
  }
}

}  // namespace infokv
