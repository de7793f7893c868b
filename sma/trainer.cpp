// The single-learner trainer and its loop (see trainer.h). Conventions: flat buffers hold f32
// tensors at 64-byte-aligned element offsets (kAlignElems) with zero padding, which every
// optimizer leaves at zero (zero gradient, zero parameter); gradients are written by the graph
// with "=" each step, so nothing is zeroed between steps.
#include "sma/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "runtime/error.h"
#include "runtime/ops/params.h"
#include "runtime/passes.h"

namespace cb {

namespace {

constexpr int64_t kAlignElems = 64 / sizeof(float);

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

TensorView flat_view(void* data, int64_t elems) {
  TensorView v;
  v.data = data;
  v.dtype = DType::F32;
  v.dims = {elems};
  return v;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Trainer::Trainer(const Graph& forward, const LossSpec& loss, Device& dev,
                 const TrainerOptions& opts)
    : dev_(dev), opts_(opts), tg_(build_training_graph(forward, loss)), eval_graph_(forward) {
  if (opts_.batch <= 0) fail("batch size must be positive, got {}", opts_.batch);
  if (opts_.eval_batch < 0) fail("eval batch size must not be negative, got {}", opts_.eval_batch);
  set_training(eval_graph_, false);
  const Graph& g = tg_.graph;

  // Inputs: one data input (float images, or integer token ids); labels are the loss's target,
  // or (a model with its own loss) the model's i64 [N] input.
  int64_t image = -1;
  for (size_t i = 0; i < forward.inputs.size(); ++i) {
    const Value& v = forward.value(forward.inputs[i]);
    if (tg_.loss_kind == LossKind::ModelOutput && v.dtype == DType::I64 &&
        v.shape == Shape{Dim::N()} && label_input_ < 0) {
      label_input_ = static_cast<int64_t>(i);
    } else if (image < 0 && (dtype_is_float(v.dtype) || dtype_is_int(v.dtype))) {
      image = static_cast<int64_t>(i);
    } else {
      fail("cannot feed the model's inputs ({}): the trainer feeds one data input{}",
           input_list(forward),
           tg_.loss_kind == LossKind::ModelOutput ? " and one i64 [N] labels input" : "");
    }
  }
  if (image < 0)
    fail("the model has no input to feed data to (inputs: {})", input_list(forward));
  if (tg_.loss_kind == LossKind::ModelOutput && label_input_ < 0)
    fail("the model computes its own loss but has no i64 [N] labels input (inputs: {})",
         input_list(forward));
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

  // Flat buffers: parameters (and gradients, optimizer state) and BN state.
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
  auto bytes = [](int64_t elems) {
    return static_cast<size_t>(std::max<int64_t>(elems, 16)) * sizeof(float);
  };
  param_buf_ = DeviceBuffer(dev, bytes(flat_elems_));
  grad_buf_ = DeviceBuffer(dev, bytes(flat_elems_));
  bool sgd = opts_.optimizer == OptimizerKind::Sgd;
  if (!sgd || opts_.momentum != 0) opt1_buf_ = DeviceBuffer(dev, bytes(flat_elems_));
  if (!sgd) opt2_buf_ = DeviceBuffer(dev, bytes(flat_elems_));
  state_buf_ = DeviceBuffer(dev, bytes(state_elems_));
  auto* pb = static_cast<float*>(param_buf_.get());
  auto* gb = static_cast<float*>(grad_buf_.get());
  auto* sb = static_cast<float*>(state_buf_.get());
  for (const Slot& s : params_)
    dev.upload(pb + s.offset, g.value(s.value).data->bytes.data(), s.numel * 4);
  for (const Slot& s : state_)
    dev.upload(sb + s.offset, g.value(s.value).data->bytes.data(), s.numel * 4);

  std::unordered_map<ValueId, void*> bound;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Slot& s = params_[i];
    const Value& d = g.value(tg_.grads[i]);
    CB_CHECK(d.dtype == DType::F32 && shape_is_static(d.shape) &&
             shape_numel(d.shape)->value == s.numel);
    bound[s.value] = pb + s.offset;
    bound[tg_.grads[i]] = gb + s.offset;
  }
  for (const Slot& s : state_) bound[s.value] = sb + s.offset;
  train_ex_ = std::make_unique<Executor>(g, dev, opts_.batch, bound);

  for (const auto& [s, u] : tg_.state_updates) {
    KernelArgs a;
    a.in = {train_ex_->view(u)};
    a.out = {train_ex_->view(s)};
    CB_CHECK(a.in[0].numel() == a.out[0].numel() && a.in[0].dtype == a.out[0].dtype);
    CB_CHECK(a.out[0].data != nullptr);
    state_copies_.push_back(std::move(a));
  }
  if (sgd) {
    ops::SgdParams p;
    p.momentum = static_cast<float>(opts_.momentum);
    p.nesterov = opts_.nesterov;
    p.weight_decay = static_cast<float>(opts_.weight_decay);
    opt_params_ = p;
    opt_args_.in = {flat_view(pb, flat_elems_), flat_view(gb, flat_elems_),
                    opt1_buf_.get() ? flat_view(opt1_buf_.get(), flat_elems_) : TensorView{}};
  } else {
    ops::AdamWParams p;
    p.beta1 = static_cast<float>(opts_.beta1);
    p.beta2 = static_cast<float>(opts_.beta2);
    p.eps = static_cast<float>(opts_.eps);
    p.weight_decay = static_cast<float>(opts_.weight_decay);
    opt_params_ = p;
    opt_args_.in = {flat_view(pb, flat_elems_), flat_view(gb, flat_elems_),
                    flat_view(opt1_buf_.get(), flat_elems_),
                    flat_view(opt2_buf_.get(), flat_elems_)};
  }
  opt_args_.params = &opt_params_;
}

Trainer::~Trainer() = default;

void Trainer::check_labels(const ImageSet& set, const std::string& what) const {
  if (classes_ > 0 && set.label_max() >= classes_)
    fail(
        "the {} labels go up to {} but the model's output has {} classes; this model does not fit "
        "this data set",
        what, set.label_max(), classes_);
  for (int64_t l : set.labels)
    if (l < 0) fail("the {} data has a negative label {}", what, l);
  const Value& in = eval_graph_.value(eval_graph_.inputs[image_input_]);
  auto per_example = shape_numel(in.shape);
  if (!per_example || !per_example->batch || per_example->value != set.image_elems())
    fail("model input '{}' is {} but the {} images are 1x{}x{} ({} values each)", in.name,
         to_string(in.shape), what, set.rows, set.cols, set.image_elems());
}

void Trainer::prepare_inputs(Executor& ex, const Graph& g, size_t image_input, const Tensor& images,
                             const Tensor& labels, bool train) {
  const int64_t n = ex.batch();
  const std::vector<int64_t>& dims = ex.view(g.inputs[image_input]).dims;
  if (images.dims == dims) {
    ex.set_input(image_input, images);
  } else {
    int64_t want = 1;
    for (int64_t d : dims) want *= d;
    if (images.numel() != want || images.dtype != DType::F32)
      fail("model input '{}' takes {} at batch {}, got images {}",
           g.value(g.inputs[image_input]).name, to_string(shape_of(dims)), n,
           to_string(shape_of(images.dims)));
    staged_images_.dtype = DType::F32;
    staged_images_.dims = dims;
    staged_images_.bytes = images.bytes;
    ex.set_input(image_input, staged_images_);
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
    staged_target_.dtype = DType::F32;
    staged_target_.dims = {n, classes_};
    staged_target_.bytes.assign(static_cast<size_t>(n * classes_) * sizeof(float), std::byte{0});
    for (int64_t i = 0; i < n; ++i)
      staged_target_.data<float>()[i * classes_ + labels.data<int64_t>()[i]] = 1;
    ex.set_input(target_input_, staged_target_);
  }
}

double Trainer::step(const Tensor& images, const Tensor& labels, double lr) {
  prepare_inputs(*train_ex_, tg_.graph, image_input_, images, labels, true);
  train_ex_->run();
  const TensorView& lv = train_ex_->view(tg_.loss);
  double loss = 0;
  if (lv.dtype == DType::F64) {
    dev_.download(&loss, lv.data, sizeof loss);
  } else {
    float f = 0;
    dev_.download(&f, lv.data, sizeof f);
    loss = f;
  }
  if (!std::isfinite(loss))
    fail(
        "training diverged at step {}: the loss is {} (learning rate {:g}); the parameters keep "
        "their values from before this step. Lower --lr (or add --warmup-steps)",
        steps_ + 1,
        std::isnan(loss) ? "NaN"
        : loss > 0       ? "+Inf"
                         : "-Inf",
        lr);
  if (opts_.optimizer == OptimizerKind::Sgd) {
    auto& p = std::any_cast<ops::SgdParams&>(opt_params_);
    p.lr = static_cast<float>(lr);
    p.first_step = steps_ == 0;
    dev_.launch(OpKind::SgdStep, opt_args_);
  } else {
    auto& p = std::any_cast<ops::AdamWParams&>(opt_params_);
    p.lr = static_cast<float>(lr);
    p.step = steps_ + 1;
    dev_.launch(OpKind::AdamWStep, opt_args_);
  }
  for (KernelArgs& a : state_copies_) dev_.launch(OpKind::Identity, a);
  dev_.synchronize();
  ++steps_;
  return loss;
}

Executor& Trainer::eval_executor(int64_t batch) {
  auto it = eval_ex_.find(batch);
  if (it != eval_ex_.end()) return *it->second;
  std::unordered_map<ValueId, void*> bound;
  auto* pb = static_cast<float*>(param_buf_.get());
  auto* sb = static_cast<float*>(state_buf_.get());
  // The eval graph is a copy of the forward graph, whose values the training graph keeps at the
  // same ids (autodiff only appends).
  auto bind = [&](const Slot& s, float* base) {
    CB_CHECK(static_cast<size_t>(s.value) < eval_graph_.values.size() &&
             eval_graph_.value(s.value).name == tg_.graph.value(s.value).name);
    bound[s.value] = base + s.offset;
  };
  for (const Slot& s : params_) bind(s, pb);
  for (const Slot& s : state_) bind(s, sb);
  auto ex = std::make_unique<Executor>(eval_graph_, dev_, batch, bound);
  return *eval_ex_.emplace(batch, std::move(ex)).first->second;
}

EvalResult Trainer::evaluate(const ImageSet& set) {
  EvalResult r;
  const int64_t eb = opts_.eval_batch > 0 ? opts_.eval_batch : opts_.batch;
  Tensor img, lab;
  double loss_sum = 0;
  for (int64_t begin = 0; begin < set.count; begin += eb) {
    const int64_t n = std::min(eb, set.count - begin);
    Executor& ex = eval_executor(n);
    set.slice(begin, n, img, lab);
    prepare_inputs(ex, eval_graph_, image_input_, img, lab, false);
    ex.run();
    const int64_t* l = lab.data<int64_t>();
    if (eval_output_ >= 0) {
      Tensor out = ex.output(static_cast<size_t>(eval_output_));
      const int64_t c = classes_;
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
        if (tg_.loss_kind == LossKind::SoftmaxCrossEntropy) {
          double m = z[arg], s = 0;
          for (int64_t j = 0; j < c; ++j) s += std::exp(z[j] - m);
          loss_sum += std::log(s) + m - z[l[i]];
        } else if (tg_.loss_kind == LossKind::MeanSquaredError) {
          double s = 0;
          for (int64_t j = 0; j < c; ++j) {
            double d = z[j] - (j == l[i] ? 1.0 : 0.0);
            s += d * d;
          }
          loss_sum += s / static_cast<double>(c);
        }
      }
    }
    if (tg_.loss_kind == LossKind::ModelOutput) {
      Tensor out = ex.output(static_cast<size_t>(eval_loss_output_));
      loss_sum += out.real_at(0) * static_cast<double>(n);
    }
    r.count += n;
  }
  if (r.count > 0) {
    r.loss = loss_sum / static_cast<double>(r.count);
    if (eval_output_ >= 0)
      r.accuracy = static_cast<double>(r.correct) / static_cast<double>(r.count);
  }
  return r;
}

namespace {
// Host copies of the slots of one flat f32 buffer, by value name.
std::map<std::string, Tensor> copy_slots(Device& dev, const Graph& g, const auto& slots,
                                         const void* base) {
  std::map<std::string, Tensor> m;
  for (const auto& s : slots) {
    const Value& v = g.value(s.value);
    Tensor t;
    t.dtype = DType::F32;
    t.dims = v.data->dims;
    t.bytes.resize(static_cast<size_t>(s.numel) * sizeof(float));
    dev.download(t.bytes.data(), static_cast<const float*>(base) + s.offset, t.bytes.size());
    m.emplace(v.name, std::move(t));
  }
  return m;
}
}  // namespace

std::map<std::string, Tensor> Trainer::trained_tensors() const {
  auto m = copy_slots(dev_, tg_.graph, params_, param_buf_.get());
  m.merge(copy_slots(dev_, tg_.graph, state_, state_buf_.get()));
  return m;
}

std::map<std::string, Tensor> Trainer::gradients() const {
  return copy_slots(dev_, tg_.graph, params_, grad_buf_.get());
}

std::vector<float> Trainer::flat_params() const {
  std::vector<float> f(static_cast<size_t>(flat_elems_));
  dev_.download(f.data(), param_buf_.get(), f.size() * sizeof(float));
  return f;
}

// ---- the loop ----------------------------------------------------------------------------------

RunSummary run_training(Trainer& t, const IdxDataset& data, const RunOptions& opts,
                        const std::function<void(const Progress&)>& on_eval) {
  opts.schedule.validate();
  if (opts.steps < 0) fail("--steps must not be negative, got {}", opts.steps);
  if (opts.steps == 0 && opts.epochs <= 0) fail("--epochs must be positive, got {}", opts.epochs);
  if (opts.eval_every < 0) fail("--eval-every must not be negative, got {}", opts.eval_every);
  t.check_labels(data.train, "training");
  const ImageSet test = data.test.head(opts.test_limit);
  t.check_labels(test, "test");
  BatchIterator it(data.train, t.options().batch, opts.shuffle, opts.seed);
  const int64_t spe = it.batches_per_epoch();
  const int64_t total = opts.steps > 0 ? opts.steps : opts.epochs * spe;
  const int64_t batch = t.options().batch;

  RunSummary sum;
  sum.losses.reserve(static_cast<size_t>(total));
  Tensor img, lab;
  const auto t_run = std::chrono::steady_clock::now();
  double loss_acc = 0, train_s_window = 0;
  int64_t steps_window = 0;
  for (int64_t s = 0; s < total; ++s) {
    const int64_t epoch = it.epoch();
    const double lr = opts.schedule.at(s, spe, total);
    it.next(img, lab);
    const auto t0 = std::chrono::steady_clock::now();
    const double loss = t.step(img, lab, lr);
    const double dt = seconds_since(t0);
    sum.train_seconds += dt;
    train_s_window += dt;
    sum.losses.push_back(loss);
    loss_acc += loss;
    ++steps_window;
    const bool last = s + 1 == total;
    const bool due = opts.eval_every > 0 ? (s + 1) % opts.eval_every == 0 : (s + 1) % spe == 0;
    if (due || last) {
      Progress p;
      p.epoch = epoch + 1;
      p.step = s + 1;
      p.train_loss = loss_acc / static_cast<double>(steps_window);
      p.lr = lr;
      p.images_per_s =
          train_s_window > 0 ? static_cast<double>(steps_window * batch) / train_s_window : 0;
      p.test = t.evaluate(test);
      sum.test = p.test;
      if (on_eval) on_eval(p);
      loss_acc = 0;
      train_s_window = 0;
      steps_window = 0;
    }
  }
  sum.steps = total;
  sum.images = total * batch;
  sum.seconds = seconds_since(t_run);
  sum.images_per_s =
      sum.train_seconds > 0 ? static_cast<double>(sum.images) / sum.train_seconds : 0;
  return sum;
}

}  // namespace cb
