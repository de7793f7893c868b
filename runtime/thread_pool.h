// A fixed pool of worker threads, optionally pinned to cores, with one blocking parallel_for.
// The calling thread takes part in the work, so a pool of size 1 runs everything inline.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace cb {

class ThreadPool {
 public:
  // `threads` counts the caller; `cores` (optional) pins thread i to cores[i % cores.size()].
  explicit ThreadPool(int threads, std::vector<int> cores = {});
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // Runs fn(begin, end) over [0, n) in contiguous chunks of at least `grain`; returns when done.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);

  static int hardware_threads();

 private:
  void worker(int index);
  void run_chunks();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, chunk_ = 0;
  int64_t next_ = 0;
  int pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace cb
