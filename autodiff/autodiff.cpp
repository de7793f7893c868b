#include "autodiff/autodiff.h"

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
  }
  return "?";
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
std::vector<std::string> outputs_where(const Graph& g, bool (*fits)(const Value&)) {
  std::vector<std::string> out;
  for (ValueId o : g.outputs)
    if (fits(g.value(o))) out.push_back(g.value(o).name);
  return out;
}
// The one output among `names`, or an error naming them.
std::string the_one(const Graph& g, const std::vector<std::string>& names, std::string_view what,
                    std::string_view loss) {
  if (names.size() == 1) return names[0];
  if (names.empty())
    fail(
        "no output is {} (outputs: {}); choose the loss with --loss cross-entropy|mse|model and "
        "the output with --output-name NAME",
        what, outputs_text(g));
  std::string list;
  for (const auto& n : names) list += fmt::format("{}'{}'", list.empty() ? "" : ", ", n);
  fail("{} outputs are {} ({}); say which one {} trains on with --output-name NAME", names.size(),
       what, list, loss);
}

}  // namespace

OutputForm output_form(const Graph& g, ValueId out, ValueId* logits) {
  *logits = out;
  const Value& o = g.value(out);
  if (o.producer < 0) return OutputForm::Logits;
  const Node& p = g.nodes[static_cast<size_t>(o.producer)];
  const bool soft = p.op_type == "Softmax", log_soft = p.op_type == "LogSoftmax";
  if (!(soft || log_soft) || !p.domain.empty() || !p.def) return OutputForm::Logits;
  const int64_t axis = p.p<ops::SoftmaxParams>().axis;
  const Value& in = g.value(p.inputs[0]);
  if (o.shape.size() != 2 || (axis != 1 && axis != -1) || in.shape != o.shape ||
      !dtype_is_float(in.dtype))
    return OutputForm::Logits;
  *logits = p.inputs[0];
  return soft ? OutputForm::Probabilities : OutputForm::LogProbabilities;
}

std::string describe_loss(const Graph& g, const LossSpec& spec) {
  const ValueId out = find_output(g, spec.output);
  std::string text = fmt::format("{} on '{}'", loss_kind_name(spec.kind), g.value(out).name);
  if (spec.kind != LossKind::SoftmaxCrossEntropy) return text;
  ValueId logits = kNoValue;
  switch (output_form(g, out, &logits)) {
    case OutputForm::Logits:
      return text;
    case OutputForm::Probabilities:
      return fmt::format(
          "softmax cross-entropy on '{}', the logits under the model's final Softmax (its "
          "output '{}' holds probabilities; the exported model keeps the Softmax)",
          g.value(logits).name, g.value(out).name);
    case OutputForm::LogProbabilities:
      return fmt::format(
          "softmax cross-entropy on '{}', the logits under the model's final LogSoftmax (= the "
          "NLL of its output '{}'; the exported model keeps the LogSoftmax)",
          g.value(logits).name, g.value(out).name);
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
        "classifier output (outputs: {}); pass --loss mse (prediction vs targets) with "
        "--output-name NAME, or export the loss from the model",
        outputs_text(g));
  return {LossKind::SoftmaxCrossEntropy,
          the_one(g, logits, "[N,C] classifier outputs", "cross-entropy")};
}

LossSpec choose_loss(const Graph& g, const std::string& loss, const std::string& output) {
  if (!output.empty()) find_output(g, output);  // names the outputs when it is not one
  if (loss == "auto") {
    if (output.empty()) return detect_loss(g);
    const Value& v = g.value(find_output(g, output));
    if (is_scalar_loss(v)) return {LossKind::ModelOutput, output};
    if (is_logits(v)) return {LossKind::SoftmaxCrossEntropy, output};
    fail(
        "output '{}' is {}{}: neither a scalar loss nor [N,C] (C >= 2) classifier scores; "
        "choose the loss with --loss cross-entropy|mse|model",
        output, dtype_name(v.dtype), to_string(v.shape));
  }
  if (loss == "cross-entropy")
    return {LossKind::SoftmaxCrossEntropy,
            output.empty() ? the_one(g, outputs_where(g, is_logits), "[N,C] classifier outputs",
                                     "cross-entropy")
                           : output};
  if (loss == "mse")
    return {LossKind::MeanSquaredError,
            output.empty() ? the_one(g,
                                     outputs_where(g,
                                                   [](const Value& v) {
                                                     return dtype_is_float(v.dtype) &&
                                                            !v.shape.empty() &&
                                                            v.shape[0] == Dim::N();
                                                   }),
                                     "float [N,...] predictions", "mse")
                           : output};
  if (loss == "model")
    return {LossKind::ModelOutput, output.empty() ? the_one(g, outputs_where(g, is_scalar_loss),
                                                            "scalar float losses", "--loss model")
                                                  : output};
  fail("unknown --loss '{}' (choices: auto, cross-entropy, mse, model)", loss);
}

TrainingGraph build_training_graph(const Graph& forward, const LossSpec& spec) {
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
  t.loss_kind = spec.kind;
  t.output = find_output(g, spec.output);
  const Value out = g.value(t.output);
  GraphBuilder lb(g, "loss");
  switch (spec.kind) {
    case LossKind::SoftmaxCrossEntropy: {
      if (out.shape.size() != 2 || !dtype_is_float(out.dtype))
        fail("softmax cross-entropy needs [N,C] float logits; output '{}' is {}{}", out.name,
             dtype_name(out.dtype), to_string(out.shape));
      if (out.shape[1] == Dim::of(1))
        fail(
            "output '{}' is {}: cross-entropy over one class is always 0; train it with --loss "
            "mse, or export the classifier with one score per class",
            out.name, to_string(out.shape));
      // A final Softmax / LogSoftmax over the classes: the loss reads its input, the logits.
      t.output_form = output_form(g, t.output, &t.loss_input);
      t.target = lb.input("labels", DType::I64, {out.shape[0]});
      t.loss = lb.op("SoftmaxCrossEntropyLoss", {t.loss_input, t.target});
      break;
    }
    case LossKind::MeanSquaredError: {
      if (!dtype_is_float(out.dtype)) fail("mean squared error needs a float output");
      t.target = lb.input("targets", out.dtype, out.shape);
      ValueId diff = lb.op("Sub", {t.output, t.target});
      t.loss = lb.op("ReduceMean", {lb.op("Mul", {diff, diff})}, {{"keepdims", int64_t{0}}});
      break;
    }
    case LossKind::ModelOutput:
      if (!out.shape.empty() || !dtype_is_float(out.dtype))
        fail("output '{}' is {}{}, not a scalar loss", out.name, dtype_name(out.dtype),
             to_string(out.shape));
      t.loss = t.output;
      break;
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
