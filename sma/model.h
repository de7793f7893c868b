// What the trainer and its learners know about a model: the training graph and which inputs take
// the images and the labels, the flat layout of the parameters and of the BatchNorm running
// statistics, feeding one batch to an executor, reading the loss, and evaluating a (parameters,
// state) pair of flat buffers on a test set.
//
// Flat layout: every f32 tensor at a 64-byte-aligned element offset (kAlignElems) with zero
// padding between them, which every optimizer leaves at zero (zero gradient, zero parameter).
// One replica is [P] parameters (gradients and optimizer state alike) and [S] state; k replicas
// are [k][P] and [k][S], row r at r * P (P and S are multiples of kAlignElems).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "autodiff/autodiff.h"
#include "runtime/data/dataset.h"
#include "runtime/data/pipeline.h"
#include "runtime/device.h"
#include "runtime/executor.h"

namespace cb {

struct EvalResult {
  int64_t count = 0, correct = 0;
  double loss = 0;       // mean over the examples
  double accuracy = -1;  // correct / count; -1 when the model has no [N,C] output to score
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
  Tensor images, target;
};

// The data input of a model trained with `loss` (the one TrainModel feeds images to).
ModelInput model_input(const Graph& forward, const LossSpec& loss);
ModelInput model_input_of(const Value& v);

class TrainModel {
 public:
  // Throws cb::Error when the model cannot be trained on labelled images (which it says).
  TrainModel(const Graph& forward, const LossSpec& loss);

  const TrainingGraph& training_graph() const { return tg_; }
  const Graph& eval_graph() const { return eval_graph_; }
  const std::vector<FlatSlot>& param_slots() const { return params_; }
  const std::vector<FlatSlot>& state_slots() const { return state_; }
  int64_t flat_elems() const { return flat_elems_; }    // P: one replica's row, with padding
  int64_t state_elems() const { return state_elems_; }  // S
  int64_t param_count() const { return param_elems_; }  // without padding
  int64_t num_classes() const { return classes_; }      // C of the [N,C] output, 0 if none

  // Bytes of a device buffer of `elems` floats (never 0: empty models still get a buffer).
  static size_t buffer_bytes(int64_t elems);
  // The model's initial parameters into a [P] row and BN statistics into a [S] row.
  void upload_initial(Device& dev, void* params, void* state) const;
  // Device memory of the values bound outside the executor's arena.
  std::unordered_map<ValueId, void*> train_bindings(void* params, void* grads, void* state) const;
  std::unordered_map<ValueId, void*> eval_bindings(const void* params, const void* state) const;
  // The training-graph values train_bindings() binds (for planning without buffers).
  std::vector<ValueId> bound_values() const;
  // Identity launches copying each BN state update into its state slot after a training step.
  std::vector<KernelArgs> state_copies(const Executor& train) const;

  // Throws cb::Error when a label of `set` is not a class of the model's output.
  void check_labels(const Examples& set, const std::string& what) const;
  // The input the images are fed to.
  ModelInput data_input() const;
  // Feeds a batch to an executor of the training graph (train) or of the eval graph.
  void feed(Executor& ex, bool train, const Tensor& images, const Tensor& labels,
            InputStaging& st) const;
  // The loss of the last run of a training-graph executor.
  double read_loss(Device& dev, const Executor& train) const;

  // Host copies of the slots of one flat f32 buffer, by value name.
  std::map<std::string, Tensor> copy_slots(Device& dev, const std::vector<FlatSlot>& slots,
                                           const void* base) const;

 private:
  TrainingGraph tg_;
  Graph eval_graph_;
  int64_t classes_ = 0;
  size_t image_input_ = 0;         // index among the graph inputs (same in both graphs)
  size_t target_input_ = 0;        // training graph: labels/targets input
  int64_t label_input_ = -1;       // ModelOutput: the model's own i64 [N] labels input
  int64_t eval_output_ = -1;       // eval graph output scored for accuracy ([N,C]); -1: none
  int64_t eval_loss_output_ = -1;  // ModelOutput: eval graph output holding the loss
  std::vector<FlatSlot> params_, state_;
  int64_t flat_elems_ = 0, state_elems_ = 0, param_elems_ = 0;

  friend class Evaluator;
};

// Evaluation of one (parameters [P], state [S]) pair of flat buffers: the eval graph (BN on
// running statistics, Dropout the identity) over every example of a set, one executor per batch
// size in use (the last partial batch gets its own), all bound to the same two buffers.
// Fills the next evaluation batch (images, i64 labels); false when there is none.
using NextBatch = std::function<bool(Tensor& images, Tensor& labels)>;

class Evaluator {
 public:
  Evaluator(const TrainModel& m, Device& dev, const void* params, const void* state, int64_t batch);
  EvalResult evaluate(const NextBatch& next);
  // Every eval-graph output for one batch (what evaluate() scores, before scoring).
  std::vector<Tensor> outputs(const Tensor& images, const Tensor& labels);

 private:
  Executor& executor(int64_t batch);
  const TrainModel& m_;
  Device& dev_;
  const void *params_, *state_;
  int64_t batch_;
  std::map<int64_t, std::unique_ptr<Executor>> ex_;
  InputStaging staging_;
};

}  // namespace cb
