// Devices from their spec, as --devices (cb-train) and --device (cb-run, cb-inspect) take it:
// "cpu", "cpu:G" (G groups of the given cores, each a device), "cuda" (every GPU) and "cuda:I,J"
// (those GPUs). The session and the tools make the devices and their collectives here and hand
// them to the trainer or the executor, which never make one.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_device.h"
#include "kernels/cuda/cuda_device.h"
#include "runtime/collective.h"
#include "runtime/error.h"
#include "sma/mpi_job.h"

namespace cb {

inline bool is_cuda_spec(const std::string& s) { return s == "cuda" || s.rfind("cuda:", 0) == 0; }

// "cpu" -> 1, "cpu:G" -> G; anything else (but a cuda spec) is an error naming the choices.
inline int cpu_groups_of(const std::string& s) {
  if (s == "cpu") return 1;
  if (s.rfind("cpu:", 0) == 0) {
    try {
      size_t pos = 0;
      int g = std::stoi(s.substr(4), &pos);
      if (pos == s.size() - 4 && g >= 1) return g;
    } catch (const std::exception&) {
    }
  }
  fail(
      "--devices '{}': expected cpu, cpu:G (G >= 1 groups of cores, each a device), cuda (every "
      "GPU) or cuda:I,J (those GPUs)",
      s);
}

// Checks a spec without making devices: how many devices it names (for a cuda spec this asks
// the driver, so "no GPU found" is reported before any work starts).
inline int count_devices(const std::string& spec) {
  if (is_cuda_spec(spec)) return static_cast<int>(cuda_devices_of(spec).size());
  return cpu_groups_of(spec);
}

// The devices of `spec`; CPU devices work on `cores` (split into the groups).
inline std::vector<std::unique_ptr<Device>> make_devices(const std::string& spec,
                                                         const std::vector<int>& cores,
                                                         const CudaOptions& cuda = {}) {
  if (!is_cuda_spec(spec)) return make_cpu_devices(cpu_groups_of(spec), cores);
  std::vector<std::unique_ptr<Device>> v;
  for (int id : cuda_devices_of(spec)) v.push_back(make_cuda_device(id, cuda));
  return v;
}

// One collective endpoint per device of this process: NCCL over 2+ GPUs, else the in-process
// group (one GPU has nothing to reduce across devices: no NCCL set-up, one failure point less).
inline std::vector<std::unique_ptr<Collective>> make_collectives(
    const std::string& spec, const std::vector<std::unique_ptr<Device>>& devs) {
  if (!is_cuda_spec(spec) || devs.size() == 1)
    return make_shared_memory_collectives(static_cast<int>(devs.size()));
  std::vector<Device*> raw;
  for (const auto& d : devs) raw.push_back(d.get());
  return make_nccl_collectives(raw);
}

// Under mpirun: the job's collective over every device of every process. Host-memory devices go in
// the two-level group (each process's devices in the in-process group, the processes joined over
// MPI); GPUs in one NCCL communicator over every GPU of the job (its id made by rank 0 and
// broadcast over MPI), their agreements through the two-level host group.
inline std::vector<std::unique_ptr<Collective>> make_collectives(
    const std::string& spec, const std::vector<std::unique_ptr<Device>>& devs, MpiJob& job) {
  const int n = static_cast<int>(devs.size());
  std::vector<std::unique_ptr<Collective>> host = job.collectives(n);
  if (!is_cuda_spec(spec)) return host;
  NcclJob nj;
  nj.id = job.broadcast(job.rank() == 0 ? nccl_unique_id() : std::string());
  nj.first_rank = job.rank() * n;
  nj.ranks = job.size() * n;
  std::vector<Device*> raw;
  for (const auto& d : devs) raw.push_back(d.get());
  return make_nccl_collectives(raw, nj, std::move(host));
}

}  // namespace cb
