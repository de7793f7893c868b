// The single-learner trainer and its loop (see trainer.h). Conventions: flat buffers as in
// sma/model.h; gradients are written by the graph with "=" each step, so nothing is zeroed
// between steps.
#include "sma/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "runtime/error.h"
#include "runtime/ops/params.h"

namespace cb {

namespace {

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
    : dev_(dev), opts_(opts), model_(forward, loss) {
  if (opts_.batch <= 0) fail("batch size must be positive, got {}", opts_.batch);
  if (opts_.eval_batch < 0) fail("eval batch size must not be negative, got {}", opts_.eval_batch);
  const int64_t flat = model_.flat_elems();
  const size_t bytes = TrainModel::buffer_bytes(flat);
  param_buf_ = DeviceBuffer(dev, bytes);
  grad_buf_ = DeviceBuffer(dev, bytes);
  bool sgd = opts_.optimizer == OptimizerKind::Sgd;
  if (!sgd || opts_.momentum != 0) opt1_buf_ = DeviceBuffer(dev, bytes);
  if (!sgd) opt2_buf_ = DeviceBuffer(dev, bytes);
  state_buf_ = DeviceBuffer(dev, TrainModel::buffer_bytes(model_.state_elems()));
  model_.upload_initial(dev, param_buf_.get(), state_buf_.get());
  train_ex_ = std::make_unique<Executor>(
      model_.training_graph().graph, dev, opts_.batch,
      model_.train_bindings(param_buf_.get(), grad_buf_.get(), state_buf_.get()));
  state_copies_ = model_.state_copies(*train_ex_);
  evaluator_ = std::make_unique<Evaluator>(model_, dev, param_buf_.get(), state_buf_.get(),
                                           opts_.eval_batch > 0 ? opts_.eval_batch : opts_.batch);
  if (sgd) {
    ops::SgdParams p;
    p.momentum = static_cast<float>(opts_.momentum);
    p.nesterov = opts_.nesterov;
    p.weight_decay = static_cast<float>(opts_.weight_decay);
    opt_params_ = p;
    opt_args_.in = {flat_view(param_buf_.get(), flat), flat_view(grad_buf_.get(), flat),
                    opt1_buf_.get() ? flat_view(opt1_buf_.get(), flat) : TensorView{}};
  } else {
    ops::AdamWParams p;
    p.beta1 = static_cast<float>(opts_.beta1);
    p.beta2 = static_cast<float>(opts_.beta2);
    p.eps = static_cast<float>(opts_.eps);
    p.weight_decay = static_cast<float>(opts_.weight_decay);
    opt_params_ = p;
    opt_args_.in = {flat_view(param_buf_.get(), flat), flat_view(grad_buf_.get(), flat),
                    flat_view(opt1_buf_.get(), flat), flat_view(opt2_buf_.get(), flat)};
  }
  opt_args_.params = &opt_params_;
}

Trainer::~Trainer() = default;

void Trainer::check_labels(const ImageSet& set, const std::string& what) const {
  model_.check_labels(set, what);
}

double Trainer::step(const Tensor& images, const Tensor& labels, double lr) {
  model_.feed(*train_ex_, true, images, labels, staging_);
  train_ex_->run();
  const double loss = model_.read_loss(dev_, *train_ex_);
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

EvalResult Trainer::evaluate(const ImageSet& set) { return evaluator_->evaluate(set); }

std::map<std::string, Tensor> Trainer::trained_tensors() const {
  auto m = model_.copy_slots(dev_, model_.param_slots(), param_buf_.get());
  m.merge(model_.copy_slots(dev_, model_.state_slots(), state_buf_.get()));
  return m;
}

std::map<std::string, Tensor> Trainer::gradients() const {
  return model_.copy_slots(dev_, model_.param_slots(), grad_buf_.get());
}

std::vector<float> Trainer::flat_params() const {
  std::vector<float> f(static_cast<size_t>(model_.flat_elems()));
  dev_.download(f.data(), param_buf_.get(), f.size() * sizeof(float));
  return f;
}

// ---- the loop ----------------------------------------------------------------------------------

RunSummary run_training(Trainer& t, const Dataset& data, const RunOptions& opts,
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
