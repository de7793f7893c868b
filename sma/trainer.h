// The one trainer: k learners per device, held together by synchronous model averaging (the
// CROSSBOW paper's Algorithm 1, Koliousis et al., VLDB 2019). One learner is SMA with k = 1;
// with alpha 0 and mu_z 0 it is torch.optim.SGD (or AdamW) bit for bit.
//
// k learners per device, K in all (every device of every process has the same k), replica
// theta_j, velocity v_j, central model z (one identical copy per device), the learning rate lr
// the user gives (one learner's, at its batch size), weight decay lambda, learner momentum mu,
// central momentum mu_z. From K, unless set, recomputed whenever K changes:
//
//   alpha = min(2 / K, 1/2), 0 for K = 1 (the pull; --alpha sets it)
//   gamma = lr x s(K), s(K) = min(sqrt(K), 64 / sqrt(K))  (the learners' rate; --lr-scaling)
//
// chosen by tools/bench/sma_epochs.py and sma_scale.py (docs/sma.md: "SMA against large-batch
// SGD"): sqrt(K) up to K = 64 (8x), then less, as alpha's weaker pull lets the learners drift apart
// (measured at K = 256: 16x and 8x lose to 4x and 2x): one learner alone is
// plain SGD (PyTorch's), and z starts as the learners' average when a second learner arrives.
// One step of the paper's rule (--sma-rule paper):
//
//   g_j   = grad loss(theta_j; batch_j) + lambda theta_j
//   v_j   = mu v_j + g_j                   (first step of a learner: v_j = g_j)
//   c_j   = alpha (theta_j - z)            (theta_j before this step)
//   theta_j <- theta_j - gamma v_j - c_j
//   z     <- z + sum_j c_j + mu_z (z - z_prev)   (= v_z <- sum_j c_j + mu_z v_z; z <- z + v_z)
//
// and every replica is reset to z when a step schedule drops the rate. The velocity takes
// PyTorch's form (no gamma inside v, first step v = g), exactly torch.optim.SGD's. With AdamW the
// learner's step is torch.optim.AdamW's (its own moments and step count; the reset to z zeroes
// them) and the pull is the same; gamma = lr x sqrt(K) under every rule (docs/sma.md: "SMA with
// AdamW"). With --clip-grad-norm each learner's g_j is first scaled to that norm where above it.
//
// The paper's z moves by K alpha (mean - z), stable only for K alpha < 2 (1 + mu_z), so its pull
// on each learner weakens as 1/K. The other central rules of the same family (--sma-rule) keep
// their pull at any K; each is the same two kernels with other scalars:
//
//   elastic (EASGD's normalised centre): the learners are pulled as above with an alpha that does
//     not shrink with K (default 1/4), and z moves by eta (mean - z) + mu_z (z - z_prev), the sum
//     scaled by eta / (K alpha) (--outer-lr eta, default 1).
//   slowmo (SlowMo, Wang et al. 2020; DiLoCo's outer momentum): every tau = --sync-every steps,
//     after the learners' local steps, c_j = (theta_j - z) / K from the stepped replica,
//     z <- z + eta (mean - z) + mu_z (z - z_prev) (the outer momentum on the averaged
//     displacement), and every learner is reset to the new z, keeping its optimizer state
//     (--outer-lr eta, default 1; mu_z default 0.5).
//   post-local (post-local SGD, Lin et al. 2020): slowmo with eta 1 and no outer momentum, every
//     step (exactly synchronous SGD on the learners' mean) for the first --local-after steps, then
//     every --sync-every steps (local SGD).
//
// The reset rules need the new z before the learners' next step, so their z update is not
// overlapped. Which rule runs (TrainerOptions::rule): --sma-rule, else paper below K = 16 and
// post-local from 16, whose learners' rate is lr x min(K/4, 1024/K) (--lr-scaling auto) with the
// warm-up the session adds (sma/trainer_options.h has every default and why).
//
// Where it runs: the trainer is GIVEN its devices and one Collective endpoint per device (the
// session makes them, session/devices.h: CPU core groups with an in-process group, GPUs with
// NCCL, or one device per process with the MPI job's collective). It never makes a device. Per
// device (sma/device_replicas.h): one flat buffer each for parameters, gradients and optimizer
// state (1 or 2), [k][P] (sma/model.h), [k][S] for BatchNorm statistics, a [k] step count per
// learner, and z, [P], with z_prev and the sum of the corrections while a pull moves z and the
// learners' mean with more than one learner (the fused step reads each pre-step replica once,
// in a register: no snapshot is stored). One learner thus holds what torch.optim holds, plus z
// (the initial model: checkpoints, learners added later). Each learner has a
// persistent host thread driving its own stream of its device (CPU: a thread pool over its share of
// the device's cores) with an executor bound to its rows; each device has a driver thread on its
// synchronisation stream. A step:
//   A.  every learner's forward and backward on its stream, concurrently;
//   B1. per device (its driver): the agreement over the collective that every learner of every
//       rank succeeded (a failure anywhere stops every rank before any update, so no rank is left
//       waiting in a sum), then ONE fused SmaStep over [k][P] (every learner's update and the
//       intra-device sum of the corrections);
//   B2. per device: the cross-device sum (Collective), one SmaCentralStep, and the agreement that
//       z is finite everywhere.
// The correction uses the pre-step replica and the current z, so a learner's next phase A needs
// only B1 (its own rows), not the new z: B2 runs on the drivers while the caller starts the next
// step, and the next B1 (the first thing that reads z) waits for it. The result is bit-identical
// to running B2 before returning (overlap_sync = false, --no-overlap). A failure found in B2 (a
// non-finite z, a rank that never arrives) is thrown by the next call that needs the drivers,
// before anything of that call is updated. With --sync-every N the correction (and B2) happens
// every N-th step only; local steps in between.
//
// Choices the algorithm leaves open:
//   - Evaluation and export use z, with BatchNorm running statistics averaged over all learners.
//     With alpha = 0 z never moves, so evaluation uses the learners' average instead (one learner:
//     the replica itself).
//   - reset_to_central() (when the learning rate drops): every replica <- z, optimizer state and
//     step counts zeroed; z and z_prev kept. With alpha 0 there is nothing to reset to.
//   - New learners (set_learners) start from z with zero optimizer state and the averaged BN
//     statistics. Coming from alpha 0 (one learner), z is first set to the learners' average.
//   - Evaluation runs on device 0's synchronisation stream, in learner 0's arena (idle between
//     steps) when its forward-only plan fits there (an evaluation batch far above the training
//     batch gets an arena of its own).
//   - The weight average (--ema d, timm's ModelEma): e <- d e + (1 - d) m after every update of
//     the model m that evaluation uses, BatchNorm statistics included (as timm averages every
//     float tensor of the state): with a pull, e follows z, updated inside SmaCentralStep (no
//     extra pass; with --sync-every N, every N-th step, when z moves); with alpha 0, e follows
//     the learners' mean (folded into SmaStep's pass over the rows), and the statistics always do,
//     through SmaRowEma over the rows before the learners may write them again. Until step
//     --ema-start the decay is 0 (e is a copy of m). Per device, e of z is the same on every
//     device; the averages of means are each device's share (its rows' sum / K), added over the
//     devices when evaluated, so no collective runs per step. Evaluation and export use e;
//     evaluate(next, EvalWeights::Unaveraged) gives m's. The decay warms up as TensorFlow's
//     ExponentialMovingAverage with num_updates does: min(d, (1 + n) / (10 + n)) at the n-th update
//     since the start, so that a short run's average is not its initial model.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/collective.h"
#include "runtime/data/dataset.h"
#include "runtime/device.h"
#include "runtime/ops/params.h"
#include "sma/model.h"
#include "sma/model_state.h"
#include "sma/trainer_options.h"

