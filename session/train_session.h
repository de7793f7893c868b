// A training session: what cb-train does, as one library call. From SessionOptions it reads the
// data (and packs an image folder into --cache), imports the model with sizes taken from the data,
// picks the loss, makes the devices and their collectives (or, under mpirun, joins the MPI job),
// builds the Trainer, and runs the loop with its reports (session/recorder.h), the trained model
// written to --output at every evaluation, checkpoints (sma/checkpoint.h) and --resume, and
// SIGINT/SIGTERM stopping after the step with everything written.
//
// Under mpirun every rank runs a session; rank 0 prints and writes, the others keep stderr only.
// A rank that fails ends the whole job at once (MPI_Abort), since its peers would otherwise wait
// in the next sum until the collective timeout.
#pragma once

#include <memory>
#include <string>

#include "session/options.h"

namespace cb {

class MpiJob;

class TrainSession {
 public:
  // Validates the options and, when this process was started by an MPI launcher, joins the job
  // and checks what cannot run under it. Throws cb::Error naming the setting (a usage error);
  // under MPI it ends the job with status 2 instead.
  explicit TrainSession(SessionOptions o);
  ~TrainSession();
  TrainSession(const TrainSession&) = delete;
  TrainSession& operator=(const TrainSession&) = delete;

  // Trains. Returns 0, or 128 + the signal that stopped the run (a checkpoint, when a folder is
  // set, and the model are written first). Throws cb::Error for bad input or a diverged run
  // (--output then holds the last good model); under MPI it ends the job with status 1 instead.
  int run();

  // The name messages start with: "cb-train", or "cb-train (rank R of N)" under mpirun.
  const std::string& who() const { return who_; }

 private:
  int run_here();

  SessionOptions o_;
  std::unique_ptr<MpiJob> mpi_;
  std::string who_;
};

// The message for the exception being handled (call inside a catch block): "WHO: error: ..." for
// cb::Error, what to lower for std::bad_alloc, "WHO: internal error: ..." for anything else.
std::string failure_message(const std::string& who);

}  // namespace cb
