// A persistent thread that runs one posted task at a time: SMA's learners and device drivers
// live on these, woken once per step. post() hands a task over, wait() blocks until it has run
// and rethrows what it threw. The thread's first task can set it up (pin it, create its device)
// so that thread-bound state is made on the thread that uses it.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace cb {

class Worker {
 public:
  Worker() : thread_([this] { loop(); }) {}
  ~Worker() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Hands `task` to the thread; the previous task must have been waited for.
  void post(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> l(mu_);
      task_ = std::move(task);
      busy_ = true;
    }
    cv_.notify_all();
  }
  // Blocks until the posted task has run; rethrows its exception.
  void wait() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return !busy_; });
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }
  void run(std::function<void()> task) {
    post(std::move(task));
    wait();
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      cv_.wait(l, [&] { return stop_ || busy_; });
      if (stop_ && !busy_) return;
      std::function<void()> t = std::move(task_);
      l.unlock();
      std::exception_ptr e;
      try {
        t();
      } catch (...) {
        e = std::current_exception();
      }
      l.lock();
      error_ = e;
      busy_ = false;
      cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> task_;
  std::exception_ptr error_;
  bool busy_ = false, stop_ = false;
  std::thread thread_;  // last: starts after the members it uses
};

}  // namespace cb
