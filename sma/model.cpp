// The model as trainers see it (see model.h).
#include "sma/model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/error.h"
#include "runtime/passes.h"

namespace cb {

namespace {

int64_t align_elems(int64_t n) { return (n + kAlignElems - 1) / kAlignElems * kAlignElems; }

bool is_classifier_output(const Value& v) {
  return dtype_is_float(v.dtype) && v.shape.size() == 2 && v.shape[0] == Dim::N() &&
         v.shape[1].is_static() && v.shape[1].value > 0;
}

std::string input_list(const Graph& g) {
  std::string s;
  for (ValueId v : g.inputs)
    s += fmt::format("{}'{}' {}{}", s.empty() ? "" : ", ", g.value(v).name,
                     dtype_name(g.value(v).dtype), to_string(g.value(v).shape));
  return s;
}

int64_t output_index(const Graph& g, const std::string& name) {
  for (size_t i = 0; i < g.outputs.size(); ++i)
    if (g.value(g.outputs[i]).name == name) return static_cast<int64_t>(i);
  return -1;
}

// Inputs: one data input (float images, or integer token ids); labels are the loss's target, or
// (a model with its own loss) the model's i64 [N] input.
void pick_inputs(const Graph& forward, LossKind kind, int64_t* image, int64_t* label) {
  *image = *label = -1;
  for (size_t i = 0; i < forward.inputs.size(); ++i) {
    const Value& v = forward.value(forward.inputs[i]);
    if (kind == LossKind::ModelOutput && v.dtype == DType::I64 && v.shape == Shape{Dim::N()} &&
        *label < 0) {
      *label = static_cast<int64_t>(i);
    } else if (*image < 0 && (dtype_is_float(v.dtype) || dtype_is_int(v.dtype))) {
      *image = static_cast<int64_t>(i);
    } else {
      fail("cannot feed the model's inputs ({}): the trainer feeds one data input{}",
           input_list(forward),
           kind == LossKind::ModelOutput ? " and one i64 [N] labels input" : "");
    }
  }
  if (*image < 0) fail("the model has no input to feed data to (inputs: {})", input_list(forward));
  if (kind == LossKind::ModelOutput && *label < 0)
    fail("the model computes its own loss but has no i64 [N] labels input (inputs: {})",
         input_list(forward));
}

}  // namespace

TrainModel::TrainModel(const Graph& forward, const LossSpec& loss)
    : tg_(build_training_graph(forward, loss)), eval_graph_(forward) {
  set_training(eval_graph_, false);
  const Graph& g = tg_.graph;

  int64_t image = -1;
  pick_inputs(forward, tg_.loss_kind, &image, &label_input_);
  image_input_ = static_cast<size_t>(image);
  if (forward.value(forward.inputs[image_input_]).shape.empty() ||
      forward.value(forward.inputs[image_input_]).shape[0] != Dim::N())
    fail("model input '{}' is {}: its first dim must be the batch N",
         forward.value(forward.inputs[image_input_]).name,
         to_string(forward.value(forward.inputs[image_input_]).shape));
  if (tg_.target != kNoValue) {
    auto it = std::find(g.inputs.begin(), g.inputs.end(), tg_.target);
    CB_CHECK(it != g.inputs.end());
    target_input_ = static_cast<size_t>(it - g.inputs.begin());
  }

  // The output scored for accuracy, and the number of classes.
  const Value& out = g.value(tg_.output);
  switch (tg_.loss_kind) {
    case LossKind::SoftmaxCrossEntropy:
    case LossKind::MeanSquaredError:
    case LossKind::L1:
    case LossKind::Huber:
    case LossKind::BinaryCrossEntropy:
      if (!is_classifier_output(out))
        fail(
            "output '{}' is {}{}: training on labelled images needs a classifier output [N,C] "
            "(logits for cross-entropy; for mse the targets are one-hot labels)",
            out.name, dtype_name(out.dtype), to_string(out.shape));
      classes_ = out.shape[1].value;
      eval_output_ = output_index(eval_graph_, out.name);
      break;
    case LossKind::ModelOutput:
      eval_loss_output_ = output_index(eval_graph_, out.name);
      for (size_t i = 0; i < eval_graph_.outputs.size(); ++i)
        if (is_classifier_output(eval_graph_.value(eval_graph_.outputs[i]))) {
          eval_output_ = static_cast<int64_t>(i);
          classes_ = eval_graph_.value(eval_graph_.outputs[i]).shape[1].value;
          break;
        }
      break;
  }
  CB_CHECK(tg_.loss_kind == LossKind::ModelOutput ? eval_loss_output_ >= 0 : eval_output_ >= 0);

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
  const Graph& g = tg_.graph;
  for (const FlatSlot& s : params_)
    dev.upload(static_cast<float*>(params) + s.offset, g.value(s.value).data->bytes.data(),
               static_cast<size_t>(s.numel) * 4);
  for (const FlatSlot& s : state_)
    dev.upload(static_cast<float*>(state) + s.offset, g.value(s.value).data->bytes.data(),
               static_cast<size_t>(s.numel) * 4);
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

void TrainModel::check_labels(const Examples& set, const std::string& what) const {
  const int64_t top = set.label_max();
  if (classes_ > 0 && top >= classes_)
    fail(
        "the {} labels go up to {} but the model's output has {} classes; this model does not fit "
        "this data set",
        what, top, classes_);
  for (int64_t i = 0; i < set.size(); ++i)
    if (set.label(i) < 0)
      fail("the {} data has a negative label {} ({})", what, set.label(i), set.name(i));
}

ModelInput TrainModel::data_input() const {
  const Value& v = eval_graph_.value(eval_graph_.inputs[image_input_]);
  return model_input_of(v);
}

ModelInput model_input_of(const Value& v) {
  ModelInput in;
  in.name = v.name;
  in.dtype = v.dtype;
  for (size_t i = 1; i < v.shape.size(); ++i)
    in.dims.push_back(v.shape[i].is_static() ? v.shape[i].value : -1);
  return in;
}

ModelInput model_input(const Graph& forward, const LossSpec& loss) {
  int64_t image = -1, label = -1;
  pick_inputs(forward, loss.kind, &image, &label);
  return model_input_of(forward.value(forward.inputs[static_cast<size_t>(image)]));
}

void TrainModel::feed(Executor& ex, bool train, const Tensor& images, const Tensor& labels,
                      InputStaging& st) const {
  const Graph& g = train ? tg_.graph : eval_graph_;
  const int64_t n = ex.batch();
  const std::vector<int64_t>& dims = ex.view(g.inputs[image_input_]).dims;
  if (images.dims == dims) {
    ex.set_input(image_input_, images);
  } else {
    int64_t want = 1;
    for (int64_t d : dims) want *= d;
    if (images.numel() != want || images.dtype != DType::F32)
      fail("model input '{}' takes {} at batch {}, got images {}",
           g.value(g.inputs[image_input_]).name, to_string(shape_of(dims)), n,
           to_string(shape_of(images.dims)));
    st.images.dtype = DType::F32;
    st.images.dims = dims;
    st.images.bytes = images.bytes;
    ex.set_input(image_input_, st.images);
  }
  CB_CHECK(labels.dtype == DType::I64 && labels.numel() == n);
  if (classes_ > 0) {
    const int64_t* l = labels.data<int64_t>();
    for (int64_t i = 0; i < n; ++i)
      if (l[i] < 0 || l[i] >= classes_)
        fail("label {} is out of range for the model's {} classes", l[i], classes_);
  }
  if (tg_.loss_kind == LossKind::ModelOutput) {
    ex.set_input(static_cast<size_t>(label_input_), labels);
  } else if (train && tg_.loss_kind == LossKind::SoftmaxCrossEntropy) {
    ex.set_input(target_input_, labels);
  } else if (train && tg_.loss_kind == LossKind::MeanSquaredError) {
    st.target.dtype = DType::F32;
    st.target.dims = {n, classes_};
    st.target.bytes.assign(static_cast<size_t>(n * classes_) * sizeof(float), std::byte{0});
    for (int64_t i = 0; i < n; ++i)
      st.target.data<float>()[i * classes_ + labels.data<int64_t>()[i]] = 1;
    ex.set_input(target_input_, st.target);
  }
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
    t.dims = v.data->dims;
    t.bytes.resize(static_cast<size_t>(s.numel) * sizeof(float));
    dev.download(t.bytes.data(), static_cast<const float*>(base) + s.offset, t.bytes.size());
    m.emplace(v.name, std::move(t));
  }
  return m;
}

// ---- evaluation --------------------------------------------------------------------------------

Evaluator::Evaluator(const TrainModel& m, Device& dev, const void* params, const void* state,
                     int64_t batch)
    : m_(m), dev_(dev), params_(params), state_(state), batch_(batch) {
  CB_CHECK(batch > 0);
}

Executor& Evaluator::executor(int64_t batch) {
  auto it = ex_.find(batch);
  if (it != ex_.end()) return *it->second;
  auto ex =
      std::make_unique<Executor>(m_.eval_graph_, dev_, batch, m_.eval_bindings(params_, state_));
  return *ex_.emplace(batch, std::move(ex)).first->second;
}

std::vector<Tensor> Evaluator::outputs(const Tensor& images, const Tensor& labels) {
  const int64_t n = labels.numel();
  if (n <= 0 || n > batch_) fail("evaluation batch of {} examples: expected 1 to {}", n, batch_);
  Executor& ex = executor(n);
  m_.feed(ex, false, images, labels, staging_);
  ex.run();
  std::vector<Tensor> out;
  for (size_t i = 0; i < m_.eval_graph_.outputs.size(); ++i) out.push_back(ex.output(i));
  return out;
}

EvalResult Evaluator::evaluate(const NextBatch& next) {
  EvalResult r;
  Tensor img, lab;
  double loss_sum = 0;
  const LossKind kind = m_.tg_.loss_kind;
  while (next(img, lab)) {
    const int64_t n = lab.numel();
    CB_CHECK(n > 0 && n <= batch_);
    Executor& ex = executor(n);
    m_.feed(ex, false, img, lab, staging_);
    ex.run();
    const int64_t* l = lab.data<int64_t>();
    if (m_.eval_output_ >= 0) {
      Tensor out = ex.output(static_cast<size_t>(m_.eval_output_));
      const int64_t c = m_.classes_;
      std::vector<double> zs(static_cast<size_t>(n * c));
      for (int64_t i = 0; i < n * c; ++i)
        zs[static_cast<size_t>(i)] =
            out.dtype == DType::F32 ? out.data<float>()[i] : out.real_at(i);
      for (int64_t i = 0; i < n; ++i) {
        const double* z = zs.data() + i * c;
        int64_t arg = 0;
        for (int64_t j = 1; j < c; ++j)
          if (z[j] > z[arg]) arg = j;
        r.correct += arg == l[i];
        if (kind == LossKind::SoftmaxCrossEntropy) {
          switch (m_.tg_.output_form) {
            case OutputForm::Logits: {
              double m = z[arg], s = 0;
              for (int64_t j = 0; j < c; ++j) s += std::exp(z[j] - m);
              loss_sum += std::log(s) + m - z[l[i]];
              break;
            }
            case OutputForm::Probabilities:  // what the loss on the logits equals
              loss_sum -= std::log(std::max(z[l[i]], std::numeric_limits<double>::min()));
              break;
            case OutputForm::LogProbabilities:
              loss_sum -= z[l[i]];
              break;
          }
        } else if (kind == LossKind::MeanSquaredError) {
          double s = 0;
          for (int64_t j = 0; j < c; ++j) {
            double d = z[j] - (j == l[i] ? 1.0 : 0.0);
            s += d * d;
          }
          loss_sum += s / static_cast<double>(c);
        }
      }
    }
    if (kind == LossKind::ModelOutput) {
      Tensor out = ex.output(static_cast<size_t>(m_.eval_loss_output_));
      loss_sum += out.real_at(0) * static_cast<double>(n);
    }
    r.count += n;
  }
  if (r.count > 0) {
    r.loss = loss_sum / static_cast<double>(r.count);
    if (m_.eval_output_ >= 0)
      r.accuracy = static_cast<double>(r.correct) / static_cast<double>(r.count);
  }
  return r;
}

}  // namespace cb
