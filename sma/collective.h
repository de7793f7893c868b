// The one interface through which SMA sums across devices (and, later, processes): every rank
// calls allreduce_sum with its own buffer of the same length, and each returns holding the
// elementwise sum over all ranks, bit-identical on every rank (so every device's copy of the
// central model z stays identical). Implementations: in-process shared memory for CPU "devices"
// (--devices cpu:G) here; NCCL and MPI_Allreduce are the same call.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace cb {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Sums data[0, n) over all ranks, in place. Blocks until every rank has called it.
  virtual void allreduce_sum(float* data, int64_t n) = 0;
};

// `ranks` handles onto one in-process group; handle r is rank r and must be used by one thread at
// a time (each rank from its own thread). The sum runs in rank order for every element, each
// rank summing one slice for all, so the result does not depend on timing.
std::vector<std::unique_ptr<Collective>> make_shared_memory_collectives(int ranks);

}  // namespace cb
