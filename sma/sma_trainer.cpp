// SMA's learners, devices and steps (the algorithm and the choices are in sma_trainer.h).
// Threads: one persistent Worker per learner (its CPU device = a thread pool over its pinned
// cores is created on it, so the pool's calling thread is the learner's) and one per device (the
// "synchronisation stream": the fused SMA kernels, the all-reduce, the z update). The calling
// thread only hands out work and checks what comes back: phase A (all learners: forward and
// backward), the loss check, phase B (all devices: SmaStep, all-reduce, SmaCentralStep), the z
// check. Nothing is allocated per step.
#include "sma/sma_trainer.h"

#include <algorithm>
#include <cmath>

#include "runtime/error.h"
#include "runtime/memory_plan.h"
#include "runtime/ops/params.h"
#include "runtime/thread_pool.h"
#include "sma/worker.h"

namespace cb {

namespace {

TensorView flat(const void* data, int64_t elems) {
  TensorView v;
  v.data = const_cast<void*>(data);
  v.dtype = DType::F32;
  v.dims = {elems};
  return v;
}

float* at(const DeviceBuffer& b, int64_t offset) { return static_cast<float*>(b.get()) + offset; }

// Dropout stream of global learner g: 0 for learner 0 (the single learner's), distinct otherwise.
uint64_t learner_stream(int g) {
  if (g == 0) return 0;
  uint64_t x = static_cast<uint64_t>(g) + 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::string mib(int64_t bytes) {
  return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20));
}

// Waits for every worker, then rethrows the first failure (none is left running).
template <class Range, class Get>
void wait_all(const Range& r, Get get) {
  std::exception_ptr first;
  for (const auto& x : r) {
    try {
      get(x).wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace

struct SmaTrainer::Learner {
  int global = 0, device = 0, row = 0;
  std::vector<int> cores;
  std::unique_ptr<Device> dev;
  std::unique_ptr<Executor> ex;
  std::vector<KernelArgs> copies;  // BN state updates -> its state row
  InputStaging staging;
  const Batch* batch = nullptr;
  double loss = 0;
  Worker worker;  // last: joined before the rest is destroyed
};

struct SmaTrainer::Group {
  int index = 0;
  std::vector<int> cores;
  std::unique_ptr<Collective> coll;
  std::unique_ptr<Device> dev;
  DeviceBuffer params, grads, vel, snap, state;        // [k][P] x 4, [k][S]
  DeviceBuffer z, z_prev, sum, mean, state_avg, flag;  // [P] x 4, [S], [1]
  std::vector<uint8_t> first;                          // per row: next step starts the velocity
  std::any step_params, central_params, state_sum_params, param_sum_params;
  KernelArgs sync_args, local_args, central_args, state_sum_args, param_sum_args;
  Worker driver;  // last: joined before the rest is destroyed
};

SmaTrainer::SmaTrainer(const Graph& forward, const LossSpec& loss, const SmaOptions& opts)
    : opts_(opts), model_(forward, loss) {
  const TrainerOptions& t = opts_.train;
  if (t.batch <= 0) fail("batch size must be positive, got {}", t.batch);
  if (t.eval_batch < 0) fail("eval batch size must not be negative, got {}", t.eval_batch);
  if (t.optimizer != OptimizerKind::Sgd)
    fail("SMA's learners take SGD steps (with momentum): --optimizer adamw trains one learner");
  if (!(t.momentum >= 0 && t.momentum < 1))
    fail("--momentum must be in [0, 1), got {}", t.momentum);
  if (!(t.weight_decay >= 0)) fail("--weight-decay must not be negative, got {}", t.weight_decay);
  if (opts_.alpha && !(*opts_.alpha >= 0 && *opts_.alpha <= 1))
    fail("--alpha must be in [0, 1], got {}", *opts_.alpha);
  if (!(opts_.central_momentum >= 0 && opts_.central_momentum < 1))
    fail("--central-momentum must be in [0, 1), got {}", opts_.central_momentum);
  if (opts_.sync_every < 1) fail("--sync-every must be at least 1, got {}", opts_.sync_every);
  if (opts_.devices < 1) fail("the number of devices must be at least 1, got {}", opts_.devices);
  if (opts_.learners < 1) fail("--learners must be at least 1, got {}", opts_.learners);
  if (opts_.memory_budget < 0)
    fail("--memory-budget must not be negative, got {}", opts_.memory_budget);
  if (opts_.cores.empty())
    for (int c = 0; c < ThreadPool::hardware_threads(); ++c) opts_.cores.push_back(c);
  const int ncores = static_cast<int>(opts_.cores.size());
  if (ncores < opts_.devices)
    fail("--devices cpu:{} needs at least {} cores, {} given (--threads)", opts_.devices,
         opts_.devices, ncores);

  eval_dev_ = make_cpu_device(ncores);  // not pinned: the learners' threads are
  const int64_t P = model_.flat_elems(), S = model_.state_elems();
  const MemoryPlan plan =
      plan_memory(model_.training_graph().graph, t.batch, model_.bound_values());
  mem_.arena = plan.bytes_peak;
  mem_.per_replica = plan.bytes_peak + 4 * P * 4 + S * 4;
  mem_.fixed = 4 * P * 4 + S * 4 + 64;
  mem_.budget =
      opts_.memory_budget > 0 ? opts_.memory_budget : eval_dev_->caps().memory_free / opts_.devices;

  auto colls = make_shared_memory_collectives(opts_.devices);
  for (int d = 0; d < opts_.devices; ++d) {
    auto g = std::make_unique<Group>();
    g->index = d;
    g->coll = std::move(colls[static_cast<size_t>(d)]);
    for (int c = d * ncores / opts_.devices; c < (d + 1) * ncores / opts_.devices; ++c)
      g->cores.push_back(opts_.cores[static_cast<size_t>(c)]);
    groups_.push_back(std::move(g));
  }
  for (auto& gp : groups_) {
    Group& g = *gp;
    g.driver.post([&, P, S] {
      g.dev = make_cpu_device(static_cast<int>(g.cores.size()), g.cores);
      for (DeviceBuffer* b : {&g.z, &g.z_prev, &g.sum, &g.mean})
        *b = DeviceBuffer(*g.dev, TrainModel::buffer_bytes(P));
      g.state_avg = DeviceBuffer(*g.dev, TrainModel::buffer_bytes(S));
      g.flag = DeviceBuffer(*g.dev, 64);
      model_.upload_initial(*g.dev, g.z.get(), g.state_avg.get());
      model_.upload_initial(*g.dev, g.z_prev.get(), g.state_avg.get());
      g.central_params = ops::SmaCentralStepParams{static_cast<float>(opts_.central_momentum)};
      g.central_args.params = &g.central_params;
      g.central_args.in = {flat(g.z.get(), P), flat(g.z_prev.get(), P), flat(g.sum.get(), P)};
      g.central_args.out = {flat(g.flag.get(), 1)};
      ops::SmaStepParams sp;
      sp.momentum = static_cast<float>(t.momentum);
      sp.weight_decay = static_cast<float>(t.weight_decay);
      sp.nesterov = t.nesterov;
      g.step_params = sp;
    });
  }
  wait_all(groups_, [](const auto& g) -> Worker& { return g->driver; });
  set_learners(opts_.learners);
}

SmaTrainer::~SmaTrainer() {
  learners_.clear();
  groups_.clear();
}

const std::vector<int>& SmaTrainer::device_cores(int d) const {
  return groups_.at(static_cast<size_t>(d))->cores;
}

std::vector<int> SmaTrainer::learner_cores(int learner) const {
  const std::vector<int>& c = device_cores(learner / k_);
  const int j = learner % k_, m = static_cast<int>(c.size());
  if (k_ > m) return {c[static_cast<size_t>(j % m)]};  // several learners share a core
  return std::vector<int>(c.begin() + j * m / k_, c.begin() + (j + 1) * m / k_);
}

void SmaTrainer::set_learners(int k) {
  if (k < 1) fail("--learners must be at least 1, got {}", k);
  if (k == k_) return;
  if (!fits(k))
    fail(
        "out of memory: {} learner{} per device need {} ({} per replica: a {} activation arena, "
        "4 flat parameter buffers and the BN statistics; {} shared), but the budget is {} per "
        "device; use fewer --learners, a smaller --batch-size or a larger --memory-budget",
        k, k == 1 ? "" : "s", mib(mem_.need(k)), mib(mem_.per_replica), mib(mem_.arena),
        mib(mem_.fixed), mib(mem_.budget));
  if (k_ > 0) average_for_eval();  // new learners take the averaged BN statistics
  learners_.clear();
  const int old = k_;
  const int64_t P = model_.flat_elems(), S = model_.state_elems();
  for (auto& gp : groups_) {
    Group& g = *gp;
    g.driver.post([&, P, S, k, old] {
      Device& dev = *g.dev;
      auto copy = [&](void* dst, const void* src, int64_t elems) {
        if (elems == 0) return;
        KernelArgs a;
        a.in = {flat(src, elems)};
        a.out = {flat(dst, elems)};
        dev.launch(OpKind::Identity, a);
      };
      DeviceBuffer params(dev, TrainModel::buffer_bytes(k * P)),
          grads(dev, TrainModel::buffer_bytes(k * P)), vel(dev, TrainModel::buffer_bytes(k * P)),
          snap(dev, TrainModel::buffer_bytes(k * P)), state(dev, TrainModel::buffer_bytes(k * S));
      const int keep = std::min(k, old);
      copy(params.get(), g.params.get(), keep * P);
      copy(vel.get(), g.vel.get(), keep * P);
      copy(state.get(), g.state.get(), keep * S);
      for (int r = keep; r < k; ++r) {
        copy(at(params, r * P), g.z.get(), P);
        copy(at(state, r * S), g.state_avg.get(), S);
      }
      dev.synchronize();
      g.params = std::move(params);
      g.grads = std::move(grads);
      g.vel = std::move(vel);
      g.snap = std::move(snap);
      g.state = std::move(state);
      g.first.resize(static_cast<size_t>(k), 1);
      auto& sp = std::any_cast<ops::SmaStepParams&>(g.step_params);
      sp.first_step = g.first;
      g.local_args.params = g.sync_args.params = &g.step_params;
      g.local_args.in = {flat(g.params.get(), k * P), flat(g.grads.get(), k * P),
                         flat(g.vel.get(), k * P), flat(g.snap.get(), k * P)};
      g.sync_args.in = g.local_args.in;
      g.sync_args.in.push_back(flat(g.z.get(), P));
      g.sync_args.in.push_back(flat(g.sum.get(), P));
      g.state_sum_args.params = &g.state_sum_params;
      g.state_sum_args.in = {flat(g.state.get(), k * S)};
      g.state_sum_args.out = {flat(g.state_avg.get(), S)};
      g.param_sum_args.params = &g.param_sum_params;
      g.param_sum_args.in = {flat(g.params.get(), k * P)};
      g.param_sum_args.out = {flat(g.mean.get(), P)};
    });
  }
  wait_all(groups_, [](const auto& g) -> Worker& { return g->driver; });
  k_ = k;
  alpha_ = opts_.alpha.value_or(1.0 / total_learners());
  start_learners();
}

void SmaTrainer::start_learners() {
  const int64_t P = model_.flat_elems(), S = model_.state_elems();
  for (int d = 0; d < devices(); ++d) {
    Group& g = *groups_[static_cast<size_t>(d)];
    for (int j = 0; j < k_; ++j) {
      auto l = std::make_unique<Learner>();
      l->global = d * k_ + j;
      l->device = d;
      l->row = j;
      l->cores = learner_cores(l->global);
      Learner& L = *l;
      L.worker.post([&, P, S, j] {
        L.dev = make_cpu_device(static_cast<int>(L.cores.size()), L.cores);
        L.ex = std::make_unique<Executor>(
            model_.training_graph().graph, *L.dev, opts_.train.batch,
            model_.train_bindings(at(g.params, j * P), at(g.grads, j * P), at(g.state, j * S)));
        L.ex->set_rng(learner_stream(L.global), static_cast<uint64_t>(steps_));
        L.copies = model_.state_copies(*L.ex);
      });
      learners_.push_back(std::move(l));
    }
  }
  wait_all(learners_, [](const auto& l) -> Worker& { return l->worker; });
}

std::vector<double> SmaTrainer::step(const std::vector<Batch>& batches, double lr) {
  const int K = total_learners();
  if (static_cast<int>(batches.size()) != K)
    fail("an SMA step takes one batch per learner: {} learners, {} batches", K, batches.size());
  // Phase A: every learner's forward and backward, concurrently.
  for (auto& lp : learners_) {
    Learner& L = *lp;
    L.batch = &batches[static_cast<size_t>(L.global)];
    L.worker.post([this, &L] {
      model_.feed(*L.ex, true, L.batch->images, L.batch->labels, L.staging);
      L.ex->run();
      L.loss = model_.read_loss(*L.dev, *L.ex);
      if (std::isfinite(L.loss))
        for (KernelArgs& a : L.copies) L.dev->launch(OpKind::Identity, a);
      L.dev->synchronize();
    });
  }
  wait_all(learners_, [](const auto& l) -> Worker& { return l->worker; });
  std::vector<double> losses;
  for (auto& lp : learners_) {
    const double loss = lp->loss;
    if (!std::isfinite(loss))
      fail(
          "training diverged at step {}: learner {} (device {}, row {}) has loss {} (learning "
          "rate {:g}); no replica and not z were updated at this step. Lower --lr (or add "
          "--warmup-steps)",
          steps_ + 1, lp->global, lp->device, lp->row,
          std::isnan(loss) ? "NaN"
          : loss > 0       ? "+Inf"
                           : "-Inf",
          lr);
    losses.push_back(loss);
  }
  // Phase B: per device the fused update and intra-device sum, the cross-device sum, z.
  const bool sync = (steps_ + 1) % opts_.sync_every == 0;
  const int64_t P = model_.flat_elems();
  for (auto& gp : groups_) {
    Group& g = *gp;
    g.driver.post([this, &g, lr, sync, P] {
      auto& sp = std::any_cast<ops::SmaStepParams&>(g.step_params);
      sp.lr = static_cast<float>(lr);
      sp.alpha = static_cast<float>(alpha_);
      sp.first_step = g.first;
      g.dev->launch(OpKind::SmaStep, sync ? g.sync_args : g.local_args);
      std::fill(g.first.begin(), g.first.end(), 0);
      if (sync) {
        g.dev->synchronize();
        g.coll->allreduce_sum(static_cast<float*>(g.sum.get()), P);
        g.dev->launch(OpKind::SmaCentralStep, g.central_args);
      }
      g.dev->synchronize();
    });
  }
  wait_all(groups_, [](const auto& g) -> Worker& { return g->driver; });
  ++steps_;
  if (sync) {
    float bad = 0;
    for (auto& gp : groups_) {
      float b = 0;
      gp->dev->download(&b, gp->flag.get(), sizeof b);
      bad = std::max(bad, b);
    }
    if (bad > 0) {
      std::string who;
      for (int l = 0; l < K; ++l) {
        std::vector<float> r = replica(l);
        if (std::any_of(r.begin(), r.end(), [](float x) { return !std::isfinite(x); }))
          who += fmt::format("{}{}", who.empty() ? "" : ", ", l);
      }
      fail(
          "training diverged at step {}: the central model z has {} non-finite values after the "
          "SMA update ({}; learning rate {:g}). Lower --lr (or add --warmup-steps)",
          steps_, static_cast<int64_t>(bad),
          who.empty() ? std::string("every learner's replica is finite: z itself overflowed")
                      : fmt::format("non-finite replicas: learner{} {}",
                                    who.find(',') == std::string::npos ? "" : "s", who),
          lr);
    }
  }
  return losses;
}

bool SmaTrainer::reset_to_central() {
  // With alpha 0 nothing pulls z: it is still the initial model, and the learners are independent
  // SGD runs (one learner: plain SGD, which keeps its momentum across a learning-rate drop).
  if (alpha_ == 0) return false;
  const int64_t P = model_.flat_elems();
  for (auto& gp : groups_) {
    Group& g = *gp;
    g.driver.post([this, &g, P] {
      for (int r = 0; r < k_; ++r) {
        KernelArgs a;
        a.in = {flat(g.z.get(), P)};
        a.out = {flat(at(g.params, r * P), P)};
        g.dev->launch(OpKind::Identity, a);
      }
      const std::vector<float> zeros(static_cast<size_t>(k_ * P), 0.0f);
      g.dev->upload(g.vel.get(), zeros.data(), zeros.size() * sizeof(float));
      std::fill(g.first.begin(), g.first.end(), 1);
      g.dev->synchronize();
    });
  }
  wait_all(groups_, [](const auto& g) -> Worker& { return g->driver; });
  return true;
}

void SmaTrainer::average_for_eval() {
  const float scale = static_cast<float>(1.0 / total_learners());
  const int64_t P = model_.flat_elems(), S = model_.state_elems();
  const bool mean = alpha_ == 0;
  for (auto& gp : groups_) {
    Group& g = *gp;
    g.driver.post([&g, scale, P, S, mean] {
      g.state_sum_params = ops::SmaRowSumParams{scale};
      g.param_sum_params = ops::SmaRowSumParams{scale};
      if (S > 0) {
        g.dev->launch(OpKind::SmaRowSum, g.state_sum_args);
        g.dev->synchronize();
        g.coll->allreduce_sum(static_cast<float*>(g.state_avg.get()), S);
      }
      if (mean) {
        g.dev->launch(OpKind::SmaRowSum, g.param_sum_args);
        g.dev->synchronize();
        g.coll->allreduce_sum(static_cast<float*>(g.mean.get()), P);
      }
    });
  }
  wait_all(groups_, [](const auto& g) -> Worker& { return g->driver; });
}

Evaluator& SmaTrainer::evaluator() {
  Group& g = *groups_[0];
  const int64_t eb = opts_.train.eval_batch > 0 ? opts_.train.eval_batch : opts_.train.batch;
  std::unique_ptr<Evaluator>& e = alpha_ == 0 ? eval_mean_ : eval_z_;
  if (!e)
    e = std::make_unique<Evaluator>(model_, *eval_dev_, alpha_ == 0 ? g.mean.get() : g.z.get(),
                                    g.state_avg.get(), eb);
  return *e;
}

EvalResult SmaTrainer::evaluate(const ImageSet& set) {
  average_for_eval();
  return evaluator().evaluate(set);
}

std::map<std::string, Tensor> SmaTrainer::trained_tensors() {
  average_for_eval();
  Group& g = *groups_[0];
  auto m = model_.copy_slots(*g.dev, model_.param_slots(), alpha_ == 0 ? g.mean.get() : g.z.get());
  m.merge(model_.copy_slots(*g.dev, model_.state_slots(), g.state_avg.get()));
  return m;
}

void SmaTrainer::check_labels(const ImageSet& set, const std::string& what) const {
  model_.check_labels(set, what);
}

std::vector<float> SmaTrainer::central(int device) const {
  const Group& g = *groups_.at(static_cast<size_t>(device));
  std::vector<float> f(static_cast<size_t>(model_.flat_elems()));
  g.dev->download(f.data(), g.z.get(), f.size() * sizeof(float));
  return f;
}

std::vector<float> SmaTrainer::row(Rows which, int learner) const {
  CB_CHECK(learner >= 0 && learner < total_learners());
  const Group& g = *groups_[static_cast<size_t>(learner / k_)];
  const DeviceBuffer& b = which == Rows::Params     ? g.params
                          : which == Rows::Velocity ? g.vel
                                                    : g.snap;
  const int64_t P = model_.flat_elems();
  std::vector<float> f(static_cast<size_t>(P));
  g.dev->download(f.data(), at(b, (learner % k_) * P), f.size() * sizeof(float));
  return f;
}

std::vector<float> SmaTrainer::replica(int learner) const { return row(Rows::Params, learner); }
std::vector<float> SmaTrainer::velocity(int learner) const { return row(Rows::Velocity, learner); }
std::vector<float> SmaTrainer::snapshot(int learner) const { return row(Rows::Snapshot, learner); }

}  // namespace cb
