// SMA: many learners per device, held together by synchronous model averaging (Algorithm 1 of the
// CROSSBOW paper, Koliousis et al., VLDB 2019).
//
// k learners per device, K in all, replica theta_j, velocity v_j, central model z (one identical
// copy per device), learning rate gamma, weight decay lambda, learner momentum mu, central
// momentum mu_z, alpha = 1/K unless set (recomputed whenever K changes). One step:
//
//   g_j   = grad loss(theta_j; batch_j) + lambda theta_j
//   v_j   = mu v_j + g_j                   (first step of a learner: v_j = g_j)
//   c_j   = alpha (theta_j - z)            (theta_j before this step: the snapshot)
//   theta_j <- theta_j - gamma v_j - c_j
//   z     <- z + sum_j c_j + mu_z (z - z_prev)
//
// ONE DELIBERATE CHANGE from the form v_j = mu v_j - gamma g_j; theta_j += v_j (the project's
// first design wrote it so):
// the velocity takes PyTorch's form (no gamma inside v, first step v = g), exactly
// torch.optim.SGD's, so that one learner with alpha = 0 and mu_z = 0 is the single-learner
// Trainer (and PyTorch's SGD) bit for bit. The two forms agree while gamma is constant; they
// differ only in how a change of gamma reaches momentum already accumulated.
//
// Layout: per device one flat buffer each for parameters, gradients, velocity and the pre-step
// snapshot, [k][P] (sma/model.h), and [k][S] for BatchNorm statistics; z, z_prev and the sum of
// the corrections are [P]. A learner's executor is bound to its rows, so a step is: every learner
// runs its graph concurrently (one persistent thread each, on its own CPU device: a thread pool
// over its own pinned cores), then per device ONE fused SmaStep over [k][P] (every learner's
// update and the intra-device sum of the c_j), the cross-device sum through a Collective, and
// one SmaCentralStep. With --sync-every N the correction (and the z update) happens every N-th
// step only; the steps between are plain local SGD (SmaStep without z).
//
// Choices the algorithm leaves open:
//   - mu_z defaults to 0.9 (the paper's setting).
//   - Evaluation and export use z, with BatchNorm running statistics averaged over all learners
//     (elementwise mean of the running means and of the running variances). With alpha = 0 z
//     never moves (nothing pulls it), so evaluation then uses the learners' average instead: with
//     one learner that is the replica itself, and `--learners 1 --alpha 0 --central-momentum 0`
//     is plain SGD end to end, output included.
//   - reset_to_central() (called when the learning rate drops to a lower step of its schedule):
//     every replica <- z, every velocity zeroed (the next step starts it at the gradient, as a
//     fresh PyTorch optimizer would); z and z_prev (the central momentum) are kept. With alpha 0
//     z is never updated, so there is nothing to reset to and the replicas are left alone.
//   - New learners (set_learners) start from z with zero velocity and the averaged BN statistics.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sma/collective.h"
#include "sma/model.h"
#include "sma/trainer.h"

namespace cb {

struct SmaOptions {
  TrainerOptions train;           // batch, eval batch, momentum, nesterov, weight decay (SGD only)
  int devices = 1;                // CPU devices: the cores split into this many groups
  std::vector<int> cores;         // cores to use; empty: all of this machine's
  int learners = 1;               // per device, to start with
  std::optional<double> alpha;    // empty: 1 / K, recomputed whenever K changes
  double central_momentum = 0.9;  // mu_z
  int64_t sync_every = 1;         // SMA correction every N steps; local SGD in between
  int64_t memory_budget = 0;      // bytes per device; 0: the device's free memory / devices
};

// One learner's batch: images f32 [batch,...], labels i64 [batch].
struct Batch {
  Tensor images, labels;
};

// What the memory plan says one device holds.
struct SmaMemory {
  int64_t arena = 0;        // one replica's activation arena (the plan's bytes_peak)
  int64_t per_replica = 0;  // arena + 4 flat [P] buffers + BN state [S]
  int64_t fixed = 0;        // z, z_prev, the sum, the average model and BN statistics
  int64_t budget = 0;       // bytes the learners of one device may use
  int64_t need(int learners) const { return fixed + learners * per_replica; }
};

class SmaTrainer {
 public:
  // Throws cb::Error when the model cannot be trained or a setting is out of range.
  SmaTrainer(const Graph& forward, const LossSpec& loss, const SmaOptions& opts);
  ~SmaTrainer();
  SmaTrainer(const SmaTrainer&) = delete;
  SmaTrainer& operator=(const SmaTrainer&) = delete;

  // One step: batches[g] is global learner g's (device-major: device d's learner j is
  // d * learners_per_device() + j); size total_learners(). Returns each learner's loss. A NaN/Inf
  // loss throws cb::Error naming the step and the learner before anything is updated; a
  // non-finite z throws naming the step and the learners whose replicas went non-finite.
  std::vector<double> step(const std::vector<Batch>& batches, double lr);
  // Sets the learners per device (same on every device): the first min(old, new) keep their
  // replica, velocity and statistics, new ones start from z; alpha is recomputed. Throws
  // cb::Error naming the bytes when they do not fit the memory budget.
  void set_learners(int per_device);
  // Every replica <- z, velocities zeroed (see the choices above). With alpha 0 there is no
  // central model to reset to: does nothing and returns false.
  bool reset_to_central();

  // z (or, with alpha 0, the learners' average) with the averaged BN statistics, over `set`.
  EvalResult evaluate(const ImageSet& set);
  // The same model, host copies by value name (for export).
  std::map<std::string, Tensor> trained_tensors();
  void check_labels(const ImageSet& set, const std::string& what) const;

  // Host copies for tests: device d's z, global learner g's rows.
  std::vector<float> central(int device = 0) const;
  std::vector<float> replica(int learner) const;
  std::vector<float> velocity(int learner) const;
  std::vector<float> snapshot(int learner) const;

  const TrainModel& model() const { return model_; }
  const SmaOptions& options() const { return opts_; }
  int devices() const { return static_cast<int>(groups_.size()); }
  int learners_per_device() const { return k_; }
  int total_learners() const { return k_ * devices(); }
  double alpha() const { return alpha_; }
  int64_t steps_done() const { return steps_; }
  const SmaMemory& memory() const { return mem_; }
  bool fits(int per_device) const { return mem_.need(per_device) <= mem_.budget; }
  // Cores of device d and of global learner g (as pinned).
  const std::vector<int>& device_cores(int d) const;
  std::vector<int> learner_cores(int learner) const;

 private:
  struct Learner;
  struct Group;
  void start_learners();
  void average_for_eval();
  Evaluator& evaluator();
  enum class Rows { Params, Velocity, Snapshot };
  std::vector<float> row(Rows which, int learner) const;

  SmaOptions opts_;
  TrainModel model_;
  SmaMemory mem_;
  int k_ = 0;
  double alpha_ = 0;
  int64_t steps_ = 0;
  std::unique_ptr<Device> eval_dev_;
  std::unique_ptr<Evaluator> eval_z_, eval_mean_;
  std::vector<std::unique_ptr<Group>> groups_;
  std::vector<std::unique_ptr<Learner>> learners_;  // global order
};

}  // namespace cb
