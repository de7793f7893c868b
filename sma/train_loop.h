// The one training loop, for every configuration (one learner or many, one device or many):
// data assignment, learning-rate schedule and resets, the auto-tuner, periodic evaluation, a
// target accuracy, progress reports. Its whole position lives in a LoopState, so that a run can
// stop and continue: TrainState = the trainer's ModelState + the LoopState (a checkpoint is its
// serialisation).
//
// Data: the transforms are matched to the model's input (runtime/data/transforms.h plan_transforms,
// before anything else); one seeded per-epoch order of batches (BatchOrder: shuffled per epoch,
// last partial batch dropped) made ahead by a BatchPipeline's worker threads; at each step global
// learner g of K takes the next batch in learner order, so learner j takes every K-th batch and
// the K learners together see each example once per epoch (each process draws the same order and
// reads and decodes only its own learners' batches). The time the step waits for its batches is the
// data wait (reported in Progress, EvalReport and RunSummary). Each evaluation is one pass of its
// own pipeline (under MPI each process scores every P-th batch and the scores are merged over the
// job). Positions are counted in batches (one learner's steps): an epoch is
// batches_per_epoch batches whatever K, and the schedule is evaluated at the batch position of the
// step (warm-up and cosine in batches too), so epoch-based schedules mean the same with any number
// of learners. When a step/multistep schedule drops the rate, every replica is reset to z.
//
// Auto-tuner: after each change of the learners, `warmup_steps` unmeasured steps, then windows
// of `window_steps` steps whose images/s (training time only, summed over processes) go to
// AutoTuner one by one; once it has all of a number's windows, its decision is applied at once
// (set_learners) and reported through on_tune. Every
// rank sees the same measurements and memory verdict (agreed over the collective), so every rank
// takes the same decision.
#pragma once

#include <functional>
#include <optional>

#include "runtime/data/feed.h"
#include "sma/auto_tuner.h"
#include "sma/lr_schedule.h"
#include "sma/trainer.h"

namespace cb {

struct RunOptions {
  int64_t epochs = 1;
  int64_t steps = 0;  // > 0: stop after this many steps (overrides epochs)
  // The number a fresh run's steps count from: 0, or (a session's later fit) the steps its earlier
  // fits did, so that the steps logged and the checkpoints written continue their numbering.
  // `steps`, `eval_every` and the progress count the run's own steps after it; a resumed run
  // (LoopState::started) keeps the numbering of the run it resumes.
  int64_t first_step = 0;
  int64_t eval_every = 0;   // > 0: evaluate every N steps (and at the end); 0: see below
  int evals_per_epoch = 1;  // eval_every 0: evaluate each time another 1/N epoch is done
  bool shuffle = true;
  uint64_t seed = 0;  // data order and augmentation
  TransformOptions transforms;
  std::string target = "y";  // tensor data: the array that feeds the loss's target (--target)
  int workers = 0;  // data pipeline threads; 0: the cores the learners leave free, at least 1
  LrSchedule schedule;
  int64_t test_limit = 0;  // > 0: evaluate on the first N test examples only
  bool auto_tune = false;  // --learners auto
  TunerOptions tuner;
  double target_accuracy = 0;  // > 0: evaluate z and stop once its test accuracy reaches this
  // > 0 (a trainer with TrainerOptions::ema): the weight average's time constant in epochs; its
  // decay per step, 1 - K / (ema_epochs x batches per epoch), is set whenever K changes. For a
  // stream of unknown length the trainer's decay stays.
  double ema_epochs = 0;
  bool eval_unaveraged = false;  // with an average: evaluate the weights it averages too
  double progress_interval_s = 0.5;

