// The in-process collective (runtime/collective.h) and failures across devices: sums in rank order,
// a rank that never arrives is named; the two-level collective (processes over a link, each with
// its devices) equals one group bit for bit; a failure on one device stops every device before the
// update.
#include <doctest/doctest.h>

#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <thread>

#include "kernels/cpu/cpu_device.h"
#include "runtime/collective.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "sma/trainer.h"
#include "tests/sma_util.h"
#include "tests/test_util.h"
#include "tests/trainer_util.h"

using namespace cb;
using namespace cb::test::sma;
namespace fs = std::filesystem;

using test::contains;
using test::CpuSetup;
using test::CpuTrainer;
using test::error_of;

// ---- the collective and failures across devices -------------------------------------------------

TEST_CASE("collective: sums in rank order, agrees, and names a rank that never arrives") {
  auto c = make_shared_memory_collectives(3, 0.3);
  auto dev = make_cpu_device(1);
  std::vector<std::vector<float>> data = {
      {1, 2, 3, 4, 5}, {10, 20, 30, 40, 50}, {0.5f, 0, 0, 0, 1}};
  std::vector<std::vector<double>> agreed = {{1, -2}, {3, 7}, {2, 0}};
  std::vector<std::thread> th;
  for (int r = 0; r < 3; ++r)
    th.emplace_back([&, r] {
      c[r]->allreduce_sum(*dev, kSyncStream, data[r].data(), 5);
      c[r]->agree(agreed[r], ReduceOp::Max);
    });
  for (auto& t : th) t.join();
  for (int r = 0; r < 3; ++r) {
    CHECK(data[r] == std::vector<float>{11.5f, 22, 33, 44, 56});
    CHECK(agreed[r] == std::vector<double>{3, 7});
  }
  // Rank 2 never calls: ranks 0 and 1 stop with an error naming it instead of waiting forever.
  std::vector<std::string> errors(2);
  th.clear();
  for (int r = 0; r < 2; ++r)
    th.emplace_back([&, r] {
      std::vector<double> v = {1};
      errors[r] = error_of([&] { c[r]->agree(v, ReduceOp::Sum); });
    });
  for (auto& t : th) t.join();
  for (const std::string& e : errors) CHECK(contains(e, "rank 2 did not arrive"));
}

namespace {

// The processes of a two-level collective as threads of this test: a ProcessLink whose messages
// are handed over in memory (what MPI carries between processes in sma/mpi_job.cpp).
struct Wires {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::deque<std::vector<float>>> to;  // messages to process p
  std::vector<float> bcast;
  std::vector<std::vector<double>> gathered;
  int64_t bcasts = 0;
  std::vector<int64_t> seen, gathers_in;
  explicit Wires(int n)
      : to(static_cast<size_t>(n)),
        gathered(static_cast<size_t>(n)),
        seen(static_cast<size_t>(n)),
        gathers_in(static_cast<size_t>(n)) {}
};

class ThreadLink final : public ProcessLink {
 public:
  ThreadLink(std::shared_ptr<Wires> w, int p, int n) : w_(std::move(w)), p_(p), n_(n) {}
  int process() const override { return p_; }
  int processes() const override { return n_; }
  void receive_prefix(float* data, int64_t n) override {
    std::unique_lock l(w_->mu);
    auto& q = w_->to[static_cast<size_t>(p_)];
    w_->cv.wait(l, [&] { return !q.empty(); });
    REQUIRE(static_cast<int64_t>(q.front().size()) == n);
    std::copy(q.front().begin(), q.front().end(), data);
    q.pop_front();
  }
  void send_prefix(const float* data, int64_t n) override {
    std::lock_guard l(w_->mu);
    w_->to[static_cast<size_t>(p_ + 1)].emplace_back(data, data + n);
    w_->cv.notify_all();
  }
  void flush() override {}
  void broadcast_from_last(float* data, int64_t n) override {
    std::unique_lock l(w_->mu);
    const int64_t mine = ++w_->seen[static_cast<size_t>(p_)];
    if (p_ == n_ - 1) {
      w_->bcast.assign(data, data + n);
      w_->bcasts = mine;
      w_->cv.notify_all();
    }
    w_->cv.wait(l, [&] { return w_->bcasts >= mine; });
    std::copy(w_->bcast.begin(), w_->bcast.end(), data);
  }
  void all_gather(std::span<const double> mine, std::span<double> all) override {
    std::unique_lock l(w_->mu);
    const int64_t round = ++w_->gathers_in[static_cast<size_t>(p_)];
    w_->gathered[static_cast<size_t>(p_)].assign(mine.begin(), mine.end());
    w_->cv.notify_all();
    w_->cv.wait(l, [&] {
      for (int64_t g : w_->gathers_in)
        if (g < round) return false;
      return true;
    });
    for (int q = 0; q < n_; ++q)
      std::copy(w_->gathered[static_cast<size_t>(q)].begin(),
                w_->gathered[static_cast<size_t>(q)].end(), all.begin() + q * mine.size());
  }

