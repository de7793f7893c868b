// A training session: what cb-train does, and what the public API (include/crossbow/crossbow.h)
// is made of. From SessionOptions and data it imports the model with sizes taken from the data,
// picks the loss, makes the devices and their collectives (or, under mpirun, joins the MPI job)
// and builds the Trainer once (build); then fit runs the loop with its reports
// (session/recorder.h), the trained model written to --output at every evaluation, checkpoints
// (sma/checkpoint.h) and --resume, and SIGINT/SIGTERM stopping after the step with everything
// written. evaluate, predict, save and save_checkpoint use the trainer fit left. run() is
// cb-train's whole run: open(--data), build, fit.
//
// Under mpirun every rank runs a session; rank 0 prints and writes, the others keep stderr only.
// A rank that fails in open, build or fit ends the whole job at once (MPI_Abort), since its peers
// would otherwise wait in the next sum until the collective timeout.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "importer/onnx_exporter.h"
#include "session/options.h"
#include "session/recorder.h"
#include "sma/checkpoint.h"
#include "sma/train_loop.h"

namespace cb {

class MpiJob;

// What a fit call may add to the options: a stream of training batches, another evaluation, and
// the caller's say on stopping.
struct FitHooks {
  LoopSources sources;
  // After each evaluation, with its record; true stops there.
  std::function<bool(const nlohmann::ordered_json& record)> on_eval;
  // After every step; true stops after it (a checkpoint is written when a folder is set).
  std::function<bool()> should_stop;
};

struct FitResult {
  RunSummary summary;
  std::vector<nlohmann::ordered_json> records;  // config, tune, eval ..., summary
  bool stopped = false;                         // before the end (a signal or a hook)
  int signal = 0;                               // the signal that stopped it, else 0
};

class TrainSession {
 public:
  // Validates the options (the data path may be empty: data come with fit) and, when this process
  // was started by an MPI launcher, joins the job and checks what cannot run under it. Throws
  // cb::Error naming the setting (a usage error); under MPI it ends the job with status 2 instead.
  explicit TrainSession(SessionOptions o);
  ~TrainSession();
  TrainSession(const TrainSession&) = delete;
  TrainSession& operator=(const TrainSession&) = delete;

  // cb-train: trains on --data. Returns 0, or 128 + the signal that stopped the run (a
  // checkpoint, when a folder is set, and the model are written first). Throws cb::Error for bad
  // input or a diverged run (--output then holds the last good model); under MPI it ends the job
  // with status 1 instead.
  int run();

  // Reads a data set (load_dataset); with --cache, an image folder is packed and its pack
  // returned (which needs the model: build() comes first when it has not run).
  Dataset open(const std::string& path);
  // Imports the model and builds the trainer, once: sizes the model leaves symbolic and the loss
  // come from `data` (a later call does nothing). Prints the model's lines.
  void build(const Dataset& data);
  bool built() const { return trainer_ != nullptr; }
  // Trains on `data` (its test split evaluates, or hooks.sources). The first fit applies
  // --resume; a later one trains on from the weights reached with a new schedule and data
  // position, its steps numbered on from the earlier fits' (in the records and checkpoints).
  FitResult fit(const Dataset& data, const FitHooks& hooks = {});
  // The trained model over a data set's test split, or over batches.
  EvalResult evaluate(const Dataset& data);
  EvalResult evaluate(const NextBatch& next);
  // The model's outputs for one batch (inputs in feed order; the target may be empty).
  std::vector<Tensor> predict(const Batch& batch);
  // Writes the trained model (ONNX) in `form`, with the edits the session made (a new head).
  void save(const std::string& path, ExportForm form);
  // Writes a checkpoint into --checkpoint-dir now, at the position the last fit reached.
  std::string save_checkpoint();

  // Whether fit turns SIGINT/SIGTERM into a stop after the step (its handlers are installed for
  // the fit and the previous ones restored after it).
  void set_handle_signals(bool on) { o_.handle_signals = on; }
  // Replaces the options (validated first); between fits, for what a run may change.
  void set_options(SessionOptions o);

  // After build: what the model takes and the trainer.
  const FeedSpec& feeds() const { return feeds_; }
  Trainer& trainer();
  const SessionOptions& options() const { return o_; }
  // The name messages start with: "cb-train", or "cb-train (rank R of N)" under mpirun.
  const std::string& who() const { return who_; }

 private:
  // Runs f; under mpirun a failure ends the whole job (MPI_Abort, status 1) before it is thrown
  // on, since the peers would otherwise wait in the next sum until the collective timeout.
  template <class F>
  auto ending_job_on_failure(F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (...) {
      abort_job();
      throw;
    }
  }
  void abort_job();
  int run_here();
  FitResult fit_here(const Dataset& data, const FitHooks& hooks);
  Dataset open_here(const std::string& path);
  void build_here(const Dataset& data);
  CheckpointJob checkpoint_job() const;  // this process's place in the job (under mpirun)
  // Under mpirun: every rank's own numbers for the summary (a collective: every rank calls it).
  std::vector<RunRecorder::RankNumbers> rank_numbers(const RunSummary& s);
  CheckpointMeta checkpoint_meta(const Dataset& data) const;

  SessionOptions o_;
  std::unique_ptr<MpiJob> mpi_;
  std::string who_;
  // Made by build().
  std::string model_hash_;
  ExportEdits edits_;
  std::string head_record_;
  LossSpec spec_;
  std::string loss_text_, loss_why_;
  FeedSpec feeds_;
  std::vector<std::unique_ptr<Device>> devs_;
  std::vector<std::unique_ptr<Collective>> colls_;
  std::unique_ptr<Trainer> trainer_;
  // The last fit's position and data description (save_checkpoint).
  LoopState loop_;
  std::string data_text_;
  bool resumed_ = false;  // --resume applied (by the first fit)
};

// The message for the exception being handled (call inside a catch block): "WHO: error: ..." for
// cb::Error, what to lower for std::bad_alloc, "WHO: internal error: ..." for anything else.
std::string failure_message(const std::string& who);

}  // namespace cb
