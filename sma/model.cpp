// The model as trainers see it (see model.h).
#include "sma/model.h"

#include <algorithm>
#include <any>
#include <cmath>
#include <limits>

#include "runtime/error.h"
#include "runtime/op_catalog.h"
#include "runtime/ops/params.h"
#include "runtime/passes.h"
#include "sma/metrics.h"

namespace cb {

namespace {

int64_t align_elems(int64_t n) { return (n + kAlignElems - 1) / kAlignElems * kAlignElems; }

bool is_classifier_output(const Value& v) {
  return dtype_is_float(v.dtype) && v.shape.size() == 2 && v.shape[0] == Dim::N() &&
         v.shape[1].is_static() && v.shape[1].value > 0;
}

int64_t output_index(const Graph& g, const std::string& name) {
  for (size_t i = 0; i < g.outputs.size(); ++i)
    if (g.value(g.outputs[i]).name == name) return static_cast<int64_t>(i);
  return -1;
}

int64_t input_index(const Graph& g, ValueId v) {
  auto it = std::find(g.inputs.begin(), g.inputs.end(), v);
  return it == g.inputs.end() ? -1 : static_cast<int64_t>(it - g.inputs.begin());
}

// When graph input `v` of `g` is the indices of Gather nodes (token ids into an embedding): the
// fewest rows among their tables along the gathered axis, and that node's label, into `in`.
void set_index_bound(const Graph& g, ValueId v, ModelInput& in) {
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const Node& node = g.nodes[n];
    if (!node.def || node.def->kind != OpKind::Gather || node.inputs.size() < 2 ||
        node.inputs[1] != v)
      continue;
    const Value& table = g.value(node.inputs[0]);
    const int64_t axis = std::any_cast<const ops::GatherParams&>(node.params).axis;
    const auto a = normalize_axis(axis, static_cast<int64_t>(table.shape.size()));
    if (!a || !table.shape[static_cast<size_t>(*a)].is_static()) continue;
    const int64_t rows = table.shape[static_cast<size_t>(*a)].value;
    if (in.index_rows == 0 || rows < in.index_rows) {
      in.index_rows = rows;
      in.index_node = g.node_label(static_cast<NodeId>(n));
    }
  }
}

// The model's inputs as the data feeds them: every graph input, its first dim the batch N. A
// model with its own loss may take i64 [N] labels (what image data sets feed it).
FeedSpec inputs_of(const Graph& forward, LossKind kind) {
  FeedSpec f;
  if (forward.inputs.empty()) fail("the model has no input to feed data to");
  for (size_t i = 0; i < forward.inputs.size(); ++i) {
    const Value& v = forward.value(forward.inputs[i]);
    if (v.shape.empty() || v.shape[0] != Dim::N())
      fail(
          "model input '{}' is {} {}: its first dim must be the batch N (export it with a dynamic "
          "batch axis)",
          v.name, dtype_name(v.dtype), to_string(v.shape));
    if (!(dtype_is_float(v.dtype) || dtype_is_int(v.dtype) || v.dtype == DType::Bool))
      fail("model input '{}' is {}: not a type data can feed", v.name, dtype_name(v.dtype));
    if (kind == LossKind::ModelOutput && f.labels_input < 0 && v.dtype == DType::I64 &&
        v.shape == Shape{Dim::N()} && forward.inputs.size() > 1)
      f.labels_input = static_cast<int>(i);
    f.inputs.push_back(model_input_of(v));
    if (dtype_is_int(v.dtype)) set_index_bound(forward, forward.inputs[i], f.inputs.back());
  }
  return f;
}

// What the data feeds a model trained with `loss`: the forward graph's inputs, and the target
// the loss adds to `eval` (its evaluation graph, `n` its loss nodes), with the classes a class
// target (or a one-hot one) ranges over. The evaluation graph is enough: the training graph's
// target and scored output are the same values, and building it (autodiff) costs far more.
FeedSpec feeds_of(const Graph& forward, const LossSpec& loss, const Graph& eval,
                  const LossNodes& n) {
  FeedSpec f = inputs_of(forward, loss.kind);
  if (loss.kind == LossKind::ModelOutput) return f;
  CB_CHECK(n.target != kNoValue && n.output != kNoValue);
  f.target = model_input_of(eval.value(n.target));
  f.target->name = "target";
  const Value& out = eval.value(n.output);
  if (loss.kind == LossKind::SoftmaxCrossEntropy) {
    const Dim c = out.shape[static_cast<size_t>(n.class_axis)];
    CB_CHECK(c.is_static());
    f.classes = c.value;
    f.ignore_index = loss.ignore_index;
  } else if (is_classifier_output(out)) {
    f.classes = out.shape[1].value;  // mse, l1, huber, bce: one-hot targets from class labels
  }
  return f;
}

}  // namespace

