// The in-process collective (runtime/collective.h) and failures across devices: sums in rank order,
// a rank that never arrives is named; a failure on one device stops every device before the
// update.
#include <doctest/doctest.h>

#include <cmath>
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
