#include "autodiff/autodiff.h"

#include <atomic>
#include <map>

#include "runtime/error.h"
#include "runtime/graph_builder.h"
#include "runtime/op_catalog.h"
#include "runtime/ops/params.h"
#include "runtime/passes.h"
#include "runtime/vjp.h"

namespace cb {

std::string_view loss_kind_name(LossKind k) {
  switch (k) {
    case LossKind::SoftmaxCrossEntropy:
      return "softmax cross-entropy";
    case LossKind::MeanSquaredError:
      return "mean squared error";
    case LossKind::ModelOutput:
      return "the model's own loss output";
    case LossKind::L1:
      return "L1 (mean absolute error)";
    case LossKind::Huber:
      return "Huber";
    case LossKind::BinaryCrossEntropy:
      return "binary cross-entropy on logits";
  }
  return "?";
}

bool is_loss_choice(const std::string& loss) {
  for (const char* c : {"auto", "cross-entropy", "mse", "l1", "huber", "bce", "model"})
    if (loss == c) return true;
  return loss.starts_with("output:") && loss.size() > 7;
}

namespace {

ValueId find_output(const Graph& g, const std::string& name) {
  if (name.empty()) return g.outputs.at(0);
  for (ValueId o : g.outputs)
    if (g.value(o).name == name) return o;
  std::string names;
  for (ValueId o : g.outputs) names += (names.empty() ? "" : ", ") + g.value(o).name;
  fail("the model has no output '{}' (outputs: {})", name, names);
}

}  // namespace

namespace {

std::string outputs_text(const Graph& g) {
  std::string outs;
  for (ValueId o : g.outputs)
    outs += fmt::format("{}'{}' {}{}", outs.empty() ? "" : ", ", g.value(o).name,
                        dtype_name(g.value(o).dtype), to_string(g.value(o).shape));
  return outs;
}
bool is_scalar_loss(const Value& v) { return dtype_is_float(v.dtype) && v.shape.empty(); }
bool is_logits(const Value& v) {
  return dtype_is_float(v.dtype) && v.shape.size() == 2 && v.shape[0] == Dim::N() &&
         v.shape[1].is_static() && v.shape[1].value >= 2;
}
// The class axis `axis` (-1: by rank) resolves to, or -1 where it is out of range.
int64_t class_axis_of(size_t rank, int64_t axis) {
  const auto r = static_cast<int64_t>(rank);
  if (axis == -1) return r == 3 ? 2 : r >= 2 ? 1 : -1;
  return axis >= 1 && axis < r ? axis : -1;
}
// Any output cross-entropy can score with the class axis `axis`.
bool fits_cross_entropy(const Value& v, int64_t axis) {
  const int64_t a = class_axis_of(v.shape.size(), axis);
  return dtype_is_float(v.dtype) && a >= 1 && v.shape[0] == Dim::N() &&
         v.shape[static_cast<size_t>(a)].is_static() && v.shape[static_cast<size_t>(a)].value >= 2;
}
bool is_prediction(const Value& v) {
  return dtype_is_float(v.dtype) && !v.shape.empty() && v.shape[0] == Dim::N();
}
template <class Fits>
std::vector<std::string> outputs_where(const Graph& g, Fits fits) {
  std::vector<std::string> out;
  for (ValueId o : g.outputs)
    if (fits(g.value(o))) out.push_back(g.value(o).name);
  return out;
}
std::string names_text(const std::vector<std::string>& names) {
  std::string list;
  for (const auto& n : names) list += fmt::format("{}'{}'", list.empty() ? "" : ", ", n);
  return list.empty() ? "none" : list;
}
// The one output among `names`, or an error naming them.
std::string the_one(const Graph& g, const std::vector<std::string>& names, std::string_view what,
                    std::string_view loss) {
  if (names.size() == 1) return names[0];
  if (names.empty())
    fail(
        "no output is {} (outputs: {}); choose the loss with --loss ({}) and the output with "
        "--output-name NAME",
        what, outputs_text(g), kLossChoices);
  std::string list;
  for (const auto& n : names) list += fmt::format("{}'{}'", list.empty() ? "" : ", ", n);
  fail("{} outputs are {} ({}); say which one {} trains on with --output-name NAME", names.size(),
       what, list, loss);
}

}  // namespace

OutputForm output_form(const Graph& g, ValueId out, ValueId* logits, int64_t class_axis) {
  *logits = out;
  const Value& o = g.value(out);
  if (o.producer < 0) return OutputForm::Logits;
  const Node& p = g.nodes[static_cast<size_t>(o.producer)];
  const bool soft = p.op_type == "Softmax", log_soft = p.op_type == "LogSoftmax";
  if (!(soft || log_soft) || !p.domain.empty() || !p.def) return OutputForm::Logits;
  const auto& sp = p.p<ops::SoftmaxParams>();
  const auto rank = static_cast<int64_t>(o.shape.size());
  const int64_t axis = sp.axis < 0 ? sp.axis + rank : sp.axis;
  const Value& in = g.value(p.inputs[0]);
  // Opset < 13 softmaxes the flattened dims [axis, rank): over the classes only when they are last.
  if (rank < 2 || axis != class_axis || (sp.coerce_2d && axis != rank - 1) || in.shape != o.shape ||
      !dtype_is_float(in.dtype))
    return OutputForm::Logits;
  *logits = p.inputs[0];
  return soft ? OutputForm::Probabilities : OutputForm::LogProbabilities;
}

std::string describe_loss(const Graph& g, const LossSpec& spec) {
  const ValueId out = find_output(g, spec.output);
  std::string text = fmt::format("{} on '{}'", loss_kind_name(spec.kind), g.value(out).name);
  if (spec.kind == LossKind::Huber) text += fmt::format(" (delta {})", spec.huber_delta);
  if (spec.kind != LossKind::SoftmaxCrossEntropy) return text;
  const int64_t axis = class_axis_of(g.value(out).shape.size(), spec.class_axis);
  std::string extra;  // what differs from the plain [N,C] loss
  if (g.value(out).shape.size() != 2) extra += fmt::format(", classes on axis {}", axis);
  if (spec.label_smoothing > 0) extra += fmt::format(", label smoothing {}", spec.label_smoothing);
  if (spec.ignore_index && *spec.ignore_index != -100)
    extra += fmt::format(", ignoring label {}", *spec.ignore_index);
  text += extra;
  ValueId logits = kNoValue;
  switch (output_form(g, out, &logits, axis)) {
    case OutputForm::Logits:
      return text;
    case OutputForm::Probabilities:
      return fmt::format(
          "softmax cross-entropy on '{}', the logits under the model's final Softmax (its "
          "output '{}' holds probabilities; the exported model keeps the Softmax){}",
          g.value(logits).name, g.value(out).name, extra);
    case OutputForm::LogProbabilities:
      return fmt::format(
          "softmax cross-entropy on '{}', the logits under the model's final LogSoftmax (= the "
          "NLL of its output '{}'; the exported model keeps the LogSoftmax){}",
          g.value(logits).name, g.value(out).name, extra);
  }
  return text;
}

LossSpec detect_loss(const Graph& g) {
  auto scalars = outputs_where(g, is_scalar_loss);
  if (!scalars.empty())
    return {LossKind::ModelOutput, the_one(g, scalars, "scalar float losses", "the model")};
  auto logits = outputs_where(g, is_logits);
  if (logits.empty())
    fail(
        "cannot tell which loss to train with: no scalar loss output and no [N,C] (C >= 2) "
        "classifier output (outputs: {}); pass --loss cross-entropy|mse|l1|huber|bce with "
        "--output-name NAME, or export the loss from the model",
        outputs_text(g));
  return {LossKind::SoftmaxCrossEntropy,
          the_one(g, logits, "[N,C] classifier outputs", "cross-entropy")};
}

int64_t resolve_class_axis(const Graph& g, ValueId output, int64_t class_axis) {
  const Value& v = g.value(output);
  const auto rank = static_cast<int64_t>(v.shape.size());
  if (!dtype_is_float(v.dtype) || rank < 2)
    fail(
        "cross-entropy needs float scores with a class axis ([N,C], [N,T,C], [N,C,H,W], ...); "
        "output '{}' is {}{}",
        v.name, dtype_name(v.dtype), to_string(v.shape));
  const int64_t axis = class_axis_of(v.shape.size(), class_axis);
  if (axis < 0)
    fail(
        "--class-axis {} is out of range for output '{}' {}: it must be in [1, {}) (or -1: by "
        "rank)",
        class_axis, v.name, to_string(v.shape), rank);
  const Dim c = v.shape[static_cast<size_t>(axis)];
  if (!c.is_static())
    fail(
        "output '{}' is {}: its class dim (axis {}) is not static; give it with --dim or "
        "--input-shape, or choose the class axis with --class-axis N",
        v.name, to_string(v.shape), axis);
  if (c.value < 2)
    fail(
        "output '{}' is {}: cross-entropy over one class (axis {}) is always 0; train it with "
        "--loss bce or mse, or export the classifier with one score per class",
        v.name, to_string(v.shape), axis);
  return axis;
}

LossSpec choose_loss(const Graph& g, const std::string& loss, const std::string& output,
                     const LossSpec& settings) {
  if (!is_loss_choice(loss)) fail("unknown --loss '{}' (choices: {})", loss, kLossChoices);
  if (!(settings.label_smoothing >= 0 && settings.label_smoothing < 1))
    fail("--label-smoothing must be in [0, 1), got {}", settings.label_smoothing);
  if (!(settings.huber_delta > 0))
    fail("--huber-delta must be positive, got {}", settings.huber_delta);
  if (!output.empty()) find_output(g, output);  // names the outputs when it is not one
  LossSpec spec = settings;
  spec.output = output;
  // The output a loss of `kind` trains on: --output-name, or the one that fits.
  auto pick = [&](LossKind kind, auto fits, std::string_view what) {
    spec.kind = kind;
    if (spec.output.empty()) spec.output = the_one(g, outputs_where(g, fits), what, loss);
    return spec;
  };
  auto finish = [&](LossSpec s) {  // resolves the class axis, checks the output fits
    const ValueId out = find_output(g, s.output);
    const Value& v = g.value(out);
    if (s.kind == LossKind::SoftmaxCrossEntropy) {
      s.class_axis = resolve_class_axis(g, out, s.class_axis);
    } else if (s.kind == LossKind::ModelOutput) {
      if (!is_scalar_loss(v))
        fail(
            "output '{}' is {}{}, not a scalar loss: --loss {} trains on the model's own scalar "
            "float loss output (scalar outputs: {}; outputs: {})",
            v.name, dtype_name(v.dtype), to_string(v.shape), loss,
            names_text(outputs_where(g, is_scalar_loss)), outputs_text(g));
    } else if (!dtype_is_float(v.dtype)) {
      fail("--loss {} needs a float output; '{}' is {}{}", loss, v.name, dtype_name(v.dtype),
           to_string(v.shape));
    }
    return s;
  };
  if (loss == "auto") {
    if (output.empty()) {
      const LossSpec d = detect_loss(g);
      spec.kind = d.kind;
      spec.output = d.output;
      return finish(spec);
    }
    const Value& v = g.value(find_output(g, output));
    if (is_scalar_loss(v)) return finish(pick(LossKind::ModelOutput, is_scalar_loss, ""));
    if (is_logits(v)) return finish(pick(LossKind::SoftmaxCrossEntropy, is_logits, ""));
    fail(
        "output '{}' is {}{}: neither a scalar loss nor [N,C] (C >= 2) classifier scores; "
        "choose the loss with --loss ({})",
        output, dtype_name(v.dtype), to_string(v.shape), kLossChoices);
  }
  if (loss == "cross-entropy") {
    // [N,C] classifiers first (as before); without one, any output with a class axis.
    const int64_t axis = settings.class_axis;
    if (output.empty() && !outputs_where(g, is_logits).empty())
      return finish(pick(LossKind::SoftmaxCrossEntropy, is_logits, "[N,C] classifier outputs"));
    return finish(pick(
        LossKind::SoftmaxCrossEntropy,
        [axis](const Value& v) { return fits_cross_entropy(v, axis); },
        "classifier outputs (float scores with a static class axis of >= 2 classes)"));
  }
  if (loss == "mse")
    return finish(pick(LossKind::MeanSquaredError, is_prediction, "float [N,...] predictions"));
  if (loss == "l1") return finish(pick(LossKind::L1, is_prediction, "float [N,...] predictions"));
  if (loss == "huber")
    return finish(pick(LossKind::Huber, is_prediction, "float [N,...] predictions"));
  if (loss == "bce")
    return finish(pick(LossKind::BinaryCrossEntropy, is_prediction, "float [N,...] logits"));
  if (loss == "model")
    return finish(pick(LossKind::ModelOutput, is_scalar_loss, "scalar float losses"));
  // output:NAME
  const std::string name = loss.substr(7);
  if (!output.empty() && output != name)
    fail("--loss {} and --output-name {} name different outputs: give one", loss, output);
  find_output(g, name);
  spec.kind = LossKind::ModelOutput;
  spec.output = name;
  return finish(spec);
}

namespace {
// y - t, and the mean of f(y - t) over all elements (the regression losses).
ValueId mean_all(GraphBuilder& b, ValueId v) {
  return b.op("ReduceMean", {v}, {{"keepdims", int64_t{0}}});
}
// |x| as Relu(x) + Relu(-x): its gradient is sign(x), 0 at 0 (PyTorch's), from ops with vjps.
ValueId abs_of(GraphBuilder& b, ValueId x) {
  return b.op("Add", {b.op("Relu", {x}), b.op("Relu", {b.op("Neg", {x})})});
}
}  // namespace

LossNodes append_loss(Graph& g, const LossSpec& spec) {
  LossNodes n;
  n.output = find_output(g, spec.output);
  n.loss_input = n.output;
  const Value out = g.value(n.output);  // a copy: the builder adds values
  GraphBuilder lb(g, "loss");
  const DType t = out.dtype;
  if (spec.kind != LossKind::SoftmaxCrossEntropy && spec.kind != LossKind::ModelOutput) {
    if (!dtype_is_float(t))
      fail("{} needs a float output; output '{}' is {}{}", loss_kind_name(spec.kind), out.name,
           dtype_name(t), to_string(out.shape));
    if (spec.kind == LossKind::Huber && !(spec.huber_delta > 0))
      fail("the Huber loss's delta must be positive, got {}", spec.huber_delta);
    n.target = lb.input("targets", t, out.shape);
  }
  switch (spec.kind) {
    case LossKind::SoftmaxCrossEntropy: {
      n.class_axis = resolve_class_axis(g, n.output, spec.class_axis);
      if (!(spec.label_smoothing >= 0 && spec.label_smoothing < 1))
        fail("label smoothing must be in [0, 1), got {}", spec.label_smoothing);
      // A final Softmax / LogSoftmax over the classes: the loss reads its input, the logits.
      n.form = output_form(g, n.output, &n.loss_input, n.class_axis);
      Shape labels = out.shape;
      labels.erase(labels.begin() + n.class_axis);
      n.target = lb.input("labels", DType::I64, labels);
      // SoftmaxCrossEntropyLoss wants the classes on axis 1: [N,T,C] -> [N,C,T] and the like.
      ValueId scores = n.loss_input;
      if (n.class_axis != 1) {
        std::vector<int64_t> perm{0, n.class_axis};
        for (int64_t k = 1; k < static_cast<int64_t>(out.shape.size()); ++k)
          if (k != n.class_axis) perm.push_back(k);
        scores = lb.op("Transpose", {scores}, {{"perm", perm}});
      }
      ops::SoftmaxCrossEntropyLossParams p;
      p.ignore_index = spec.ignore_index;
      p.label_smoothing = spec.label_smoothing;
      n.loss = lb.emit_with("SoftmaxCrossEntropyLoss", {scores, n.target}, p)[0];
      break;
    }
    case LossKind::MeanSquaredError: {
      ValueId diff = lb.op("Sub", {n.output, n.target});
      n.loss = mean_all(lb, lb.op("Mul", {diff, diff}));
      break;
    }
    case LossKind::L1:
      n.loss = mean_all(lb, abs_of(lb, lb.op("Sub", {n.output, n.target})));
      break;
    case LossKind::Huber: {
      // q = clip(d, -delta, delta); q (d - q / 2) is d^2 / 2 inside and delta (|d| - delta / 2)
      // outside, and its gradient q + q' (d - q) is d inside, +-delta outside (exact at the
      // bounds, where d = q).
      const ValueId d = lb.op("Sub", {n.output, n.target});
      const ValueId q =
          lb.op("Clip", {d, lb.scalar(-spec.huber_delta, t), lb.scalar(spec.huber_delta, t)});
      const ValueId half_q = lb.op("Mul", {q, lb.scalar(0.5, t)});
      n.loss = mean_all(lb, lb.op("Mul", {q, lb.op("Sub", {d, half_q})}));
      break;
    }
    case LossKind::BinaryCrossEntropy: {
      // PyTorch's stable form, max(x, 0) - x t + log(1 + exp(-|x|)), with max(x, 0) written
      // (x + |x|) / 2: (|x| / 2 + log(1 + exp(-|x|))) is smooth at 0 with slope 0 there, so the
      // gradient is sigmoid(x) - t everywhere, x = 0 included (a zero-initialised head).
      const ValueId x = n.output;
      const ValueId a = abs_of(lb, x);
      const ValueId relu = lb.op("Mul", {lb.op("Add", {x, a}), lb.scalar(0.5, t)});
      const ValueId soft =
          lb.op("Log", {lb.op("Add", {lb.scalar(1.0, t), lb.op("Exp", {lb.op("Neg", {a})})})});
      n.loss =
          mean_all(lb, lb.op("Add", {lb.op("Sub", {relu, lb.op("Mul", {x, n.target})}), soft}));
      break;
    }
    case LossKind::ModelOutput:
      if (!is_scalar_loss(out))
        fail("output '{}' is {}{}, not a scalar loss", out.name, dtype_name(out.dtype),
             to_string(out.shape));
      n.loss = n.output;
      break;
  }
  return n;
}

Graph build_eval_graph(const Graph& forward, const LossSpec& spec, LossNodes* nodes) {
  Graph g = forward;
  set_training(g, false);
  LossNodes n = append_loss(g, spec);
  if (spec.kind != LossKind::ModelOutput) {
    if (g.value(n.loss).dtype != DType::F32) {
      GraphBuilder b(g, "loss");
      n.loss = b.emit_with("Cast", {n.loss}, ops::CastParams{DType::F32})[0];
    }
    g.outputs.push_back(n.loss);
  }
  if (nodes) *nodes = n;
  return g;
}

namespace {
std::atomic<int64_t> g_training_graphs{0};
}  // namespace

int64_t training_graphs_built() { return g_training_graphs.load(); }

TrainingGraph build_training_graph(const Graph& forward, const LossSpec& spec) {
  ++g_training_graphs;
  TrainingGraph t;
  t.graph = forward;
  Graph& g = t.graph;
  set_training(g, true);
  // A model exported for inference has BatchNormalization nodes without their running-statistics
  // outputs (PyTorch's eval-mode export, paddle2onnx, tf2onnx): give them those outputs, so that
  // training updates the statistics the exported model is evaluated with.
  for (size_t n = 0, count = g.nodes.size(); n < count; ++n) {
    if (!g.nodes[n].def || g.nodes[n].def->state_inputs == 0) continue;
    int out = 1;
    bool added = false;
    for (size_t i = 0; i < g.nodes[n].inputs.size(); ++i) {
      if (!((g.nodes[n].def->state_inputs >> i) & 1u)) continue;
      const size_t o = static_cast<size_t>(out++);
      if (g.nodes[n].has_output(o)) continue;
      Value v;
      v.name = fmt::format("{}/{}_update", g.nodes[n].name, g.value(g.nodes[n].inputs[i]).name);
      v.producer = static_cast<NodeId>(n);
      const ValueId id = g.add_value(std::move(v));
      if (g.nodes[n].outputs.size() <= o) g.nodes[n].outputs.resize(o + 1, kNoValue);
      g.nodes[n].outputs[o] = id;
      added = true;
    }
    if (added) infer_node(g, static_cast<NodeId>(n));
  }
  g.nodes.reserve(g.nodes.size() * 8 + 64);  // vjps emit while walking
  const LossNodes ln = append_loss(g, spec);
  t.spec = spec;
  t.spec.class_axis = ln.class_axis;
  t.loss_kind = spec.kind;
  t.loss = ln.loss;
  t.output = ln.output;
  t.loss_input = ln.loss_input;
  t.output_form = ln.form;
  t.target = ln.target;
  if (ln.target != kNoValue) {
    t.target_dtype = g.value(ln.target).dtype;
    t.target_shape = g.value(ln.target).shape;
  }

  // Which values depend on a parameter (forward sweep).
  std::vector<bool> requires_grad(g.values.size(), false);
  for (size_t v = 0; v < g.values.size(); ++v)
    requires_grad[v] = g.values[v].kind == ValueKind::Parameter;
  const size_t n_forward = g.nodes.size();
  for (size_t n = 0; n < n_forward; ++n) {
    const Node& node = g.nodes[n];
    uint32_t blocked = node.def->nondiff_inputs | node.def->value_inputs | node.def->state_inputs;
    bool any = false;
    for (size_t i = 0; i < node.inputs.size(); ++i)
      if (node.inputs[i] != kNoValue && requires_grad[static_cast<size_t>(node.inputs[i])] &&
          !((blocked >> i) & 1u))
        any = true;
    if (!any) continue;
    for (ValueId o : node.outputs)
      if (o != kNoValue && dtype_is_float(g.value(o).dtype))
        requires_grad[static_cast<size_t>(o)] = true;
  }
  if (!requires_grad[static_cast<size_t>(t.loss)])
    fail("the loss does not depend on any trainable parameter");

  // Reverse sweep: gradient contributions per value, summed when a value is read twice.
  GraphBuilder b(g, "grad");
  std::map<ValueId, std::vector<ValueId>> contrib;
  auto total = [&](ValueId v) -> ValueId {
    auto it = contrib.find(v);
    if (it == contrib.end() || it->second.empty()) return kNoValue;
    auto& parts = it->second;
    while (parts.size() > 1) {
      ValueId s = b.op("Add", {parts[parts.size() - 2], parts.back()});
      parts.pop_back();
      parts.back() = s;
    }
    return parts[0];
  };
  contrib[t.loss].push_back(b.scalar(1.0, g.value(t.loss).dtype));
  std::vector<std::string> missing;
  for (size_t n = n_forward; n-- > 0;) {
    const Node node = g.nodes[n];  // a copy: vjps append to g.nodes
    std::vector<ValueId> dy;
    bool any_dy = false;
    for (ValueId o : node.outputs) {
      dy.push_back(o == kNoValue ? kNoValue : total(o));
      any_dy |= dy.back() != kNoValue;
    }
    if (!any_dy) continue;
    uint32_t blocked = node.def->nondiff_inputs | node.def->value_inputs | node.def->state_inputs;
    std::vector<bool> need(node.inputs.size(), false);
    bool any_need = false;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      need[i] = node.inputs[i] != kNoValue && requires_grad[static_cast<size_t>(node.inputs[i])] &&
                !((blocked >> i) & 1u);
      any_need |= need[i];
    }
    if (!any_need) continue;
    if (!node.def->vjp) {
      missing.push_back(fmt::format("{}: {} has no gradient", g.node_label(static_cast<NodeId>(n)),
                                    node.op_type));
      continue;
    }
    VjpCtx ctx(b, static_cast<NodeId>(n), dy, need);
    node.def->vjp(ctx);
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      ValueId dx = ctx.dx()[i];
      if (dx == kNoValue || !need[i]) continue;
      const Value& x = g.value(node.inputs[i]);
      const Value& d = g.value(dx);
      if (d.shape != x.shape || d.dtype != x.dtype)
        throw InternalError(fmt::format(
            "{}: vjp gave input {} a gradient {}{} for {}{}", g.node_label(static_cast<NodeId>(n)),
            i, dtype_name(d.dtype), to_string(d.shape), dtype_name(x.dtype), to_string(x.shape)));
      contrib[node.inputs[i]].push_back(dx);
    }
  }
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += "\n  " + m;
    fail("cannot train: {} node{} on the path from the parameters to the loss {} no gradient:{}",
         missing.size(), missing.size() == 1 ? "" : "s", missing.size() == 1 ? "has" : "have",
         list);
  }

  // One gradient per parameter, each in a value of its own (it gets a slice of the flat buffer).
  auto consumers = g.consumers();
  std::vector<bool> taken(g.values.size(), false);
  for (size_t v = 0; v < g.values.size(); ++v) {
    if (g.values[v].kind != ValueKind::Parameter) continue;
    auto p = static_cast<ValueId>(v);
    ValueId d = total(p);
    if (d == kNoValue) {  // unused parameter: a zero gradient
      Tensor z;
      z.dtype = g.value(p).dtype;
      z.dims = g.value(p).data->dims;
      z.bytes.assign(g.value(p).data->bytes.size(), std::byte{0});
      d = b.op("Identity", {b.constant(std::move(z), "zero_grad")});
    } else {
      consumers = g.consumers();
      bool own = g.value(d).producer >= 0 && consumers[static_cast<size_t>(d)].empty() &&
                 !taken[static_cast<size_t>(d)] && d != t.loss;
      if (!own) d = b.op("Identity", {d});
    }
    taken[static_cast<size_t>(d)] = true;
    t.params.push_back(p);
    t.grads.push_back(d);
  }
  // BatchNorm running statistics: outputs 1 and 2 are the updated inputs 3 and 4.
  for (const Node& n : g.nodes) {
    if (!n.def || n.def->state_inputs == 0) continue;
    int out = 1;
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if ((n.def->state_inputs >> i) & 1u) {
        if (n.has_output(static_cast<size_t>(out)))
          t.state_updates.emplace_back(n.inputs[i], n.outputs[static_cast<size_t>(out)]);
        ++out;
      }
  }
  g.outputs = {t.loss, t.output};
  for (ValueId d : t.grads) g.outputs.push_back(d);
  for (const auto& [s, u] : t.state_updates) g.outputs.push_back(u);
  return t;
}

}  // namespace cb
