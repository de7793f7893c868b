// The CUDA backend's Device (runtime/device.h) and its NCCL Collective (runtime/collective.h): one
// device per GPU, a stream per learner with its own cuBLASLt and cuDNN handles, a synchronisation
// stream per GPU, memory from the GPU's stream-ordered pool, pinned staging for copies.
// Everything here links in every build: without the CUDA toolkit (or without a GPU) the count
// is 0 and `why` says which, and make_cuda_device throws saying so.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/device.h"

namespace cb {

class Collective;

struct CudaOptions {
  bool tf32 = false;  // let cuBLASLt and cuDNN use TF32 tensor cores for f32
  // Run-to-run identical results: the kernels' deterministic paths, deterministic cuDNN engines
  // only (launch.h: GpuCtx::deterministic).
  bool deterministic = false;
  // make_cuda_host_run_device only: run each kernel's threads (parallel_for's indices) last to
  // first, a different order from the default, for tests of order-dependent results.
  bool host_run_reverse = false;
  // make_cuda_host_run_device only: the host's stand-in library accepts bf16 convolutions as
  // cuDNN runs them (bf16 tensors, f32-or-better accumulation, bf16 result) on the direct kernels,
  // so that the GPU's bf16 path around cuDNN (library_bf16.h) runs on the host; without it the
  // library declines and the bf16 fallback runs.
  bool host_run_bf16_library = false;
};

// True when this binary has the CUDA backend (built with the toolkit).
bool cuda_backend_built();

// Whether the CUDA backend has a kernel for (op, dtype): its table, which needs no GPU (false
// in a build without the toolkit).
bool cuda_kernel_exists(OpKind op, DType dtype);

// The number of GPUs this process can use; 0 with `why` set ("no GPU found: ...", "crossbow was
// built without the CUDA toolkit") when there are none.
int cuda_device_count(std::string* why);

// The device ordinals of a spec given to `option`: "cuda" (every GPU) or "cuda:0,1" (those).
// Throws cb::Error naming the option and the spec when it is malformed, when no GPU is found
// (with the reason), or when an ordinal is not a GPU of this machine.
std::vector<int> cuda_devices_of(const std::string& spec, const std::string& option = "--devices");

// GPU `ordinal` as a Device named "cuda:<ordinal>".
std::unique_ptr<Device> make_cuda_device(int ordinal, const CudaOptions& options = {});

// One NCCL communicator per device (all CUDA devices of this process, from make_cuda_device),
// as Collective endpoints: allreduce_sum runs ncclAllReduce on the caller's stream; agree() goes
// through host memory. Rank r is devices[r].
std::vector<std::unique_ptr<Collective>> make_nccl_collectives(const std::vector<Device*>& devices);

// A NCCL communicator that spans processes (MPI's, sma/mpi_job.h): one process makes the id
// (nccl_unique_id) and hands every other the same bytes; each process's GPUs are ranks
// first_rank .. first_rank + its GPUs - 1 of `ranks` in all.
struct NcclJob {
  std::string id;  // ncclGetUniqueId's bytes
  int first_rank = 0;
  int ranks = 0;
};
std::string nccl_unique_id();
// This process's GPUs in the job's communicator (ncclCommInitRank, one group call); agree() goes
// through `host` (one endpoint per device: the job's host collective, whose ranks match).
std::vector<std::unique_ptr<Collective>> make_nccl_collectives(
    const std::vector<Device*>& devices, const NcclJob& job,
    std::vector<std::unique_ptr<Collective>> host);

// For tests: a Device over host memory that runs the CUDA backend's kernels as plain host loops
// (kernels/cuda/launch.h; the cuDNN and cuBLASLt ops on the backend's fallback kernels), named
// "cuda-host". Bad input values the kernels report (kernels/cuda/device_error.h) are raised at
// synchronize() and download(), as on a GPU.
std::unique_ptr<Device> make_cuda_host_run_device(const CudaOptions& options = {});

}  // namespace cb