namespace cb {

struct DeviceReplicas;

// Where the trainer runs: this process's devices and, for each, its endpoint of the job's
// collective (collectives[d]->size() = devices in the whole job; ranks = devices).
struct Placement {
  std::vector<Device*> devices;
  std::vector<Collective*> collectives;
};

// What the memory plan says one device holds.
struct TrainMemory {
  int64_t arena = 0;          // one replica's activation arena (the plan's bytes_peak)
  int64_t per_replica = 0;    // arena + the flat [P] buffers + BN state [S]
  int64_t fixed = 0;          // what the learners share at the current count
                              // (Trainer::shared_bytes; Trainer::need(k) for k learners)
  int64_t budget = 0;         // bytes the learners of one device may use
  std::string budget_source;  // where budget comes from: "--memory-budget", or the device's
                              // memory_source (the container's limit when that is smaller)
};
// Bytes as the trainer's messages and the session's lines print them: "12.3 MiB".
std::string mib(int64_t bytes);

// Which weights an evaluation uses: the model's (the weight average with --ema, else z or the
// learners' mean), or, with --ema, those the average is of.
enum class EvalWeights { Model, Unaveraged };

// Where a step's time went (wall time of the calling thread): phase A is every learner's forward
// and backward, phase B what the step then waited for on the drivers (the fused update, and the
// z update where it is not overlapped or still running when the next step needs the drivers).
struct StepTiming {
  double phase_a_s = 0, phase_b_s = 0;
  int64_t steps = 0;
  double phase_b_share() const {
    return phase_a_s + phase_b_s > 0 ? phase_b_s / (phase_a_s + phase_b_s) : 0;
  }
};

class Trainer {
 public:
  // Throws cb::Error when the model cannot be trained or a setting is out of range.
  Trainer(const Graph& forward, const LossSpec& loss, const TrainerOptions& opts, Placement where);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // One step: batches[l] is local learner l's (device-major: device d's learner j is
  // d * learners_per_device() + j); size local_learners(). Returns each local learner's loss. A
  // NaN/Inf loss or an error on any learner of any rank throws cb::Error (naming the step and the
  // learner) on every rank before anything is updated; a non-finite z throws naming the step and
  // the learners whose replicas went non-finite (with overlap_sync: from the next call that needs
  // the z update, naming the step that made it).
  std::vector<double> step(const std::vector<Batch>& batches, double lr);
  // The mean loss of all K learners (every process's, agreed) at the last step().
  double job_loss() const { return job_loss_; }
  // One learner in all: its step on a model with one data input and a target.
  double step(const Tensor& input, const Tensor& target, double lr);
  // Sets the learners per device (same on every device): the first min(old, new) keep their
  // replica, optimizer state and statistics, new ones start from z; alpha is recomputed. Throws
  // cb::Error naming the bytes when they do not fit the memory budget.
  void set_learners(int per_device);
  // Every replica <- z, optimizer state zeroed. With alpha 0 there is no central model to reset
  // to: does nothing and returns false.
  bool reset_to_central();

