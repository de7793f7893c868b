#include "runtime/thread_pool.h"

#include <system_error>

#include "runtime/error.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>

namespace cb {

namespace {
void pin_to(int core) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);  // best effort
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// An idle worker spins this long (the gap between two kernels of a step is far shorter), then
// keeps checking but yields its core to other threads, and sleeps after kYieldUntil.
constexpr auto kSpinUntil = std::chrono::microseconds(20);
constexpr auto kYieldUntil = std::chrono::microseconds(300);

// The job word: generation | chunks | next chunk.
constexpr int kIndexBits = 20;
constexpr uint64_t kIndexMask = (uint64_t{1} << kIndexBits) - 1;
inline uint64_t generation_of(uint64_t w) { return w >> (2 * kIndexBits); }
inline uint64_t chunks_of(uint64_t w) { return (w >> kIndexBits) & kIndexMask; }
}  // namespace

const std::vector<int>& ThreadPool::allowed_cores() {
  static const std::vector<int> cores = [] {
    std::vector<int> c;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0)
      for (int i = 0; i < CPU_SETSIZE; ++i)
        if (CPU_ISSET(i, &set)) c.push_back(i);
    if (c.empty())
      for (unsigned i = 0; i < std::max(1u, std::thread::hardware_concurrency()); ++i)
        c.push_back(static_cast<int>(i));
    return c;
  }();
  return cores;
}

int ThreadPool::hardware_threads() { return static_cast<int>(allowed_cores().size()); }

ThreadPool::ThreadPool(int threads, std::vector<int> cores) {
  threads = std::max(1, threads);
  if (!cores.empty()) pin_to(cores[0]);
  for (int i = 1; i < threads; ++i) {
    try {
      workers_.emplace_back([this, i, cores] {
        if (!cores.empty()) pin_to(cores[static_cast<size_t>(i) % cores.size()]);
        worker(i);
      });
    } catch (const std::system_error& e) {
      // The system refused a thread (a pids limit, no memory for its stack): stop and join the
      // ones started, then say so (a destroyed joinable thread would terminate the process).
      {
        std::lock_guard<std::mutex> l(mu_);
        stop_ = true;
      }
      wake_.notify_all();
      for (auto& t : workers_) t.join();
      fail("cannot start worker thread {} of {}: {}; use fewer threads (--threads)", i + 1, threads,
           e.what());
    }
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks(uint64_t job) {
  const uint64_t gen = generation_of(job);
  uint64_t w = job_.load(std::memory_order_acquire);
  for (;;) {
    if (generation_of(w) != gen || (w & kIndexMask) >= chunks_of(w)) return;
    if (!job_.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel, std::memory_order_acquire))
      continue;  // w now holds the current word
    const int64_t b = static_cast<int64_t>(w & kIndexMask) * chunk_;
    (*fn_)(b, std::min(n_, b + chunk_));
    done_.fetch_add(1, std::memory_order_release);
    w = job_.load(std::memory_order_acquire);
  }
}

void ThreadPool::worker(int) {
  uint64_t seen = 0;  // the last generation this worker took part in
  for (;;) {
    uint64_t w = job_.load(std::memory_order_acquire);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 1; generation_of(w) == seen; ++i) {
      if (stop_.load(std::memory_order_relaxed)) return;
      if ((i & 63) != 0) {
        cpu_relax();
      } else {
        const auto idle = std::chrono::steady_clock::now() - t0;
        if (idle >= kYieldUntil) {
          std::unique_lock<std::mutex> l(mu_);
          sleepers_.fetch_add(1);  // seq_cst: pairs with parallel_for's publish, then load
          wake_.wait(l, [&] { return stop_.load() || generation_of(job_.load()) != seen; });
          sleepers_.fetch_sub(1);
        } else if (idle >= kSpinUntil) {
          std::this_thread::yield();
        }
      }
      w = job_.load(std::memory_order_acquire);
    }
    seen = generation_of(w);
    run_chunks(w);
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                              int64_t grain) {
  if (n <= 0) return;
  int64_t parts = std::min<int64_t>(size(), (n + grain - 1) / std::max<int64_t>(1, grain));
  if (parts <= 1 || workers_.empty()) {
    fn(0, n);
    return;
  }
  fn_ = &fn;
  n_ = n;
  chunk_ = (n + parts - 1) / parts;
  const int64_t chunks = (n + chunk_ - 1) / chunk_;
  done_.store(0, std::memory_order_relaxed);
  const uint64_t gen = (generation_of(job_.load(std::memory_order_relaxed)) + 1) & 0xffffff;
  const uint64_t job = gen << (2 * kIndexBits) | static_cast<uint64_t>(chunks) << kIndexBits;
  job_.store(job);  // seq_cst: publishes the job; then the sleepers_ check below
  if (sleepers_.load() > 0) {
    { std::lock_guard<std::mutex> l(mu_); }  // a worker between its check and its wait
    wake_.notify_all();
  }
  // Chunks claimed by workers must finish before fn_ (on the caller's stack) goes away.
  auto wait_for = [&](int64_t finished) {
    for (int i = 1; done_.load(std::memory_order_acquire) < finished; ++i) {
      cpu_relax();
      if (i >= 2048) std::this_thread::yield();  // a preempted worker: let it run
    }
  };
  try {
    run_chunks(job);
  } catch (...) {
    // fn threw on this thread: claim what is left, wait for the workers' chunks, rethrow.
    uint64_t w = job_.load(std::memory_order_acquire);
    while (!job_.compare_exchange_weak(w, (w & ~kIndexMask) | static_cast<uint64_t>(chunks))) {
    }
    wait_for(static_cast<int64_t>(w & kIndexMask) - 1);  // all claimed but the one that threw
    fn_ = nullptr;
    throw;
  }
  wait_for(chunks);
  fn_ = nullptr;
}

}  // namespace cb
