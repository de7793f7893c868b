// SMA's training loop: data assignment, learning-rate schedule and resets, the auto-tuner,
// periodic evaluation of z, a target accuracy, progress reports.
//
// Data: one seeded per-epoch order of batches (runtime/data BatchIterator: shuffled per epoch,
// last partial batch dropped); at each step global learner g of K takes the next batch in learner
// order, so learner j takes every K-th batch and the K learners together see each example once
// per epoch. Positions are counted in batches (one learner's steps): an epoch is
// batches_per_epoch batches whatever K, and the schedule is evaluated at the batch position of
// the step (warm-up and cosine in batches too), so epoch-based schedules mean the same with any
// number of learners. When a step/multistep schedule drops the rate, every replica is reset to z.
//
// Auto-tuner (auto_tune): after each change of the learners, `warmup_steps` unmeasured steps,
// then a window of `window_steps` steps whose images/s (training time only) goes to AutoTuner;
// its decision is applied at once (set_learners) and reported through on_tune.
#pragma once

#include <functional>

#include "sma/auto_tuner.h"
#include "sma/sma_trainer.h"

namespace cb {

struct SmaRunOptions {
  RunOptions run;          // epochs, steps, eval_every (steps), shuffle, seed, schedule, ...
  bool auto_tune = false;  // --learners auto
  TunerOptions tuner;
  double target_accuracy = 0;  // > 0: evaluate z and stop once its test accuracy reaches this
  double progress_interval_s = 0.5;
};

struct SmaProgress {
  double epoch = 0;         // batches consumed / batches per epoch
  int64_t step = 0;         // steps done
  double images_per_s = 0;  // training throughput since the previous report
  double loss = 0;          // mean learner loss since the previous report
  double lr = 0;
  int learners = 0;   // in all
  double eta_s = -1;  // training time left at this throughput (evaluation excluded)
};

struct SmaEvalReport {
  double time_s = 0;  // since the start of the run
  double epoch = 0;
  int64_t step = 0;
  double train_loss = 0;  // mean learner loss since the previous evaluation
  double lr = 0;
  double images_per_s = 0;  // since the previous evaluation
  int learners = 0;
  EvalResult test;
};

struct SmaRunSummary {
  int64_t steps = 0, images = 0;
  double epochs = 0;
  double seconds = 0, train_seconds = 0, images_per_s = 0;
  int learners = 0;  // at the end
  EvalResult test;   // the last evaluation
  bool reached_target = false;
  double target_seconds = 0, target_epoch = 0;  // when the target accuracy was first reached
  int64_t target_step = 0;
  std::vector<double> losses;  // each step's mean learner loss
};

struct SmaCallbacks {
  std::function<void(const SmaProgress&)> on_progress;
  std::function<void(const SmaEvalReport&)> on_eval;
  std::function<void(const TunerDecision&, const SmaMemory&)> on_tune;
  std::function<void(int64_t step, double lr)> on_reset;  // replicas reset to z at a rate drop
};

SmaRunSummary run_sma_training(SmaTrainer& t, const Dataset& data, const SmaRunOptions& o,
                               const SmaCallbacks& cb = {});

}  // namespace cb
