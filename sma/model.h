// What the trainer and its learners know about a model: the training graph and what its inputs
// take from the data (a FeedSpec, runtime/data/feed.h), the flat layout of the parameters and of
// the BatchNorm running statistics, feeding one batch to an executor, reading the loss, and
// evaluating a (parameters, state) pair of flat buffers on a test set.
//
// Flat layout: every f32 tensor at a 64-byte-aligned element offset (kAlignElems) with zero
// padding between them, which every optimizer leaves at zero (zero gradient, zero parameter).
// One replica is [P] parameters (gradients and optimizer state alike) and [S] state; k replicas
// are [k][P] and [k][S], row r at r * P (P and S are multiples of kAlignElems).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "autodiff/autodiff.h"
#include "runtime/data/dataset.h"
#include "runtime/data/feed.h"
#include "runtime/data/pipeline.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/passes.h"
#include "sma/metrics.h"

namespace cb {

// An evaluation pass: the loss, and the metrics that fit it (sma/metrics.h).
struct EvalResult {
  int64_t count = 0;    // examples
  int64_t counted = 0;  // elements scored: labels (one per example for [N,C]; tokens, pixels),
                        // or target values (regression)
  int64_t correct = 0;
  double loss = 0;       // mean over the counted elements (the loss's own reduction)
  double accuracy = -1;  // top-1 (classes), or of (logit > 0) for bce; -1 when nothing to score
  std::optional<double> top5;     // top-5 accuracy, with 100 classes or more
  std::optional<double> mae, r2;  // regression: mean absolute error, coefficient of determination
};

// One tensor's place in a flat buffer.
struct FlatSlot {
  ValueId value;
  int64_t offset;  // in elements of the flat buffer
  int64_t numel;
};

constexpr int64_t kAlignElems = 64 / sizeof(float);

// Host buffers one executor's inputs are staged in (reused: no steady-state allocation).
struct InputStaging {
  std::vector<Tensor> inputs;
  Tensor target;
};

// What a model trained with `loss` takes from the data (its inputs and the loss's target),
// without building the training graph: what the session matches the data to before anything is
// built. Throws cb::Error when an input cannot be fed (no batch axis).
FeedSpec feed_spec(const Graph& forward, const LossSpec& loss);
ModelInput model_input_of(const Value& v);

class TrainModel {
 public:
  // Throws cb::Error when the model cannot be trained with `loss` (which it says). `precision`
  // marks the training and evaluation graphs' convolutions (set_compute_precision);
  // `blocked_layouts` (only for devices with DeviceCaps::blocked_layouts: the CPU with oneDNN)
  // applies the CPU's own forms: activations in oneDNN's layout where it can
  // (assign_blocked_layouts), MatMul through permuted operands (fold_matmul_transposes), and
  // under bf16 the products' operands stored as bf16 (assign_bf16_operands), and with
  // `conv_algorithm` Auto the training graph's Winograd convolutions where they are faster
  // (choose_conv_algorithms; the evaluation graph convolves directly, as cb-run does).
  TrainModel(const Graph& forward, const LossSpec& loss, Precision precision = Precision::F32,
             bool blocked_layouts = false, ConvAlgorithm conv_algorithm = ConvAlgorithm::Auto);

  const TrainingGraph& training_graph() const { return tg_; }
  // The forward graph in inference mode, with the loss appended (its target the last input, the
  // loss the last output) unless the model computes its own.
  const Graph& eval_graph() const { return eval_graph_; }
  const FeedSpec& feed_spec() const { return feeds_; }
  // Training-graph nodes (Conv and ConvGrad) that compute in bf16.
  int64_t bf16_nodes() const { return bf16_nodes_; }
  // The training graph's activations kept in the blocked layout, and the reorders that needs.
  const LayoutStats& layouts() const { return layouts_; }
  // The training graph's row-major activations stored as bf16 because only bf16 products read
  // them (assign_bf16_operands).
  int64_t bf16_operands() const { return bf16_operands_; }
  // Training-graph nodes (Conv and ConvGrad) that run Winograd's algorithm, and all of them.
  int64_t winograd_nodes() const { return winograd_nodes_; }
  int64_t conv_nodes() const { return conv_nodes_; }
  const std::vector<FlatSlot>& param_slots() const { return params_; }
  const std::vector<FlatSlot>& state_slots() const { return state_; }
  int64_t flat_elems() const { return flat_elems_; }    // P: one replica's row, with padding
  int64_t state_elems() const { return state_elems_; }  // S
  int64_t param_count() const { return param_elems_; }  // without padding
  int64_t num_classes() const { return classes_; }      // classes of the scored output, 0 if none

