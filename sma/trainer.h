// The single-learner trainer: the reference path (llm.c's train_gpt2.c in spirit) that SMA's k
// learners per device (sma/sma_trainer.h) extend and are checked against: one learner with
// alpha 0 and mu_z 0 must reproduce it bit for bit.
//
// From a forward Graph and a LossSpec (sma/model.h: the training graph, the flat layouts, feeding
// and evaluation): one flat buffer each for the parameters, their gradients and the optimizer
// state ([P] f32; every tensor at a 64-byte-aligned offset, zero padding between them), and one
// for BatchNorm running statistics ([S]). All of them are bound into the Executor (its `bound`
// map), so a step is: upload the batch, run the graph (gradients land in the flat gradient
// buffer), one SgdStep/AdamWStep launch over the whole flat buffer, and copy each BN state update
// into its state slot. Evaluation runs the forward graph in eval mode (BN on running statistics,
// Dropout the identity) bound to the same parameter and state buffers, over every test example
// (a second executor takes the last partial batch).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "autodiff/autodiff.h"
#include "runtime/data/dataset.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "sma/lr_schedule.h"
#include "sma/model.h"

namespace cb {

enum class OptimizerKind { Sgd, AdamW };

struct TrainerOptions {
  int64_t batch = 16;
  int64_t eval_batch = 0;  // 0: the training batch size
  OptimizerKind optimizer = OptimizerKind::Sgd;
  double momentum = 0.9;                          // SGD
  bool nesterov = false;                          // SGD
  double weight_decay = 0;                        // SGD: added to the gradient; AdamW: decoupled
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // AdamW
};

class Trainer {
 public:
  // Throws cb::Error when the model cannot be trained on labelled images (which it says).
  Trainer(const Graph& forward, const LossSpec& loss, Device& dev, const TrainerOptions& opts);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // One step on a batch: images f32 [batch,1,H,W] (any dims with the model input's element
  // count), labels i64 [batch]. Returns the loss. A NaN/Inf loss throws cb::Error naming the step;
  // the parameters then keep their values from before that step.
  double step(const Tensor& images, const Tensor& labels, double lr);
  // Loss and accuracy of the current parameters over every example of `set`.
  EvalResult evaluate(const ImageSet& set);
  // Throws cb::Error when a label of `set` is not a class of the model's output.
  void check_labels(const ImageSet& set, const std::string& what) const;

  // Host copies of the trained parameters and BN running statistics, by value name (for export).
  std::map<std::string, Tensor> trained_tensors() const;
  // Host copies of the last step's parameter gradients, by parameter name (golden tests).
  std::map<std::string, Tensor> gradients() const;
  // Host copy of the flat parameter buffer ([P] with padding), for tests.
  std::vector<float> flat_params() const;

  const TrainingGraph& training_graph() const { return model_.training_graph(); }
  const TrainModel& model() const { return model_; }
  int64_t steps_done() const { return steps_; }
  int64_t param_count() const { return model_.param_count(); }  // without padding
  int64_t num_classes() const { return model_.num_classes(); }  // C of the [N,C] output, 0 if none
  const TrainerOptions& options() const { return opts_; }

 private:
  Device& dev_;
  TrainerOptions opts_;
  TrainModel model_;
  DeviceBuffer param_buf_, grad_buf_, opt1_buf_, opt2_buf_, state_buf_;
  std::unique_ptr<Executor> train_ex_;
  std::unique_ptr<Evaluator> evaluator_;
  std::vector<KernelArgs> state_copies_;  // Identity launches: update -> state slot
  KernelArgs opt_args_;
  std::any opt_params_;
  InputStaging staging_;  // reused host buffers (no steady-state allocation)
  int64_t steps_ = 0;
};

// ---- the training loop ---------------------------------------------------------------------

struct RunOptions {
  int64_t epochs = 1;
  int64_t steps = 0;       // > 0: stop after this many steps (overrides epochs)
  int64_t eval_every = 0;  // > 0: evaluate every N steps (and at the end); 0: at each epoch's end
  bool shuffle = true;
  uint64_t seed = 0;
  LrSchedule schedule;
  int64_t test_limit = 0;  // > 0: evaluate on the first N test examples only
};

struct Progress {
  int64_t epoch = 0;        // 1-based epoch the last step belonged to
  int64_t step = 0;         // steps done
  double train_loss = 0;    // mean step loss since the previous report
  double lr = 0;            // rate of the last step
  double images_per_s = 0;  // training throughput since the previous report (eval excluded)
  EvalResult test;
};

struct RunSummary {
  int64_t steps = 0, images = 0;
  double seconds = 0;          // wall time of the whole run, evaluation included
  double train_seconds = 0;    // steps only
  double images_per_s = 0;     // images / train_seconds
  EvalResult test;             // the final evaluation
  std::vector<double> losses;  // every step's loss
};

// Trains on `data.train` and evaluates on `data.test`, calling `on_eval` after each evaluation.
RunSummary run_training(Trainer& t, const Dataset& data, const RunOptions& opts,
                        const std::function<void(const Progress&)>& on_eval = {});

}  // namespace cb