 private:
  std::shared_ptr<Wires> w_;
  int p_, n_;
};

}  // namespace

TEST_CASE("collective: two levels (processes x devices) sum and agree as one group, bit for bit") {
  auto dev = make_cpu_device(1);
  // Values whose float sums depend on the order: only the global rank order gives `want`.
  constexpr int kRanks = 6;
  for (auto [procs, per] : {std::pair{2, 3}, std::pair{3, 2}, std::pair{6, 1}}) {
    CAPTURE(procs);
    const int64_t n = (int64_t{1} << 20) + 37;  // two chunks of the chained sum
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-1e4f, 1e4f);
    std::vector<std::vector<float>> data(kRanks, std::vector<float>(static_cast<size_t>(n)));
    for (auto& d : data)
      for (float& v : d) v = u(rng) * (u(rng) > 0 ? 1e-4f : 1.0f);
    std::vector<std::vector<double>> agreed(kRanks);
    for (int r = 0; r < kRanks; ++r) agreed[r] = {0.1 * (r + 1), static_cast<double>(r % 4), 1e16};
    std::vector<float> want = data[0];
    for (int r = 1; r < kRanks; ++r)
      for (int64_t i = 0; i < n; ++i) want[i] = want[i] + data[r][i];
    double want_sum = 0.1;
    for (int r = 1; r < kRanks; ++r) want_sum = want_sum + 0.1 * (r + 1);

    auto wires = std::make_shared<Wires>(procs);
    std::vector<std::unique_ptr<Collective>> c;
    for (int p = 0; p < procs; ++p)
      for (auto& e :
           make_two_level_collectives(per, std::make_shared<ThreadLink>(wires, p, procs), 30))
        c.push_back(std::move(e));
    std::vector<std::thread> th;
    const ReduceOp ops[3] = {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Sum};
    for (int r = 0; r < kRanks; ++r)
      th.emplace_back([&, r] {
        CHECK(c[r]->rank() == r);
        CHECK(c[r]->size() == kRanks);
        c[r]->allreduce_sum(*dev, kSyncStream, data[r].data(), n);
        c[r]->agree(agreed[r], ops);
      });
    for (auto& t : th) t.join();
    for (int r = 0; r < kRanks; ++r) {
      CAPTURE(r);
      CHECK(std::memcmp(data[r].data(), want.data(), sizeof(float) * static_cast<size_t>(n)) == 0);
      CHECK(agreed[r][0] == want_sum);
      CHECK(agreed[r][1] == 3);
      CHECK(agreed[r][2] == 6e16);
    }
  }
}

TEST_CASE("sma: a failure on one device stops every device before the update (nobody waits)") {
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> w0(kOut * kIn), b0(kOut), x(2 * kIn);
  for (float& v : w0) v = u(rng);
  for (float& v : b0) v = u(rng);
  for (float& v : x) v = u(rng);
  CpuSetup o;
  o.opts.batch = 2;
  o.opts.learners = 2;
  o.devices = 2;
  o.cores = {0, 0};
  CpuTrainer t(gemm_graph(w0, b0), {LossKind::MeanSquaredError, ""}, o);
  CHECK(t.total_learners() == 4);
  CHECK(t.alpha() == 0.5);
  const Batch good = gemm_batch(x, {0, 1});
  t.step({good, good, good, good}, 0.1);
  const std::vector<float> z = t.central(0), r0 = t.replica(0);
  // A NaN loss on device 1's second learner: device 0 agrees to stop as well.
  Batch bad = good;
  bad.inputs[0].data<float>()[3] = std::nanf("");
  std::string e = error_of([&] { t.step({good, good, good, bad}, 0.1); });
  CHECK(contains(e, "diverged at step 2"));
  CHECK(contains(e, "learner 3 (device 1, row 1)"));
  CHECK(t.central(0) == z);
  CHECK(t.central(1) == z);
  CHECK(t.replica(0) == r0);
  // An error (a batch of the wrong shape) on device 0: device 1 does not wait in the sum.
  Batch wrong = gemm_batch(std::vector<float>(3 * kIn, 0.5f), {0, 1, 2});
  e = error_of([&] { t.step({wrong, good, good, good}, 0.1); });
  CAPTURE(e);
  CHECK(contains(e, "takes"));
  CHECK(t.central(1) == z);
  // And the trainer carries on afterwards.
  t.step({good, good, good, good}, 0.1);
  CHECK(t.steps_done() == 2);
  CHECK(t.central(0) == t.central(1));
}