FeedSpec feed_spec(const Graph& forward, const LossSpec& loss) {
  LossNodes nodes;
  const Graph eval = build_eval_graph(forward, loss, &nodes);
  return feeds_of(forward, loss, eval, nodes);
}

TrainModel::TrainModel(const Graph& forward, const LossSpec& loss, Precision precision,
                       bool blocked_layouts, ConvAlgorithm conv_algorithm)
    : tg_(build_training_graph(forward, loss)) {
  fuse_batch_norm_relu(tg_.graph);
  fold_matmul_transposes(tg_.graph, blocked_layouts);
  bf16_nodes_ = set_compute_precision(tg_.graph, precision);
  const bool bf16 = precision == Precision::BF16;
  if (blocked_layouts) layouts_ = assign_blocked_layouts(tg_.graph, bf16);
  if (blocked_layouts && bf16) bf16_operands_ = assign_bf16_operands(tg_.graph);
  if (blocked_layouts) fuse_attention_heads(tg_.graph);
  // Training only: evaluation convolves directly, as cb-run does with the exported model, so
  // that the two give the same bits.
  if (blocked_layouts && conv_algorithm == ConvAlgorithm::Auto)
    winograd_nodes_ = choose_conv_algorithms(tg_.graph);
  // Last: the gradients read the forward's batch statistics (a pass over X fewer).
  save_batch_norm_statistics(tg_.graph);
  for (const Node& n : tg_.graph.nodes)
    conv_nodes_ += n.def && (n.def->name == "Conv" || n.def->name == "ConvGrad");
  LossNodes nodes;
  eval_graph_ = build_eval_graph(forward, loss, &nodes);
  feeds_ = feeds_of(forward, loss, eval_graph_, nodes);  // what feed_spec() gives without tg_
  label_input_ = feeds_.labels_input;
  fuse_batch_norm_relu(eval_graph_);
  fold_matmul_transposes(eval_graph_, blocked_layouts);
  set_compute_precision(eval_graph_, precision);
  if (blocked_layouts) assign_blocked_layouts(eval_graph_, bf16);
  if (blocked_layouts && bf16) assign_bf16_operands(eval_graph_);
  if (blocked_layouts) fuse_attention_heads(eval_graph_);
  forward_outputs_ = forward.outputs.size();
  const Graph& g = tg_.graph;
  const Value& out = g.value(tg_.output);
  if (tg_.loss_kind == LossKind::ModelOutput) {
    eval_loss_output_ = output_index(eval_graph_, out.name);
    for (size_t i = 0; i < eval_graph_.outputs.size(); ++i)
      if (is_classifier_output(eval_graph_.value(eval_graph_.outputs[i]))) {
        eval_output_ = static_cast<int64_t>(i);
        classes_ = eval_graph_.value(eval_graph_.outputs[i]).shape[1].value;
        break;
      }
  } else {
    target_input_ = input_index(g, tg_.target);
    eval_target_input_ = input_index(eval_graph_, nodes.target);
    eval_loss_output_ = static_cast<int64_t>(eval_graph_.outputs.size()) - 1;
    eval_output_ = output_index(eval_graph_, out.name);
    CB_CHECK(target_input_ >= 0 && eval_target_input_ >= 0 && eval_output_ >= 0);
    if (tg_.loss_kind == LossKind::SoftmaxCrossEntropy) {
      const Dim c = out.shape[static_cast<size_t>(tg_.spec.class_axis)];
      CB_CHECK(c.is_static());
      classes_ = c.value;
    } else if (is_classifier_output(out)) {
      classes_ = out.shape[1].value;  // mse, l1, huber, bce: one-hot targets from class labels
    }
    // The feed spec, read from the evaluation graph, is the training graph's.
    const ModelInput t = model_input_of(g.value(tg_.target));
    CB_CHECK(feeds_.target && feeds_.target->dtype == t.dtype && feeds_.target->dims == t.dims &&
             feeds_.classes == classes_);
  }
  CB_CHECK(eval_loss_output_ >= 0);

  // Flat layouts: parameters (and gradients, optimizer state) and BN state.
  for (ValueId p : tg_.params) {
    const Value& v = g.value(p);
    if (v.dtype != DType::F32)
      fail("parameter '{}' is {}: the trainer keeps parameters in f32 buffers", v.name,
           dtype_name(v.dtype));
    CB_CHECK(v.data && v.data->dtype == DType::F32);
    params_.push_back({p, flat_elems_, v.data->numel()});
    flat_elems_ = align_elems(flat_elems_ + v.data->numel());
    param_elems_ += v.data->numel();
  }
  if (params_.empty()) fail("the model has no trainable parameters");
  for (size_t v = 0; v < g.values.size(); ++v) {
    const Value& val = g.values[v];
    if (val.kind != ValueKind::State || !val.data) continue;
    if (val.dtype != DType::F32)
      fail("state '{}' is {}: the trainer keeps BatchNorm statistics in f32", val.name,
           dtype_name(val.dtype));
    state_.push_back({static_cast<ValueId>(v), state_elems_, val.data->numel()});
    state_elems_ = align_elems(state_elems_ + val.data->numel());
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    const Value& d = g.value(tg_.grads[i]);
    CB_CHECK(d.dtype == DType::F32 && shape_is_static(d.shape) &&
             shape_numel(d.shape)->value == params_[i].numel);
  }
}

