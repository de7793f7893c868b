// A new classifier head (see replace_head.h). Everything is checked on the graph as it is, then
// the changes are made and inferred on a copy that replaces the graph only when all of it worked.
#include "runtime/replace_head.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "runtime/error.h"
#include "runtime/op_catalog.h"
#include "runtime/ops/params.h"

namespace cb {

namespace {

constexpr const char* kSupported =
    "a Gemm, a MatMul (+ Add bias) or a Conv with stored weights, reached from the output through "
    "Softmax, LogSoftmax, Identity, Dropout, Flatten, Reshape or Squeeze";

bool passes_classes(const std::string& op) {
  static const std::set<std::string> kOps = {"Softmax", "LogSoftmax", "Identity", "Dropout",
                                             "Flatten", "Reshape",    "Squeeze"};
  return kOps.count(op) != 0;
}

// A value holding data the classifier may own: an initializer or a (folded) Constant node's
// output, not computed by a node.
bool stored(const Value& v) {
  return v.data && v.producer < 0 && dtype_is_float(v.dtype) &&
         (v.kind == ValueKind::Parameter || v.kind == ValueKind::Constant);
}

// U(-bound, bound) f32 values, in order, from `rng` (53 random bits each, as a double).
Tensor uniform(std::vector<int64_t> dims, double bound, std::mt19937_64& rng) {
  Tensor t;
  t.dtype = DType::F32;
  t.dims = std::move(dims);
  t.bytes.resize(static_cast<size_t>(t.numel()) * sizeof(float));
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;  // [0, 1)
    p[i] = static_cast<float>((2 * u - 1) * bound);
  }
  return t;
}

struct Found {
  NodeId node = -1;  // the Gemm, MatMul or Conv
  NodeId add = -1;   // MatMul's bias Add
  ValueId weight = kNoValue, bias = kNoValue;
  size_t class_axis = 0;  // of the weight
  std::string op;
};

}  // namespace

std::string HeadReplacement::describe() const {
  return fmt::format("classifier '{}' ({} {}->{}) replaced by a new {}->{} head", name, op,
                     features, classes_before, features, classes);
}

