// make_nccl_collectives (cuda_device.h): the GPUs of one process as one NCCL group. The sum runs
// as ncclAllReduce on the caller's stream (the device's synchronisation stream in the trainer),
// in place, so it is ordered after the per-GPU sums and before the central update without the
// host waiting; NCCL's ring gives every rank the same bytes. agree() is host data and goes
// through the in-process group of runtime/collective.h. One GPU needs no NCCL at all:
// session/devices.h gives it the in-process collective.
// The communicators of one group are owned together (Comms): when the last endpoint goes, all
// are finalised in one group call from this thread, then destroyed. (An unfinalised
// ncclCommDestroy may wait for its peers; destroying them one after another from one thread
// could then hang with 2+ GPUs.)
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/launch.h"
#include "runtime/collective.h"
#include "runtime/error.h"

namespace cb {

void* cuda_stream_handle(Device& dev, Stream stream);  // cuda_device.cpp
int cuda_ordinal(Device& dev);                         // cuda_device.cpp

namespace {
void check_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) fail("NCCL: {} failed: {}", what, ncclGetErrorString(r));
}

// Every communicator of one ncclCommInitAll (or of this process's ncclCommInitRank group),
// finalised together, then destroyed.
struct Comms {
  std::vector<ncclComm_t> comms;
  Comms() = default;
  Comms(const Comms&) = delete;
  Comms& operator=(const Comms&) = delete;
  ~Comms() {
    if (comms.empty()) return;
    ncclResult_t r = ncclGroupStart();
    for (ncclComm_t c : comms)
      if (r == ncclSuccess) r = ncclCommFinalize(c);
    const ncclResult_t end = ncclGroupEnd();
    if (r != ncclSuccess || end != ncclSuccess)
      std::fprintf(stderr, "crossbow: NCCL: finalising the communicators failed: %s\n",
                   ncclGetErrorString(r != ncclSuccess ? r : end));
    for (ncclComm_t c : comms) ncclCommDestroy(c);
  }
};

class NcclCollective final : public Collective {
 public:
  NcclCollective(std::shared_ptr<Comms> comms, int local, int rank, int size,
                 std::unique_ptr<Collective> host)
      : comms_(std::move(comms)),
        comm_(comms_->comms[static_cast<size_t>(local)]),
        rank_(rank),
        size_(size),
        host_(std::move(host)) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allreduce_sum(Device& dev, Stream stream, float* data, int64_t n) override {
    if (n == 0) return;
    cuda::check_cuda(cudaSetDevice(cuda_ordinal(dev)), "cudaSetDevice");
    check_nccl(ncclAllReduce(data, data, static_cast<size_t>(n), ncclFloat, ncclSum, comm_,
                             static_cast<cudaStream_t>(cuda_stream_handle(dev, stream))),
               "ncclAllReduce");
  }
  void agree(std::span<double> values, std::span<const ReduceOp> ops) override {
    host_->agree(values, ops);
  }

 private:
  std::shared_ptr<Comms> comms_;
  ncclComm_t comm_;
  int rank_, size_;
  std::unique_ptr<Collective> host_;
};
}  // namespace

std::vector<std::unique_ptr<Collective>> make_nccl_collectives(
    const std::vector<Device*>& devices) {
  const int n = static_cast<int>(devices.size());
  std::vector<int> ordinals;
  for (Device* d : devices) ordinals.push_back(cuda_ordinal(*d));
  std::vector<ncclComm_t> raw(static_cast<size_t>(n));
  check_nccl(ncclCommInitAll(raw.data(), n, ordinals.data()), "ncclCommInitAll");
  auto comms = std::make_shared<Comms>();
  comms->comms = std::move(raw);
  auto host = make_shared_memory_collectives(n);
  std::vector<std::unique_ptr<Collective>> v;
  for (int r = 0; r < n; ++r)
    v.push_back(
        std::make_unique<NcclCollective>(comms, r, r, n, std::move(host[static_cast<size_t>(r)])));
  return v;
}

std::string nccl_unique_id() {
  ncclUniqueId id;
  check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  return std::string(id.internal, sizeof id.internal);
}

std::vector<std::unique_ptr<Collective>> make_nccl_collectives(
    const std::vector<Device*>& devices, const NcclJob& job,
    std::vector<std::unique_ptr<Collective>> host) {
  const int n = static_cast<int>(devices.size());
  ncclUniqueId id;
  if (job.id.size() != sizeof id.internal)
    fail("NCCL: the job's communicator id has {} bytes, NCCL's has {}", job.id.size(),
         sizeof id.internal);
  std::copy(job.id.begin(), job.id.end(), id.internal);
  CB_CHECK(host.size() == devices.size() && job.first_rank + n <= job.ranks);
  std::vector<ncclComm_t> raw(static_cast<size_t>(n));
  // Every process's ncclCommInitRank calls meet in NCCL's bootstrap: one group call here sets up
  // all of this process's GPUs at once (one call per GPU in turn would wait for the others).
  check_nccl(ncclGroupStart(), "ncclGroupStart");
  for (int r = 0; r < n; ++r) {
    cuda::check_cuda(cudaSetDevice(cuda_ordinal(*devices[static_cast<size_t>(r)])),
                     "cudaSetDevice");
    check_nccl(ncclCommInitRank(&raw[static_cast<size_t>(r)], job.ranks, id, job.first_rank + r),
               "ncclCommInitRank");
  }
  check_nccl(ncclGroupEnd(), "ncclCommInitRank (the job's communicator)");
  auto comms = std::make_shared<Comms>();
  comms->comms = std::move(raw);
  std::vector<std::unique_ptr<Collective>> v;
  for (int r = 0; r < n; ++r)
    v.push_back(std::make_unique<NcclCollective>(comms, r, job.first_rank + r, job.ranks,
                                                 std::move(host[static_cast<size_t>(r)])));
  return v;
}

}  // namespace cb
