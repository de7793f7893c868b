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
// cross-entropy on the [N,C] float output (C >= 2). Throws cb::Error when none fits or several
// do, naming the outputs and the --loss / --output-name choices.
LossSpec detect_loss(const Graph& g);
// What cb-train and cb-inspect --train use: `loss` is auto | cross-entropy | mse | model and
// `output` an --output-name ("" = the one output that fits). Throws cb::Error naming the
// outputs and the choices when the output is missing, ambiguous or does not fit.
LossSpec choose_loss(const Graph& g, const std::string& loss, const std::string& output);

// What the output a cross-entropy loss is given holds. A classifier exported for inference
// often ends in Softmax (Paddle, Keras, TF) or LogSoftmax: the loss is then computed on the
// Softmax's input (the logits), which is exact (log-softmax of log-probabilities is the identity,
// so for LogSoftmax this is the NLL of the model's output), and the exported model keeps it.
enum class OutputForm { Logits, Probabilities, LogProbabilities };
// The form of output `out` of `g`; *logits = the value a cross-entropy loss reads.
OutputForm output_form(const Graph& g, ValueId out, ValueId* logits);
// One line for the user: the loss, the output it trains on, and what it does with a final
// Softmax / LogSoftmax.
std::string describe_loss(const Graph& g, const LossSpec& spec);

struct TrainingGraph {
  Graph graph;
  LossKind loss_kind = LossKind::SoftmaxCrossEntropy;
  ValueId loss = kNoValue;        // f32 scalar
  ValueId output = kNoValue;      // the model output scored (logits / probabilities / prediction)
  ValueId loss_input = kNoValue;  // what the loss reads: `output`, or the logits under a Softmax
  OutputForm output_form = OutputForm::Logits;
  ValueId target = kNoValue;    // added graph input: labels or targets (kNoValue: ModelOutput)
  std::vector<ValueId> params;  // trainable parameters, in value order
  std::vector<ValueId> grads;   // grads[i] = dloss/dparams[i]: same shape, its own buffer
  // BatchNorm running statistics: (state value, value holding its update after a step).
  std::vector<std::pair<ValueId, ValueId>> state_updates;
};

// Throws cb::Error listing every node a gradient must pass through that has no vjp.
TrainingGraph build_training_graph(const Graph& forward, const LossSpec& loss);

}  // namespace cb
