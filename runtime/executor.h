// Runs a planned graph on a device. Construction does all the work that allocates: the memory
// plan, one arena, device copies of constants and parameters, a view per node; run() then only
// launches kernels (no allocation in the steady state).
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/device.h"
#include "runtime/graph.h"
#include "runtime/memory_plan.h"

namespace cb {

// Device memory an executor may run in instead of allocating its own arena: another executor's
// arena, lent while that one is idle. The lender guarantees that nothing else uses it while the
// borrower runs; the borrower keeps nothing in it from one run() to the next (an arena holds only
// what one run computes: inputs are set before each run, outputs read after it).
struct ArenaLoan {
  void* data = nullptr;
  size_t bytes = 0;
};

class Executor {
 public:
  // Throws cb::Error listing every node without a kernel on `dev` (all gaps at once).
  // `bound` gives device memory for values that live outside the arena (parameters, gradients
  // and state in flat per-replica buffers); the caller keeps it alive and initialised.
  // Kernels run on `stream` of `dev` (a learner's stream, or the synchronisation stream); each
  // node gets the workspace its kernel asks for (Device::workspace_bytes) in one buffer.
  // With a loan of at least the plan's peak, the arena is the loan (no allocation of its own).
  Executor(const Graph& g, Device& dev, int64_t batch,
           const std::unordered_map<ValueId, void*>& bound = {}, Stream stream = kSyncStream,
           ArenaLoan loan = {});

  const Graph& graph() const { return g_; }
  const MemoryPlan& plan() const { return plan_; }
  Device& device() const { return dev_; }
  Stream stream() const { return stream_id_; }
  int64_t batch() const { return batch_; }

  // Copies a host tensor into graph input i; checks its dtype and dims against the graph.
  void set_input(size_t i, const Tensor& t);
  // Dims graph input i has at this batch size.
  std::vector<int64_t> input_dims(size_t i) const;
  void run();
  // Random stream of the ops that draw (Dropout): a node's seed is ((step << 20) ^ node) ^ stream,
  // step counting run() calls from `step`. Replicas of one graph take different streams (stream 0,
  // the default, is the single learner's); a rebuilt executor continues at the step it was at.
  void set_rng(uint64_t stream, uint64_t step) {
    stream_ = stream;
    step_ = step;
  }
  Tensor output(size_t i) const;  // copies graph output i to the host
  // The arena, to lend while this executor is idle (see ArenaLoan).
  ArenaLoan arena() const { return arena_loan_; }
  // Bytes of the arena allocated for this executor alone (0 when it runs in a loan).
  size_t own_arena_bytes() const { return arena_.size(); }
  const TensorView& view(ValueId v) const { return views_[static_cast<size_t>(v)]; }

 private:
  const Graph& g_;
  Device& dev_;
  int64_t batch_;
  MemoryPlan plan_;
  Stream stream_id_;
  DeviceBuffer arena_, workspace_;  // arena_ empty when the arena is a loan
  ArenaLoan arena_loan_;
  std::vector<DeviceBuffer> constants_;
  std::vector<TensorView> views_;  // per value
  std::vector<KernelArgs> args_;   // per node
  std::vector<bool> skip_;         // per node: alias whose output already is its input
  uint64_t step_ = 0;
  uint64_t stream_ = 0;
};

// Every node whose kernel `dev` lacks, as one message per node (empty: all covered).
std::vector<std::string> missing_kernels(const Graph& g, const Device& dev);

}  // namespace cb