  // z (or, with alpha 0, the learners' average) with the averaged BN statistics, over the batches
  // `next` gives (an evaluation pass of runtime/data/pipeline.h), or over an in-memory image set.
  // With `part`, `next` gives this process's share of the pass only (eval_share()): the processes'
  // scores are merged over the job, so every process returns the whole pass's result.
  EvalResult evaluate(const NextBatch& next, EvalWeights w = EvalWeights::Model, bool part = false);
  // This process's index among the job's processes, and their number ({0, 1} in one process).
  std::pair<int, int> eval_share() const;
  EvalResult evaluate(const ImageSet& set);
  bool averages() const { return opts_.ema.has_value(); }  // --ema
  // The average's decay from now on (in (0, 1); a trainer made with TrainerOptions::ema).
  void set_ema_decay(double d);
  // The eval graph's outputs for one batch, from the model evaluation uses (z, or the learners'
  // average with alpha 0, and the averaged BN statistics): what an exported model computes.
  // Every output of the model (not the loss evaluation appends), in the forward graph's order.
  std::vector<Tensor> eval_outputs(const Batch& batch);
  std::vector<Tensor> eval_outputs(const Tensor& input, const Tensor& target) {
    return eval_outputs(Batch{{input}, target});
  }
  // The same model, host copies by value name (for export).
  std::map<std::string, Tensor> trained_tensors();

  // The whole model state (host copies) and its restoration (same model, options and placement
  // shape; the learners per device are set from the state). restore() then step() continues bit
  // for bit as the run the state was taken from.
  ModelState state() const;
  void restore(const ModelState& s);

  // A stop asked by this process (a signal): carried by the next step's agreement, after which
  // stop_agreed() is true on every rank, so that all of them stop after the same step.
  void request_stop() { stop_requested_ = true; }
  bool stop_agreed() const { return stop_agreed_; }
  // A checkpoint asked by this process (its clock says one is due), carried the same way: after
  // the next step checkpoint_agreed() is true on every rank (for that step only).
  void request_checkpoint() { checkpoint_requested_ = true; }
  bool checkpoint_agreed() const { return checkpoint_agreed_; }

  // Values agreed over the job's collective, one contribution per process (same result in every
  // process): the loop's global decisions (the tuner's measurements, the memory check).
  void agree(std::span<double> values, ReduceOp op);

  // The SMA spread: the mean over all K learners (every process's, agreed) of the L2 distance of
  // the replica from the central model (z, or with alpha 0 the learners' average, as evaluation
  // uses). 0 with one learner. Reads every replica back (evaluation time, not every step); every
  // process must call it at the same point.
  double spread();

