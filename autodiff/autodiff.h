// The reverse-mode pass: forward graph + loss -> training graph (forward, loss, backward) in the
// IR. Each op's vjp emits the backward nodes (runtime/vjp.h); this pass walks the graph in
// reverse, sums the gradients of values used more than once, prunes what no parameter needs, and
// leaves the rest to the planner (forward values the backward reads stay alive, others die).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "runtime/graph.h"

namespace cb {

enum class LossKind {
  SoftmaxCrossEntropy,  // logits [N,C] vs integer labels [N] (i64), mean over the batch
  MeanSquaredError,     // prediction vs targets of the same shape, mean over all elements
  ModelOutput,          // the model computes its own scalar loss as a graph output
};
std::string_view loss_kind_name(LossKind k);

struct LossSpec {
  LossKind kind = LossKind::SoftmaxCrossEntropy;
  std::string output;  // graph output the loss reads (or is); "" = the first output
};

// The default for a model: a scalar float output is the model's own loss; otherwise softmax
// cross-entropy on a [N,C] float output. Throws cb::Error when neither fits, saying what to pass.
LossSpec detect_loss(const Graph& g);

struct TrainingGraph {
  Graph graph;
  LossKind loss_kind = LossKind::SoftmaxCrossEntropy;
  ValueId loss = kNoValue;      // f32 scalar
  ValueId output = kNoValue;    // the model output the loss reads (logits / prediction)
  ValueId target = kNoValue;    // added graph input: labels or targets (kNoValue: ModelOutput)
  std::vector<ValueId> params;  // trainable parameters, in value order
  std::vector<ValueId> grads;   // grads[i] = dloss/dparams[i]: same shape, its own buffer
  // BatchNorm running statistics: (state value, value holding its update after a step).
  std::vector<std::pair<ValueId, ValueId>> state_updates;
};

// Throws cb::Error listing every node a gradient must pass through that has no vjp.
TrainingGraph build_training_graph(const Graph& forward, const LossSpec& loss);

}  // namespace cb
