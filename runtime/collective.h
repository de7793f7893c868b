// The one interface through which SMA sums and agrees across devices and processes. A Collective
// is one rank's endpoint (one per device: the in-process group below, NCCL's communicator per
// GPU, MPI's per process); every rank of a group calls each method in the same order with the
// same sizes, and each returns with the same result on every rank, bit for bit (so every
// device's copy of the central model z stays identical, and every rank takes the same decision).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "runtime/device.h"

namespace cb {

enum class ReduceOp { Sum, Max };

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Sums the f32 device buffer data[0, n) of `dev` over all ranks, in place. Ordered after the
  // work launched on `stream` before it; later work on `stream` sees the result.
  virtual void allreduce_sum(Device& dev, Stream stream, float* data, int64_t n) = 0;
  // Host values reduced elementwise over all ranks (the agreement on errors, K, the tuner's
  // measurements): every rank returns holding the same values.
  virtual void agree(std::span<double> values, ReduceOp op) = 0;
};

// `ranks` endpoints of one in-process group over host-memory devices (CPU); endpoint r is rank r
// and is used by one thread at a time (each rank from its own thread). Sums run in rank order for
// every element, each rank summing one slice for all, so the result does not depend on timing.
// A rank that does not arrive within `timeout_s` makes the others throw cb::Error naming it
// (no rank waits forever).
std::vector<std::unique_ptr<Collective>> make_shared_memory_collectives(int ranks,
                                                                        double timeout_s = 600);

}  // namespace cb
