#include "runtime/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>

namespace cb {

namespace {
void pin_to(int core) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);  // best effort
}
}  // namespace

int ThreadPool::hardware_threads() {
  return std::max(1u, std::thread::hardware_concurrency());
}

ThreadPool::ThreadPool(int threads, std::vector<int> cores) {
  threads = std::max(1, threads);
  if (!cores.empty()) pin_to(cores[0]);
  for (int i = 1; i < threads; ++i)
    workers_.emplace_back([this, i, cores] {
      if (!cores.empty()) pin_to(cores[static_cast<size_t>(i) % cores.size()]);
      worker(i);
    });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks() {
  for (;;) {
    int64_t b;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (next_ >= n_) return;
      b = next_;
      next_ += chunk_;
    }
    (*fn_)(b, std::min(n_, b + chunk_));
  }
}

void ThreadPool::worker(int) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> l(mu_);
      wake_.wait(l, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_chunks();
    std::lock_guard<std::mutex> l(mu_);
    if (--pending_ == 0) done_.notify_one();
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
  {
    std::lock_guard<std::mutex> l(mu_);
    fn_ = &fn;
    n_ = n;
    chunk_ = (n + parts - 1) / parts;
    next_ = 0;
    pending_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  run_chunks();
  std::unique_lock<std::mutex> l(mu_);
  done_.wait(l, [&] { return pending_ == 0; });
  fn_ = nullptr;
}

}  // namespace cb