size_t TrainModel::buffer_bytes(int64_t elems) {
  return static_cast<size_t>(std::max<int64_t>(elems, 16)) * sizeof(float);
}

void TrainModel::upload_initial(Device& dev, void* params, void* state) const {
  if (initial_released_)
    throw InternalError("the model's initial values were released: copy them from a flat buffer");
  const Graph& g = tg_.graph;
  for (const FlatSlot& s : params_)
    dev.upload(static_cast<float*>(params) + s.offset, g.value(s.value).data->bytes.data(),
               static_cast<size_t>(s.numel) * 4);
  for (const FlatSlot& s : state_)
    dev.upload(static_cast<float*>(state) + s.offset, g.value(s.value).data->bytes.data(),
               static_cast<size_t>(s.numel) * 4);
}

void TrainModel::release_initial() {
  // The evaluation graph is a copy of the forward graph's values at the same ids (autodiff only
  // appends), sharing the tensors: both copies go.
  for (const std::vector<FlatSlot>* slots : {&params_, &state_})
    for (const FlatSlot& s : *slots)
      for (Graph* g : {&tg_.graph, &eval_graph_}) {
        CB_CHECK(static_cast<size_t>(s.value) < g->values.size());
        g->values[static_cast<size_t>(s.value)].data.reset();
      }
  initial_released_ = true;
}

std::vector<int64_t> TrainModel::slot_dims(const FlatSlot& s) const {
  const Value& v = tg_.graph.value(s.value);
  CB_CHECK(shape_is_static(v.shape));
  return resolve(v.shape, 1);
}

std::unordered_map<ValueId, void*> TrainModel::train_bindings(void* params, void* grads,
                                                              void* state) const {
  std::unordered_map<ValueId, void*> bound;
  for (size_t i = 0; i < params_.size(); ++i) {
    bound[params_[i].value] = static_cast<float*>(params) + params_[i].offset;
    bound[tg_.grads[i]] = static_cast<float*>(grads) + params_[i].offset;
  }
  for (const FlatSlot& s : state_) bound[s.value] = static_cast<float*>(state) + s.offset;
  return bound;
}

std::vector<ValueId> TrainModel::bound_values() const {
  std::vector<ValueId> v;
  for (size_t i = 0; i < params_.size(); ++i) {
    v.push_back(params_[i].value);
    v.push_back(tg_.grads[i]);
  }
  for (const FlatSlot& s : state_) v.push_back(s.value);
  return v;
}

