// The thread pool (runtime/thread_pool.h) and the CPU device's streams (kernels/cpu/cpu_device.h):
// every index of a parallel_for runs exactly once whatever the split, jobs follow each other
// without losing a chunk, several pools (a device's learner streams) run side by side from their
// own threads, and a stream's kernels run on that stream's pool. Run under ThreadSanitizer by
// `ctest --preset tsan`.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "kernels/cpu/cpu_device.h"
#include "runtime/ops/params.h"
#include "runtime/thread_pool.h"

using namespace cb;

TEST_CASE("thread pool: every index exactly once, for any size, grain and pool") {
  int checked = 0;
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    CHECK(pool.size() == threads);
    for (int64_t n : {0, 1, 7, 1000, 100003}) {
      for (int64_t grain : {1, 64, 5000}) {
        CAPTURE(threads);
        CAPTURE(n);
        CAPTURE(grain);
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool.parallel_for(
            n,
            [&](int64_t b, int64_t e) {
              CHECK(b < e);
              for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
            },
            grain);
        int64_t bad = 0;
        for (auto& h : hits) bad += h.load() != 1;
        CHECK(bad == 0);
        ++checked;
      }
    }
  }
  CHECK(checked == 60);
}

TEST_CASE("thread pool: many short jobs back to back, and pools side by side on own threads") {
  ThreadPool pool(3);
  int64_t total = 0;
  for (int job = 0; job < 2000; ++job) {
    std::atomic<int64_t> sum{0};
    pool.parallel_for(
        64, [&](int64_t b, int64_t e) { sum += e - b; }, 1);
    total += sum.load();
  }
  CHECK(total == 2000 * 64);

  // Four learners' pools, each made and driven by its own thread (as the trainer's streams).
  std::vector<int64_t> sums(4, 0);
  std::vector<std::thread> th;
  for (int l = 0; l < 4; ++l)
    th.emplace_back([&, l] {
      ThreadPool own(2);
      for (int job = 0; job < 200; ++job) {
        std::atomic<int64_t> s{0};
        own.parallel_for(
            1000, [&](int64_t b, int64_t e) { s += e - b; }, 10);
        sums[static_cast<size_t>(l)] += s.load();
      }
    });
  for (auto& t : th) t.join();
  for (int64_t s : sums) CHECK(s == 200 * 1000);
}

TEST_CASE("cpu device: learner streams from their own threads, kernels on each stream's pool") {
  auto dev = make_cpu_device(2, {}, "cpu");
  constexpr int kLearners = 3;
  constexpr int64_t kN = 50000;
  std::vector<std::vector<float>> in(kLearners, std::vector<float>(kN)), out = in;
  std::vector<ThreadPool*> seen(kLearners, nullptr);
  std::vector<std::thread> th;
  for (int l = 0; l < kLearners; ++l)
    th.emplace_back([&, l] {
      const Stream s = dev->create_stream(l, kLearners);
      for (int64_t i = 0; i < kN; ++i) in[l][static_cast<size_t>(i)] = static_cast<float>(i + l);
      std::any params = ops::LeakyReluParams{0.5f};
      KernelArgs a;
      a.params = &params;
      a.in = {flat_f32(in[l].data(), kN)};
      a.out = {flat_f32(out[l].data(), kN)};
      for (int rep = 0; rep < 20; ++rep) dev->launch(OpKind::LeakyRelu, a, s);
      const Event e = dev->record_event(s);
      dev->wait_event(kSyncStream, e);
      dev->synchronize(s);
      dev->destroy_stream(s);
      seen[static_cast<size_t>(l)] = cpu::current_pool();  // none outside a launch
    });
  for (auto& t : th) t.join();
  for (int l = 0; l < kLearners; ++l) {
    CHECK(seen[static_cast<size_t>(l)] == nullptr);
    CHECK(out[l][7] == 7.0f + static_cast<float>(l));
    CHECK(out[l][kN - 1] == static_cast<float>(kN - 1 + l));
  }
}

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)  // they need the address space
TEST_CASE("thread pool: a thread the system refuses is an error, not a hang or an abort") {
  // Fuzzing: --threads 1000 under `ulimit -v` hung. In a child limited to 512 MiB of
  // address space, 1000 threads' stacks cannot all be made.
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(60);  // a hang fails the test instead of hanging it
    struct rlimit lim {};
    lim.rlim_cur = lim.rlim_max = rlim_t{512} << 20;
    setrlimit(RLIMIT_AS, &lim);
    try {
      ThreadPool pool(1000);
    } catch (const cb::Error& e) {
      _exit(std::string(e.what()).find("cannot start worker thread") != std::string::npos ? 0 : 3);
    } catch (...) {
      _exit(4);
    }
    _exit(5);  // 1000 threads fit after all: nothing was tested
  }
  int status = 0;
  waitpid(pid, &status, 0);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
#endif
