// Several processes on MPI: one process per device (a server, a NUMA node), launched by mpirun.
// Built when CMake finds MPI (CB_HAVE_MPI); without an MPI launch the binary runs as one process
// and never touches MPI.
//
// The job's Collective (runtime/collective.h) spans every process: rank = the MPI rank, size = the
// processes, one device each. Its sum is MPI_Reduce to rank 0 then MPI_Bcast (every rank ends with
// rank 0's bits, so z stays identical everywhere, which MPI_Allreduce does not promise), its
// agreement the same on doubles. The calls are MPI's blocking ones (its own progress loop has the
// lowest latency), watched by a thread: one in flight for longer than the job's timeout (a rank
// died, hangs or is far slower) is reported and the whole job aborted (MPI_Abort), so no rank is
// left waiting; rank 0 names the ranks at fault from their heartbeats (a rank that dies outright
// is named by mpirun itself). Sums and agreements
// use two communicators, since the trainer's sync thread and its loop thread call them
// concurrently (each in the same order on every rank).
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
  // The job's collective (one per process: this process's one device).
  std::unique_ptr<Collective> collective();
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
