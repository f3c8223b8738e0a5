// A fixed pool of worker threads for data-parallel loops. The calling thread takes part in every loop,
// so a pool of n threads starts n - 1 workers.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace infokv {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;

  int size() const { return n_threads_; }
  // Calls fn(begin, end) over [0, n) split into contiguous chunks of at least `grain` items (up to per_thread per
  // thread, handed out dynamically). Runs inline when the work is too small to share. Not reentrant. An exception
  // thrown by fn (std::bad_alloc from a kernel's scratch, say) stops the handing out of chunks and is rethrown here
  // once every thread has left the loop (the first, if several threw); the pool stays usable. More chunks
  // balance work whose items are few or uneven (a prefill's causal attention, 18 row groups on 2 threads) but cost a
  // hand-off each, which decode-sized products cannot afford.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)> &fn, int per_thread = 4);

 private:
  void worker(int index);
  void run_chunks();
  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_start_;
  // The current job; written before generation_ is published (release) and read after it is seen (acquire).
  const std::function<void(int64_t, int64_t)> *job_ = nullptr;
  int64_t job_n_ = 0;
  int job_chunks_ = 0;
  std::atomic<int> next_chunk_{0};
  std::atomic<int> pending_{0};  // workers that have not finished the current job
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  std::mutex error_mu_;
  std::exception_ptr error_;  // the current job's first exception
};

int default_thread_count();

}  // namespace infokv
