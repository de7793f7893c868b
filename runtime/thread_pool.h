// A fixed pool of worker threads, optionally pinned to cores, with one blocking parallel_for.
// The calling thread takes part in the work, so a pool of size 1 runs everything inline.
// A training step launches dozens of small kernels back to back, so handing out work must cost
// well under a microsecond: idle workers spin (then yield, then sleep) on one atomic word that
// holds the job's generation, its chunk count and the next unclaimed chunk; a chunk is claimed
// with one compare-and-swap, and the caller waits for claimed chunks only, never for a worker
// that has not started (on a busy machine that one may not run for milliseconds).
#pragma once

#include <atomic>
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

  // The cores this process may run on (its affinity mask at start: taskset, cgroups, or an MPI
  // launcher's binding), in order; hardware_threads() is their number.
  static const std::vector<int>& allowed_cores();
  static int hardware_threads();

 private:
  void worker(int index);
  // Claims and runs chunks of the job published as `job` (see job_) until none is left.
  void run_chunks(uint64_t job);

  std::vector<std::thread> workers_;
  // The job's parameters: written by the caller before it publishes job_, read by a thread only
  // after it claimed a chunk of that job (the job cannot end, nor these change, before the
  // claimed chunk is done).
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, chunk_ = 0;
  // generation (bits 40..63) | chunks in the job (20..39) | next chunk to claim (0..19).
  alignas(64) std::atomic<uint64_t> job_{0};
  alignas(64) std::atomic<int64_t> done_{0};  // chunks of the current job finished
  alignas(64) std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;  // only for sleeping and waking
  std::condition_variable wake_;
};

}  // namespace cb