  // Host copies for tests: device d's z, local learner l's rows, learner 0's gradients.
  std::vector<float> central(int device = 0) const;
  std::vector<float> replica(int learner) const;
  std::vector<float> velocity(int learner) const;
  std::map<std::string, Tensor> gradients(int learner = 0) const;
  std::vector<float> flat_params(int learner = 0) const { return replica(learner); }

  const TrainModel& model() const { return model_; }
  const TrainingGraph& training_graph() const { return model_.training_graph(); }
  int64_t param_count() const { return model_.param_count(); }
  const TrainerOptions& options() const { return opts_; }
  int devices() const { return static_cast<int>(groups_.size()); }  // this process's
  const Device& device(int d) const;
  int ranks() const;  // devices in the whole job
  int learners_per_device() const { return k_; }
  int local_learners() const { return k_ * devices(); }
  int total_learners() const { return k_ * ranks(); }  // K
  int global_learner(int local) const;                 // its index among all K
  double alpha() const { return alpha_; }
  SmaRule rule() const { return opts_.rule(total_learners()); }
  double alpha_for(int per_device) const {
    const int K = per_device * ranks();
    const SmaRule r = opts_.rule(K);
    return resets_learners(r) ? default_alpha(K, r) : opts_.alpha.value_or(default_alpha(K, r));
  }
  // SmaCentralStep's multiplier of the corrections' sum at the current K (1 for the paper's rule).
  double central_scale() const;
  // gamma / lr: what step() multiplies the given learning rate by at the current K.
  double lr_factor() const {
    return lr_scale(opts_.lr_scaling, total_learners(), rule(), opts_.optimizer);
  }
  int64_t steps_done() const { return steps_; }
  const TrainMemory& memory() const { return mem_; }
  // Bytes of the evaluation arenas allocated apart from the learners' (0 while every evaluation
  // plan fits learner 0's arena).
  size_t eval_own_arena_bytes() const;
  const StepTiming& timing() const { return timing_; }
  // Bytes one device holds with `per_device` learners: theirs and what they share.
  int64_t need(int per_device) const {
    return shared_bytes(per_device) + per_device * mem_.per_replica;
  }
  // What the learners of a device share: z, the BN statistics' average and the weight average;
  // z_prev and the corrections' sum while a pull moves z; the learners' mean with more than one
  // learner in the job (DeviceReplicas).
  int64_t shared_bytes(int per_device) const {
    const int64_t P4 = model_.flat_elems() * 4;
    return always_shared_ + (alpha_for(per_device) != 0 ? 2 * P4 : 0) +
           (per_device * ranks() > 1 ? P4 : 0);
  }
  bool fits(int per_device) const { return need(per_device) <= mem_.budget; }

 private:
  struct Learner;
  using Group = DeviceReplicas;
  void start_learners();
  // Waits for a z update still running on the drivers (overlap) and throws its failure.
  void settle() const;
  void average_for_eval();
  float ema_decay(int64_t step) const;  // the average's decay at step `step` (from 1)
  enum class Rows { Params, Velocity, Grads };
  std::vector<float> row(Rows which, int learner) const;
  template <class F>
  void on_drivers(F&& f);

  TrainerOptions opts_;
  TrainModel model_;
  TrainMemory mem_;
  int64_t always_shared_ = 0;  // z, the BN statistics' average, the weight average
  int k_ = 0;
  double alpha_ = 0;
  int64_t steps_ = 0;
  std::map<std::pair<const void*, const void*>, std::unique_ptr<Evaluator>> evaluators_;
  // Of the model evaluation uses (or the unaveraged one); on device 0's driver.
  Evaluator& evaluator(EvalWeights w = EvalWeights::Model);
  std::pair<const void*, const void*> eval_buffers(EvalWeights w) const;
  std::atomic<bool> stop_requested_{false};
  bool stop_agreed_ = false;
  std::atomic<bool> checkpoint_requested_{false};
  bool checkpoint_agreed_ = false;
  std::vector<std::unique_ptr<Group>> groups_;
  std::vector<std::unique_ptr<Learner>> learners_;  // local, device-major
  std::vector<double> status_;                      // step(): per device agreement results
  double job_loss_ = 0;
  StepTiming timing_;
  mutable bool pending_ = false;  // a z update was posted to the drivers and not waited for
  int64_t pending_step_ = 0;
  double pending_lr_ = 0;
};

}  // namespace cb