HeadReplacement replace_head(Graph& g, const std::string& output, int64_t classes, uint64_t seed) {
  if (classes < 2)
    fail(
        "--num-classes {}: a classifier needs at least 2 classes (for one output, a regression "
        "or a score, keep the model's head and train it with --loss mse or bce; two classes are "
        "--num-classes 2)",
        classes);
  if (g.outputs.empty()) fail("--num-classes: the model has no output");
  ValueId out = g.outputs[0];
  if (!output.empty()) {
    auto v = g.find_value(output);
    if (!v || std::find(g.outputs.begin(), g.outputs.end(), *v) == g.outputs.end()) {
      std::string names;
      for (ValueId o : g.outputs)
        names += fmt::format("{}'{}'", names.empty() ? "" : ", ", g.value(o).name);
      fail("--num-classes: the model has no output '{}' (its outputs: {})", output, names);
    }
    out = *v;
  }
  const std::string out_name = g.value(out).name;
  const Value& ov = g.value(out);
  if (!ov.shape_known || ov.shape.size() != 2 || !ov.shape[1].is_static() ||
      !dtype_is_float(ov.dtype))
    fail(
        "--num-classes: output '{}' is {} {}, not the [N,C] float logits or probabilities of a "
        "classifier",
        out_name, dtype_name(ov.dtype), ov.shape_known ? to_string(ov.shape) : "of unknown shape");
  const int64_t before = ov.shape[1].value;
  const auto consumers = g.consumers();

  auto stop = [&](NodeId n, const std::string& why) {
    fail(
        "--num-classes: cannot find the classifier of output '{}': the search back from it stops "
        "at {}{} (supported: {})",
        out_name, n >= 0 ? g.node_label(n) : std::string("a value no node computes"),
        why.empty() ? "" : ": " + why, kSupported);
  };
  auto sole_reader = [&](ValueId v, NodeId n) {
    for (NodeId c : consumers[static_cast<size_t>(v)])
      if (c != n)
        fail(
            "--num-classes: the classifier {} of output '{}' shares '{}' with {}; only a head "
            "whose weights nothing else reads can be replaced",
            g.node_label(n), out_name, g.value(v).name, g.node_label(c));
  };

  // Walk back from the output to the classifier.
  Found f;
  for (ValueId v = out;;) {
    const NodeId n = g.value(v).producer;
    if (n < 0) stop(-1, fmt::format("'{}'", g.value(v).name));
    const Node& node = g.nodes[static_cast<size_t>(n)];
    if (node.op_type == "Gemm" || node.op_type == "MatMul" || node.op_type == "Conv") {
      f.node = n;
      break;
    }
    if (node.op_type == "Add" && node.inputs.size() == 2) {
      for (size_t i = 0; i < 2; ++i) {
        const ValueId a = node.inputs[i], b = node.inputs[1 - i];
        const NodeId p = g.value(a).producer;
        if (p >= 0 && g.nodes[static_cast<size_t>(p)].op_type == "MatMul" && stored(g.value(b))) {
          f.node = p;
          f.add = n;
          f.bias = b;
        }
      }
      if (f.node >= 0) break;
      stop(n, "an Add that is not a MatMul's bias");
    }
    if (!passes_classes(node.op_type) || node.domain != "" || !node.has_input(0)) stop(n, "");
    v = node.inputs[0];
  }

  // Its weight, bias and geometry.
  const Node& head = g.nodes[static_cast<size_t>(f.node)];
  f.weight = head.has_input(1) ? head.inputs[1] : kNoValue;
  if (f.weight == kNoValue || !stored(g.value(f.weight)))
    stop(f.node, f.weight == kNoValue
                     ? "it has no weight input"
                     : fmt::format("its weight '{}' is computed, not stored in the file",
                                   g.value(f.weight).name));
  const Value& w = g.value(f.weight);
  const std::vector<int64_t>& wd = w.data->dims;
  int64_t fan_in = 0;
  if (head.op_type == "Gemm") {
    const auto& p = head.p<ops::GemmParams>();
    if (wd.size() != 2) stop(f.node, "its weight is not 2-D");
    f.class_axis = p.trans_b ? 0 : 1;
    fan_in = wd[1 - f.class_axis];
    if (head.has_input(2)) f.bias = head.inputs[2];
    f.op = "Gemm";
  } else if (head.op_type == "MatMul") {
    if (wd.size() != 2) stop(f.node, "its weight (input B) is not 2-D");
    f.class_axis = 1;
    fan_in = wd[0];
    f.op = f.add >= 0 ? "MatMul+Add" : "MatMul";
  } else {  // Conv
    if (head.p<ops::ConvParams>().group != 1) stop(f.node, "a grouped Conv");
    if (wd.size() < 3) stop(f.node, "its weight has no kernel axes");
    f.class_axis = 0;
    fan_in = 1;
    std::string kernel;
    for (size_t i = 1; i < wd.size(); ++i) {
      fan_in *= wd[i];
      if (i >= 2) kernel += fmt::format("{}{}", i > 2 ? "x" : "", wd[i]);
    }
    if (head.has_input(2)) f.bias = head.inputs[2];
    f.op = "Conv " + kernel;
  }
  if (wd[f.class_axis] != before)
    stop(f.node, fmt::format("its weight {} does not make the output's {} classes",
                             to_string(shape_of(wd)), before));
  if (f.bias != kNoValue) {
    const Value& b = g.value(f.bias);
    if (!stored(b))
      stop(f.node, fmt::format("its bias '{}' is computed, not stored in the file", b.name));
    if (b.data->numel() != before && b.data->numel() != 1)
      stop(f.node, fmt::format("its bias '{}' {} is not one per class", b.name,
                               to_string(shape_of(b.data->dims))));
    sole_reader(f.bias, f.add >= 0 ? f.add : f.node);
  }
  sole_reader(f.weight, f.node);
  if (w.dtype != DType::F32) stop(f.node, fmt::format("its weight is {}", dtype_name(w.dtype)));

  // The nodes downstream of the classifier (in order), and the shape constants among their
  // inputs that name the old class count.
  const NodeId last = f.add >= 0 ? f.add : f.node;
  std::vector<bool> down(g.values.size(), false);
  std::vector<NodeId> redo = {f.node};
  if (f.add >= 0) redo.push_back(f.add);
  for (ValueId o : g.nodes[static_cast<size_t>(last)].outputs)
    if (o != kNoValue) down[static_cast<size_t>(o)] = true;
  std::map<ValueId, size_t> shape_fix;  // shape constant -> the entry to set to `classes`
  for (size_t n = static_cast<size_t>(last) + 1; n < g.nodes.size(); ++n) {
    const Node& node = g.nodes[n];
    bool reached = false;
    for (ValueId i : node.inputs)
      reached = reached || (i != kNoValue && down[static_cast<size_t>(i)]);
    if (!reached) continue;
    redo.push_back(static_cast<NodeId>(n));
    for (ValueId o : node.outputs)
      if (o != kNoValue) down[static_cast<size_t>(o)] = true;
    if (node.op_type != "Reshape" || !node.has_input(1)) continue;
    const Value& s = g.value(node.inputs[1]);
    if (!s.known || s.producer >= 0) continue;
    const std::vector<Dim>& k = *s.known;
    for (size_t i = k.size(); i-- > 0;)
      if (k[i] == Dim::of(before)) {
        for (NodeId c : consumers[static_cast<size_t>(node.inputs[1])])
          if (c < static_cast<NodeId>(last))
            fail(
                "--num-classes: the shape '{}' that {} reads after the classifier of output '{}' "
                "is also read by {} before it, so its class count cannot be changed",
                s.name, g.node_label(static_cast<NodeId>(n)), out_name, g.node_label(c));
        shape_fix[node.inputs[1]] = i;
        break;
      }
  }

  // The change, on a copy.
  HeadReplacement r;
  r.output = out_name;
  r.node = head.name;
  r.weight = w.name;
  const std::string suffix = ".weight";
  r.name = w.name.size() > suffix.size() && w.name.ends_with(suffix)
               ? w.name.substr(0, w.name.size() - suffix.size())
               : head.name;
  r.op = f.op;
  r.features = fan_in;
  r.classes_before = before;
  r.classes = classes;
  Graph h = g;
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                    0x68656164u};  // "head": a stream of its own, apart from the shuffle's
  std::mt19937_64 rng(seq);
  const double bound = 1 / std::sqrt(static_cast<double>(fan_in));
  std::vector<int64_t> nwd = wd;
  nwd[f.class_axis] = classes;
  auto set = [&](ValueId id, Tensor t) {
    Value& v = h.value(id);
    v.shape = shape_of(t.dims);
    v.kind = ValueKind::Parameter;  // a fresh head is trained, whatever the file's was
    v.data = std::make_shared<Tensor>(t);
    r.values[v.name] = std::move(t);
  };
  set(f.weight, uniform(nwd, bound, rng));
  if (f.bias != kNoValue) {
    std::vector<int64_t> bd = g.value(f.bias).data->dims;
    if (g.value(f.bias).data->numel() == before && !bd.empty()) bd.back() = classes;
    r.bias = g.value(f.bias).name;
    set(f.bias, uniform(bd, bound, rng));
  }
  for (const auto& [id, at] : shape_fix) {
    Value& s = h.value(id);
    (*s.known)[at] = Dim::of(classes);
    Tensor t;
    t.dtype = DType::I64;
    t.dims = {static_cast<int64_t>(s.known->size())};
    t.bytes.resize(s.known->size() * sizeof(int64_t));
    for (size_t i = 0; i < s.known->size(); ++i)
      t.data<int64_t>()[i] = (*s.known)[i].batch ? -1 : (*s.known)[i].value;
    if (s.data) {
      if (s.dtype != DType::I64)
        fail("--num-classes: the shape '{}' after the classifier of output '{}' is {}, not int64",
             s.name, out_name, dtype_name(s.dtype));
      s.data = std::make_shared<Tensor>(t);
    }
    r.values[s.name] = std::move(t);
  }
  try {
    for (NodeId n : redo) infer_node(h, n);
  } catch (const Error& e) {
    fail("--num-classes: after replacing the classifier {} of output '{}' by a {}-way one: {}",
         g.node_label(f.node), out_name, classes, e.what());
  }
  const Value& nov = h.value(out);
  if (nov.shape.size() != 2 || nov.shape[1] != Dim::of(classes))
    fail(
        "--num-classes: after replacing the classifier {} of output '{}', the output is {}, not "
        "[N,{}] (a shape after the classifier fixes the class count in a form crossbow does not "
        "change)",
        g.node_label(f.node), out_name, to_string(nov.shape), classes);
  g = std::move(h);
  return r;
}

}  // namespace cb
