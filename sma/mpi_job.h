// Several processes on MPI: one process per device (a server, a NUMA node), launched by mpirun.
// Built when CMake finds MPI (CB_HAVE_MPI); without an MPI launch the binary runs as one process
// and never touches MPI.
//
// The job's collective (runtime/collective.h) spans every device of every process: each process
// drives the same number of devices, device d of process p is global rank p x D + d. Within a
// process its devices meet in the in-process group; one thread per process then joins the
// processes (make_two_level_collectives over an MPI link): the sums are chained from rank 0 to the
// last, a chunk at a time, and the last process broadcasts the total, so the result is the sum in
// global rank order (bit for bit what one process with all the devices computes, and the same bits
// on every rank, which MPI_Allreduce does not promise); agreements gather every rank's values and
// reduce them in the same order. The calls are MPI's blocking ones (its own progress loop has the
// lowest latency), watched by a thread: one in flight for longer than the job's timeout (a rank
// died, hangs or is far slower) is reported and the whole job aborted (MPI_Abort), so no rank is
// left waiting; rank 0 names the ranks at fault from their heartbeats (a rank that dies outright
// is named by mpirun itself). Sums and agreements use two communicators.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/collective.h"

namespace cb {

// Whether this process was started by an MPI launcher (mpirun/mpiexec/srun set these).
bool launched_by_mpi();
// Whether this binary was built with MPI.
bool built_with_mpi();

class MpiJob {
 public:
  // MPI_Init_thread (MPI_THREAD_MULTIPLE). Throws cb::Error when MPI is not built in or refuses.
  explicit MpiJob(double timeout_s);
  ~MpiJob();  // MPI_Finalize
  MpiJob(const MpiJob&) = delete;
  MpiJob& operator=(const MpiJob&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The job's collective: one endpoint per device of this process (`devices` of them, the same
  // number in every process), global rank rank() x devices + d.
  std::vector<std::unique_ptr<Collective>> collectives(int devices);
  // Rank 0's `text` on every rank (the others' `text` is ignored).
  std::string broadcast(const std::string& text);
  // Returns on every rank once rank 0 has called it too, however long that takes: no timeout
  // (for work only rank 0 does, such as packing a data set; a rank 0 that fails ends the job).
  void wait_for_rank0();
  // Every rank's `text`, gathered on every rank.
  std::vector<std::string> all_gather(const std::string& text);
  // The start-up agreement: every rank's (name, value) settings compared with rank 0's. Returns
  // each difference on a line of its own ("  --batch-size: rank 0 has 16, rank 1 has 32"), the
  // same text on every rank; "" when all agree. Values must not contain newlines.
  std::string differences(const std::vector<std::pair<std::string, std::string>>& mine);
  // The same agreement, as an error: throws cb::Error naming every difference.
  void require_same(const std::vector<std::pair<std::string, std::string>>& mine);
  // Checks that `bytes` at `data` are the same on every rank (`what`: the central model, say):
  // returns their FNV-1a hash, or throws cb::Error naming the first rank that differs.
  std::string require_identical(const void* data, size_t bytes, const std::string& what);
  // Ends every process of the job with `code` (after printing `why` on stderr).
  [[noreturn]] void abort(const std::string& why, int code = 1);

 private:
  int rank_ = 0, size_ = 1;
  double timeout_s_;
  std::shared_ptr<void> dog_;  // the watchdog thread (mpi_job.cpp)
  int64_t gathers_ = 0;
};

}  // namespace cb
