// The CPU kernels' thread pool: the pool of the stream whose launch runs on this thread, published
// by the CPU device (kernels/cpu/cpu_device.h) around each launch, never passed in KernelArgs.
#pragma once

namespace cb {

class ThreadPool;

namespace cpu {
// The thread pool of the stream whose kernel runs on this thread (set by the CPU device around
// each launch; nullptr outside one: kernels then run inline).
ThreadPool* current_pool();

// Publishes `pool` as this thread's current pool for its lifetime: for benchmarks that call CPU
// kernel internals directly (everything else launches through a Device).
class ScopedPool {
 public:
  explicit ScopedPool(ThreadPool* pool);
  ~ScopedPool();
  ScopedPool(const ScopedPool&) = delete;
  ScopedPool& operator=(const ScopedPool&) = delete;

 private:
  ThreadPool* saved_;
};
}  // namespace cpu

}  // namespace cb