std::unordered_map<ValueId, void*> TrainModel::eval_bindings(const void* params,
                                                             const void* state) const {
  // The eval graph is a copy of the forward graph, whose values the training graph keeps at the
  // same ids (autodiff only appends).
  std::unordered_map<ValueId, void*> bound;
  auto bind = [&](const FlatSlot& s, const void* base) {
    CB_CHECK(static_cast<size_t>(s.value) < eval_graph_.values.size() &&
             eval_graph_.value(s.value).name == tg_.graph.value(s.value).name);
    bound[s.value] = const_cast<float*>(static_cast<const float*>(base)) + s.offset;
  };
  for (const FlatSlot& s : params_) bind(s, params);
  for (const FlatSlot& s : state_) bind(s, state);
  return bound;
}

std::vector<KernelArgs> TrainModel::state_copies(const Executor& train) const {
  std::vector<KernelArgs> copies;
  for (const auto& [s, u] : tg_.state_updates) {
    KernelArgs a;
    a.in = {train.view(u)};
    a.out = {train.view(s)};
    CB_CHECK(a.in[0].numel() == a.out[0].numel() && a.in[0].dtype == a.out[0].dtype);
    CB_CHECK(a.out[0].data != nullptr);
    copies.push_back(std::move(a));
  }
  return copies;
}

ModelInput model_input_of(const Value& v) {
  ModelInput in;
  in.name = v.name;
  in.dtype = v.dtype;
  for (size_t i = 1; i < v.shape.size(); ++i)
    in.dims.push_back(v.shape[i].is_static() ? v.shape[i].value : -1);
  return in;
}

namespace {

// `t` as executor input `i` of `g`: as it is, or (same type and number of values) reshaped to the
// dims the executor planned, through the staging tensor.
void set_input(Executor& ex, const Graph& g, size_t i, const Tensor& t, Tensor& staging,
               const char* what) {
  const std::vector<int64_t>& dims = ex.view(g.inputs[i]).dims;
  if (t.dims == dims) {
    ex.set_input(i, t);
    return;
  }
  int64_t want = 1;
  for (int64_t d : dims) want *= d;
  const Value& v = g.value(g.inputs[i]);
  if (t.numel() != want || t.dtype != v.dtype)
    fail("{} '{}' takes {} {} at batch {}, got {} {}", what, v.name, dtype_name(v.dtype),
         to_string(shape_of(dims)), ex.batch(), dtype_name(t.dtype), to_string(shape_of(t.dims)));
  staging.dtype = t.dtype;
  staging.dims = dims;
  staging.bytes = t.bytes;
  ex.set_input(i, staging);
}

}  // namespace

const Tensor* TrainModel::feed(Executor& ex, bool train, const Batch& b, InputStaging& st) const {
  const Graph& g = train ? tg_.graph : eval_graph_;
  const int64_t n = ex.batch();
  if (b.inputs.size() != feeds_.inputs.size())
    fail("a batch of {} tensors for a model of {} inputs", b.inputs.size(), feeds_.inputs.size());
  st.inputs.resize(b.inputs.size());
  for (size_t i = 0; i < b.inputs.size(); ++i)
    set_input(ex, g, i, b.inputs[i], st.inputs[i], "model input");
  const int64_t ti = train ? target_input_ : eval_target_input_;
  if (ti < 0) return nullptr;
  if (!train && b.target.bytes.empty()) {
    // Outputs without a target (a prediction): the loss reads zeros, and nothing reads the loss.
    const std::vector<int64_t>& dims = ex.view(g.inputs[static_cast<size_t>(ti)]).dims;
    st.target.dtype = g.value(g.inputs[static_cast<size_t>(ti)]).dtype;
    st.target.dims = dims;
    int64_t numel = 1;
    for (int64_t d : dims) numel *= d;
    st.target.bytes.assign(static_cast<size_t>(numel) * dtype_size(st.target.dtype), std::byte{0});
    ex.set_input(static_cast<size_t>(ti), st.target);
    return nullptr;
  }
  const Tensor& t = b.target;
  if (t.dtype == DType::I64 && classes_ > 0) {
    const int64_t* l = t.data<int64_t>();
    for (int64_t k = 0; k < t.numel(); ++k)
      if ((l[k] < 0 || l[k] >= classes_) && !(feeds_.ignore_index && l[k] == *feeds_.ignore_index))
        fail("label {} is out of range for the model's {} classes", l[k], classes_);
  }
  const Value& tv = g.value(g.inputs[static_cast<size_t>(ti)]);
  if (t.dtype == DType::I64 && dtype_is_float(tv.dtype) && classes_ > 0 && t.numel() == n) {
    // Class labels as the one-hot rows an mse over [N,C] compares with.
    CB_CHECK(tv.dtype == DType::F32);
    st.target.dtype = DType::F32;
    st.target.dims = {n, classes_};
    st.target.bytes.assign(static_cast<size_t>(n * classes_) * sizeof(float), std::byte{0});
    for (int64_t k = 0; k < n; ++k)
      st.target.data<float>()[k * classes_ + t.data<int64_t>()[k]] = 1;
    ex.set_input(static_cast<size_t>(ti), st.target);
    return &st.target;
  }
  set_input(ex, g, static_cast<size_t>(ti), t, st.target, "the loss's target");
  return &t;
}