  // Bytes of a device buffer of `elems` floats (never 0: empty models still get a buffer).
  static size_t buffer_bytes(int64_t elems);
  // The model's initial parameters into a [P] row and BN statistics into a [S] row.
  void upload_initial(Device& dev, void* params, void* state) const;
  // Drops the graphs' copies of the initial parameters and BN statistics (a model's size of
  // host memory) once flat buffers hold them; upload_initial() cannot run after this.
  void release_initial();
  // A slot's tensor dims (its value's static shape).
  std::vector<int64_t> slot_dims(const FlatSlot& s) const;
  // Device memory of the values bound outside the executor's arena.
  std::unordered_map<ValueId, void*> train_bindings(void* params, void* grads, void* state) const;
  std::unordered_map<ValueId, void*> eval_bindings(const void* params, const void* state) const;
  // The training-graph values train_bindings() binds (for planning without buffers).
  std::vector<ValueId> bound_values() const;
  // Identity launches copying each BN state update into its state slot after a training step.
  std::vector<KernelArgs> state_copies(const Executor& train) const;

  // Feeds a batch to an executor of the training graph (train) or of the eval graph: each input
  // (reshaped to the model's dims when the data has them flat, with the same number of values),
  // and the target (class labels become one-hot rows for an mse over [N,C]; an evaluation batch
  // without one, a prediction, feeds zeros). Returns the target as fed (null when the graph takes
  // none, or none was given). Throws cb::Error for a class label out of range.
  const Tensor* feed(Executor& ex, bool train, const Batch& b, InputStaging& st) const;
  // The loss of the last run of a training-graph executor.
  double read_loss(Device& dev, const Executor& train) const;

  // Host copies of the slots of one flat f32 buffer, by value name.
  std::map<std::string, Tensor> copy_slots(Device& dev, const std::vector<FlatSlot>& slots,
                                           const void* base) const;

 private:
  TrainingGraph tg_;
  Graph eval_graph_;
  FeedSpec feeds_;
  int64_t bf16_nodes_ = 0;
  LayoutStats layouts_;
  int64_t bf16_operands_ = 0;
  int64_t winograd_nodes_ = 0, conv_nodes_ = 0;
  int64_t classes_ = 0;
  size_t forward_outputs_ = 0;      // the eval graph's first outputs are the forward graph's
  int64_t target_input_ = -1;       // training graph input of the target (-1: none)
  int64_t eval_target_input_ = -1;  // eval graph input of the target (-1: none)
  int64_t label_input_ = -1;        // ModelOutput: the model's own i64 [N] labels input
  int64_t eval_output_ = -1;        // eval graph output scored (the loss's output); -1: none
  int64_t eval_loss_output_ = -1;   // eval graph output holding the loss
  std::vector<FlatSlot> params_, state_;
  bool initial_released_ = false;
  int64_t flat_elems_ = 0, state_elems_ = 0, param_elems_ = 0;

  friend class Evaluator;
};

// Evaluation of one (parameters [P], state [S]) pair of flat buffers: the eval graph (BN on
// running statistics, Dropout the identity) over every example of a set, one executor per batch
// size in use (the last partial batch gets its own), all bound to the same two buffers.
// Fills the next evaluation batch; false when there is none.
using NextBatch = std::function<bool(Batch& batch)>;

// What an evaluation pass (or a part of one) scored, before the metrics are computed: parts
// scored by several processes merge into the whole pass's score.
struct EvalScore {
  int64_t count = 0;          // examples
  double own_loss_sum = 0;    // a model's own loss: sum of batch loss x batch examples
  int64_t label_correct = 0;  // classifier outputs against labels the metrics do not score
  bool labels_scored = false;
  MetricSums sums;  // the metrics' sums (not a model's own loss)
  void merge(const EvalScore& o);
  // As doubles (every count exact below 2^53), for an agreement over the job.
  static constexpr size_t kPacked = 17;
  std::vector<double> pack() const;
  static EvalScore unpack(std::span<const double> v);
};

class Evaluator {
 public:
  // With a loan (a training executor's arena, lent between steps), every executor whose plan fits
  // it runs there instead of in an arena of its own.
  Evaluator(const TrainModel& m, Device& dev, const void* params, const void* state, int64_t batch,
            ArenaLoan loan = {});
  // Scores the batches `next` gives (a pass, or this process's part of one); result() turns a
  // score (merged over processes, or not) into the metrics.
  EvalScore score(const NextBatch& next);
  EvalResult result(const EvalScore& s) const;
  // The model's outputs for one batch (the forward graph's, not the loss).
  std::vector<Tensor> outputs(const Batch& b);
  // Bytes of the arenas its executors allocated for themselves (those the loan did not fit).
  size_t own_arena_bytes() const;

 private:
  Executor& executor(int64_t batch);
  const TrainModel& m_;
  Device& dev_;
  const void *params_, *state_;
  int64_t batch_;
  ArenaLoan loan_;
  std::map<int64_t, std::unique_ptr<Executor>> ex_;
  InputStaging staging_;
};

}  // namespace cb