  // Throws cb::Error naming the setting by its cb-train flag (train() calls it too).
  void validate() const;
};

// The weight average's decay per step for a time constant of `epochs` epochs of `batches`
// batches, with K learners (K batches a step): 1 - K / (epochs x batches), in (0, 1).
double ema_decay_for(double epochs, int64_t batches, int K);

struct Progress {
  double epoch = 0;         // batches consumed / batches per epoch
  int64_t step = 0;         // steps done
  double images_per_s = 0;  // training throughput since the previous report
  double loss = 0;          // mean learner loss since the previous report
  double lr = 0;
  int learners = 0;      // in all
  double eta_s = -1;     // training time left at this throughput (evaluation excluded)
  double data_wait = 0;  // share of the time since the previous report spent waiting for data
};

struct EvalReport {
  double time_s = 0;  // since the start of the run
  double epoch = 0;
  int64_t step = 0;
  double train_loss = 0;  // mean learner loss since the previous evaluation
  double lr = 0;
  double images_per_s = 0;  // since the previous evaluation
  int learners = 0;
  double data_wait_s = 0;                // waiting for training data since the previous evaluation
  double spread = 0;                     // Trainer::spread() at this evaluation
  EvalResult test;                       // of the model (with --ema, the weight average)
  std::optional<EvalResult> unaveraged;  // with --ema: of the weights it averages
};

struct RunSummary {
  int64_t steps = 0, images = 0;  // steps: in all (a resumed run counts from its start)
  double epochs = 0;
  double seconds = 0, train_seconds = 0, images_per_s = 0;  // this call's
  double data_wait_s = 0;  // this call's time waiting for training batches
  // Training examples this process's pipeline made (read and decoded) in this call: under MPI,
  // its own learners' only (0 for a caller's stream).
  int64_t examples_made = 0;
  // Test examples this process's evaluations made in this call: under MPI each process scores
  // every P-th batch of a pass (the scores are merged), so about 1/P of them.
  int64_t test_examples_made = 0;
  int learners = 0;  // at the end
  EvalResult test;   // the last evaluation
  bool reached_target = false;
  double target_seconds = 0, target_epoch = 0;  // when the target accuracy was first reached
  int64_t target_step = 0;
  std::vector<double> losses;  // this call's steps' mean learner loss
  bool stopped = false;        // after_step asked to stop before the end
};

struct LoopState;

struct Callbacks {
  std::function<void(const Progress&)> on_progress;
  std::function<void(const EvalReport&)> on_eval;
  std::function<void(const TunerDecision&, const TrainMemory&)> on_tune;
  std::function<void(int64_t step, double lr)> on_reset;  // replicas reset to z at a rate drop
  // Files skipped (not images, or failing to decode) that were not reported yet: at the start and
  // after each evaluation; `total` counts all of them so far.
  std::function<void(const std::vector<SkipLog::Entry>& fresh, int64_t total)> on_skipped;
  // After every step but the last, with the loop's position (a checkpoint is capture(t, loop));
  // true stops the run there (RunSummary::stopped), resumable from that position.
  std::function<bool(const LoopState& loop)> after_step;
};

// Where the loop is: everything besides the model that a run needs to continue.
struct LoopState {
  bool started = false;
  int64_t step = 0;      // steps done
  int64_t consumed = 0;  // batches drawn from the data order (the data position of every learner)
  int64_t decays = 0;    // learning-rate drops so far
  double prev_lr = -1;
  std::optional<AutoTuner> tuner;
  int64_t since_change = 0;  // tuner: steps since the last change of the learners
  double tune_s = 0;
  int64_t tune_images = 0;
};

struct TrainState {
  ModelState model;
  LoopState loop;
};

// Training batches the caller makes, instead of a data set's seeded order: passes (epochs) of
// batches of exactly the trainer's batch size, already in the model's feed order. The loop draws
// them as one sequence (a step may take its batches from two passes) and stops after
// RunOptions::epochs passes (or steps); a resumed run skips the batches its position has
// consumed. next() may block; the time it takes is the data wait.
struct BatchStream {
  std::function<void()> start;       // begins a pass
  std::function<bool(Batch&)> next;  // the pass's next batch; false at its end
  int64_t batches_per_pass = 0;      // when known (> 0): epochs, schedules, progress by it
};

// Where the loop's batches come from when they are not data.train's: a stream, and evaluation
// other than a pass over data.test (a stream of evaluation batches, say).
struct LoopSources {
  BatchStream* train = nullptr;
  std::function<EvalResult()> evaluate;  // empty: data.test, or no evaluation without one
};

// Trains on `data.train` (or sources->train) and evaluates on `data.test` (or
// sources->evaluate; with neither, evaluations are skipped and their reports hold no test
// scores). With `loop`, continues from it (a fresh LoopState starts a run) and leaves it at the
// position reached, so that a later call (on this trainer, or on one restored from the same
// TrainState) continues the run.
RunSummary train(Trainer& t, const Dataset& data, const RunOptions& o, const Callbacks& cb = {},
                 LoopState* loop = nullptr, const LoopSources* sources = nullptr);

TrainState capture(const Trainer& t, const LoopState& loop);
// Restores the model into `t` and returns the loop position to pass to train().
LoopState restore(Trainer& t, const TrainState& s);

}  // namespace cb