double TrainModel::read_loss(Device& dev, const Executor& train) const {
  const TensorView& lv = train.view(tg_.loss);
  if (lv.dtype == DType::F64) {
    double loss = 0;
    dev.download(&loss, lv.data, sizeof loss, train.stream());
    return loss;
  }
  float f = 0;
  dev.download(&f, lv.data, sizeof f, train.stream());
  return f;
}

std::map<std::string, Tensor> TrainModel::copy_slots(Device& dev,
                                                     const std::vector<FlatSlot>& slots,
                                                     const void* base) const {
  std::map<std::string, Tensor> m;
  for (const FlatSlot& s : slots) {
    const Value& v = tg_.graph.value(s.value);
    Tensor t;
    t.dtype = DType::F32;
    t.dims = slot_dims(s);
    t.bytes.resize(static_cast<size_t>(s.numel) * sizeof(float));
    dev.download(t.bytes.data(), static_cast<const float*>(base) + s.offset, t.bytes.size());
    m.emplace(v.name, std::move(t));
  }
  return m;
}

// ---- evaluation --------------------------------------------------------------------------------

Evaluator::Evaluator(const TrainModel& m, Device& dev, const void* params, const void* state,
                     int64_t batch, ArenaLoan loan)
    : m_(m), dev_(dev), params_(params), state_(state), batch_(batch), loan_(loan) {
  CB_CHECK(batch > 0);
}

size_t Evaluator::own_arena_bytes() const {
  size_t b = 0;
  for (const auto& [n, ex] : ex_) b += ex->own_arena_bytes();
  return b;
}

Executor& Evaluator::executor(int64_t batch) {
  auto it = ex_.find(batch);
  if (it != ex_.end()) return *it->second;
  auto ex = std::make_unique<Executor>(m_.eval_graph_, dev_, batch,
                                       m_.eval_bindings(params_, state_), kSyncStream, loan_);
  return *ex_.emplace(batch, std::move(ex)).first->second;
}

std::vector<Tensor> Evaluator::outputs(const Batch& b) {
  const int64_t n = b.size();
  if (n <= 0 || n > batch_) fail("evaluation batch of {} examples: expected 1 to {}", n, batch_);
  Executor& ex = executor(n);
  m_.feed(ex, false, b, staging_);
  ex.run();
  std::vector<Tensor> out;
  for (size_t i = 0; i < m_.forward_outputs_; ++i) out.push_back(ex.output(i));
  return out;
}

