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
  // measurements): every rank returns holding the same values. `ops` holds one op per value, or
  // one for all. Sums run in rank order, as allreduce_sum's.
  virtual void agree(std::span<double> values, std::span<const ReduceOp> ops) = 0;
  void agree(std::span<double> values, ReduceOp op) { agree(values, std::span(&op, 1)); }
};

// The step that joins the processes of a job (MPI's, sma/mpi_job.h) under a two-level collective:
// one endpoint per process, used by one thread at a time. Process p's sums are chained: it
// receives the running sum of processes 0..p-1, adds its devices' buffers in order and passes it
// on; the last process then holds the total and broadcasts it. So the result is the sum in global
// rank order, bit for bit what one process with every device computes, and the same bits
// everywhere. A peer that does not arrive is the link's to report (it throws or ends the job).
class ProcessLink {
 public:
  virtual ~ProcessLink() = default;
  virtual int process() const = 0;
  virtual int processes() const = 0;
  // The running sum of the processes before this one (process() > 0), a chunk at a time.
  virtual void receive_prefix(float* data, int64_t n) = 0;
  // This process's running sum to the next one (process() < processes() - 1). It may return
  // before the data is sent; flush() waits until every sent buffer may be reused.
  virtual void send_prefix(const float* data, int64_t n) = 0;
  virtual void flush() = 0;
  // The last process's data[0, n) on every process.
  virtual void broadcast_from_last(float* data, int64_t n) = 0;
  // Every process's `mine` (the same length everywhere), concatenated in process order.
  virtual void all_gather(std::span<const double> mine, std::span<double> all) = 0;
};

// `ranks` endpoints of one in-process group over host-memory devices (CPU); endpoint r is rank r
// and is used by one thread at a time (each rank from its own thread). Sums run in rank order for
// every element, each rank summing one slice for all, so the result does not depend on timing.
// A rank that does not arrive within `timeout_s` makes the others throw cb::Error naming it
// (no rank waits forever).
std::vector<std::unique_ptr<Collective>> make_shared_memory_collectives(int ranks,
                                                                        double timeout_s = 600);

// The endpoints of this process's `ranks` host-memory devices in a job of several processes: an
// in-process group as above whose thread of rank 0 joins the processes over `link` (every
// process has the same number of devices). Endpoint r is global rank link->process() x ranks + r
// of link->processes() x ranks; sums and agreements run in global rank order, so the result
// equals one process with every device, bit for bit.
std::vector<std::unique_ptr<Collective>> make_two_level_collectives(
    int ranks, std::shared_ptr<ProcessLink> link, double timeout_s = 600);

}  // namespace cb
