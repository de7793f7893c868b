// The reverse-mode pass: forward graph + loss -> training graph (forward, loss, backward) in the
// IR. Each op's vjp emits the backward nodes (runtime/vjp.h); this pass walks the graph in
// reverse, sums the gradients of values used more than once, prunes what no parameter needs, and
// leaves the rest to the planner (forward values the backward reads stay alive, others die).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/graph.h"

namespace cb {

// The losses, PyTorch's definitions (mean reduction). The regression losses and
// BinaryCrossEntropy take float targets of the output's shape and average over all its elements.
enum class LossKind {
  SoftmaxCrossEntropy,  // scores with a class axis vs i64 labels (the output's shape without the
                        // class axis): torch.nn.CrossEntropyLoss, mean over the labels counted
  MeanSquaredError,     // mean (y - t)^2
  ModelOutput,          // the model computes its own scalar loss as a graph output
  L1,                   // mean |y - t|
  Huber,                // torch.nn.HuberLoss(delta): mean of d^2 / 2 (|d| < delta), else
                        // delta (|d| - delta / 2), d = y - t
  BinaryCrossEntropy,   // torch.nn.BCEWithLogitsLoss: y logits, t in [0, 1], the stable form
};
std::string_view loss_kind_name(LossKind k);

struct LossSpec {
  LossKind kind = LossKind::SoftmaxCrossEntropy;
  std::string output;  // graph output the loss reads (or is); "" = the first output
  // Cross-entropy: the output's class axis; -1 = by rank: [N,C] 1, [N,T,C] 2 (sequences, as
  // models output them), [N,C,d1,...] (rank >= 4, segmentation) 1. Else in [1, rank).
  int64_t class_axis = -1;
  // Cross-entropy: labels equal to it add nothing to the loss, its gradient or the mean's count
  // (PyTorch's default -100); nullopt: every label counts.
  std::optional<int64_t> ignore_index = -100;
  double label_smoothing = 0;  // cross-entropy, in [0, 1): PyTorch's label_smoothing
  double huber_delta = 1.0;    // Huber, > 0
};
// What --loss accepts: auto | cross-entropy | mse | l1 | huber | bce | model | output:NAME.
bool is_loss_choice(const std::string& loss);
inline constexpr std::string_view kLossChoices =
    "auto, cross-entropy, mse, l1, huber, bce, model, output:NAME";

// The default for a model: a scalar float output is the model's own loss; otherwise softmax
// cross-entropy on the [N,C] float output (C >= 2). Throws cb::Error when none fits or several
// do, naming the outputs and the --loss / --output-name choices.
LossSpec detect_loss(const Graph& g);
// What cb-train and cb-inspect --train use: `loss` is one of kLossChoices (output:NAME = the
// model's own scalar loss output NAME, like `model` with --output-name NAME) and `output` an
// --output-name ("" = the one output that fits). `settings` gives class_axis, ignore_index,
// label_smoothing and huber_delta (its kind and output are ignored); they are checked here and
// class_axis is resolved. Throws cb::Error naming the outputs and the choices when the output is
// missing, ambiguous or does not fit.
LossSpec choose_loss(const Graph& g, const std::string& loss, const std::string& output,
                     const LossSpec& settings = {});

// What the output a cross-entropy loss is given holds. A classifier exported for inference
// often ends in Softmax (Paddle, Keras, TF) or LogSoftmax: the loss is then computed on the
// Softmax's input (the logits), which is exact (log-softmax of log-probabilities is the identity,
// so for LogSoftmax this is the NLL of the model's output), and the exported model keeps it.
enum class OutputForm { Logits, Probabilities, LogProbabilities };
// The form of output `out` of `g` (a (Log)Softmax over `class_axis`); *logits = the value a
// cross-entropy loss reads.
OutputForm output_form(const Graph& g, ValueId out, ValueId* logits, int64_t class_axis = 1);
// One line for the user: the loss, the output it trains on, and what it does with a final
// Softmax / LogSoftmax.
std::string describe_loss(const Graph& g, const LossSpec& spec);

// The class axis a cross-entropy loss uses on `output` of `g` (spec.class_axis resolved), or a
// cb::Error naming the output, its shape and --class-axis when it does not fit: not float, rank
// < 2, the axis out of [1, rank), or a class dim that is not static or under 2.
int64_t resolve_class_axis(const Graph& g, ValueId output, int64_t class_axis);

// The loss nodes of one graph.
struct LossNodes {
  ValueId loss = kNoValue;        // scalar, the output's dtype: the mean over the counted elements
  ValueId output = kNoValue;      // the model output scored
  ValueId loss_input = kNoValue;  // what the loss reads: `output`, or the logits under a Softmax
  ValueId target = kNoValue;      // the added graph input (kNoValue: ModelOutput)
  OutputForm form = OutputForm::Logits;
  int64_t class_axis = -1;  // cross-entropy: resolved; else -1
};
// Adds the target input (i64 labels "labels" for cross-entropy, else float "targets" of the
// output's shape and dtype; the last graph input) and the loss nodes to `g`, whose outputs it
// leaves as they are. ModelOutput adds nothing (loss = output). Throws cb::Error when the output
// does not fit the loss.
LossNodes append_loss(Graph& g, const LossSpec& spec);
// The evaluation graph: `forward` in inference mode (set_training false) with the loss appended,
// the loss (f32 scalar: the mean over the batch's counted elements) its LAST output and the
// target its last input; for ModelOutput just the forward graph in inference mode (*nodes: the
// loss output's id in both loss and output). `nodes` (optional) receives the ids in the result.
Graph build_eval_graph(const Graph& forward, const LossSpec& spec, LossNodes* nodes = nullptr);

struct TrainingGraph {
  Graph graph;
  LossSpec spec;  // the loss trained, class_axis resolved (-1 unless cross-entropy)
  LossKind loss_kind = LossKind::SoftmaxCrossEntropy;
  ValueId loss = kNoValue;        // f32 scalar
  ValueId output = kNoValue;      // the model output scored (logits / probabilities / prediction)
  ValueId loss_input = kNoValue;  // what the loss reads: `output`, or the logits under a Softmax
  OutputForm output_form = OutputForm::Logits;
  ValueId target = kNoValue;        // added graph input: labels or targets (kNoValue: ModelOutput)
  DType target_dtype = DType::I64;  // the target's (I64 labels, or the output's float type)
  Shape target_shape;               // the target's: the output's, without the class axis for CE
  std::vector<ValueId> params;      // trainable parameters, in value order
  std::vector<ValueId> grads;       // grads[i] = dloss/dparams[i]: same shape, its own buffer
  // BatchNorm running statistics: (state value, value holding its update after a step).
  std::vector<std::pair<ValueId, ValueId>> state_updates;
};

// Throws cb::Error listing every node a gradient must pass through that has no vjp.
TrainingGraph build_training_graph(const Graph& forward, const LossSpec& loss);
// How many training graphs this process has built (build_training_graph calls): the costly part
// of making a trainer, which a run does once (tests check that).
int64_t training_graphs_built();

}  // namespace cb