EvalScore Evaluator::score(const NextBatch& next) {
  EvalScore r;
  Batch b;
  const bool own_loss = m_.tg_.loss_kind == LossKind::ModelOutput;
  std::optional<Metrics> metrics;
  if (!own_loss) metrics.emplace(m_.tg_);
  // Accuracy of a classifier's [N,C] output against class labels where the metrics do not score
  // it: a model with its own loss fed labels, an mse over one-hot rows made from labels.
  auto score_labels = [&](const Tensor& out, const int64_t* l, int64_t n) {
    const int64_t c = m_.classes_;
    for (int64_t i = 0; i < n; ++i) {
      int64_t arg = 0;
      for (int64_t j = 1; j < c; ++j)
        if (out.real_at(i * c + j) > out.real_at(i * c + arg)) arg = j;
      r.label_correct += arg == l[i];
    }
  };
  while (next(b)) {
    const int64_t n = b.size();
    CB_CHECK(n > 0 && n <= batch_);
    Executor& ex = executor(n);
    const Tensor* target = m_.feed(ex, false, b, staging_);
    ex.run();
    const double batch_loss = ex.output(static_cast<size_t>(m_.eval_loss_output_)).real_at(0);
    if (own_loss) {
      r.own_loss_sum += batch_loss * static_cast<double>(n);
      if (m_.eval_output_ >= 0 && m_.label_input_ >= 0) {
        score_labels(ex.output(static_cast<size_t>(m_.eval_output_)),
                     b.inputs[static_cast<size_t>(m_.label_input_)].data<int64_t>(), n);
        r.labels_scored = true;
      }
    } else {
      const Tensor out = ex.output(static_cast<size_t>(m_.eval_output_));
      if (!target)
        fail("an evaluation batch without targets: the loss has nothing to compare with");
      metrics->add(out, *target, batch_loss);
      if (target != &b.target && b.target.dtype == DType::I64) {
        score_labels(out, b.target.data<int64_t>(), n);
        r.labels_scored = true;
      }
    }
    r.count += n;
  }
  if (metrics) r.sums = metrics->sums();
  return r;
}

void EvalScore::merge(const EvalScore& o) {
  count += o.count;
  own_loss_sum += o.own_loss_sum;
  label_correct += o.label_correct;
  labels_scored = labels_scored || o.labels_scored;
  sums.merge(o.sums);
}

std::vector<double> EvalScore::pack() const {
  return {static_cast<double>(count),
          own_loss_sum,
          static_cast<double>(label_correct),
          labels_scored ? 1.0 : 0.0,
          static_cast<double>(sums.count),
          static_cast<double>(sums.counted),
          sums.loss_sum,
          static_cast<double>(sums.loss_counted),
          static_cast<double>(sums.scored),
          static_cast<double>(sums.correct),
          static_cast<double>(sums.correct5),
          static_cast<double>(sums.classes),
          sums.abs_err,
          sums.sq_err,
          static_cast<double>(sums.t_n),
          sums.t_mean,
          sums.t_m2};
}

EvalScore EvalScore::unpack(std::span<const double> v) {
  CB_CHECK(v.size() == kPacked);
  auto i64 = [](double x) { return static_cast<int64_t>(std::llround(x)); };
  EvalScore s;
  s.count = i64(v[0]);
  s.own_loss_sum = v[1];
  s.label_correct = i64(v[2]);
  s.labels_scored = v[3] != 0;
  s.sums.count = i64(v[4]);
  s.sums.counted = i64(v[5]);
  s.sums.loss_sum = v[6];
  s.sums.loss_counted = i64(v[7]);
  s.sums.scored = i64(v[8]);
  s.sums.correct = i64(v[9]);
  s.sums.correct5 = i64(v[10]);
  s.sums.classes = i64(v[11]);
  s.sums.abs_err = v[12];
  s.sums.sq_err = v[13];
  s.sums.t_n = i64(v[14]);
  s.sums.t_mean = v[15];
  s.sums.t_m2 = v[16];
  return s;
}

EvalResult Evaluator::result(const EvalScore& s) const {
  EvalResult r;
  r.count = s.count;
  if (r.count == 0) return r;
  if (m_.tg_.loss_kind == LossKind::ModelOutput) {
    r.loss = s.own_loss_sum / static_cast<double>(r.count);
    r.counted = r.count;
  } else {
    Metrics metrics(m_.tg_);
    metrics.merge(s.sums);
    const EvalMetrics v = metrics.result();
    r.loss = v.loss.value_or(0);
    r.counted = v.counted;
    r.accuracy = v.accuracy ? *v.accuracy : -1;
    r.correct = v.accuracy ? std::llround(*v.accuracy * static_cast<double>(v.counted)) : 0;
    r.top5 = v.top5;
    r.mae = v.mae;
    r.r2 = v.r2;
  }
  if (s.labels_scored) {
    r.correct = s.label_correct;
    r.accuracy = static_cast<double>(r.correct) / static_cast<double>(r.count);
    r.counted = r.count;
  }
  return r;
}

}  // namespace cb
