// The trainer's learners, devices and steps (the algorithm and the choices are in trainer.h).
// Threads: one persistent Worker per learner (it creates the learner's stream on its device, so
// the stream's pool is driven, and pinned, by that thread) and one per device (the driver of the
// device's synchronisation stream: the fused SMA kernels, the collective, evaluation). The calling
// thread only hands out work and checks what comes back. Nothing is allocated per step.
#include "sma/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "runtime/error.h"
#include "runtime/host_memory.h"
#include "runtime/memory_plan.h"
#include "sma/device_replicas.h"

namespace cb {

namespace {

// Dropout stream of global learner g: 0 for learner 0 (the single learner's), distinct otherwise.
uint64_t learner_stream(int g) {
  if (g == 0) return 0;
  uint64_t x = static_cast<uint64_t>(g) + 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
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

using Clock = std::chrono::steady_clock;
double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string loss_text(double loss) { return std::isnan(loss) ? "NaN" : loss > 0 ? "+Inf" : "-Inf"; }

}  // namespace

struct Trainer::Learner {
  ~Learner() {  // the worker is still alive and idle here; no launch can follow
    if (dev && stream != kSyncStream) dev->destroy_stream(stream);
  }
  int local = 0, device = 0, row = 0;
  Device* dev = nullptr;
  Stream stream = kSyncStream;
  std::unique_ptr<Executor> ex;
  std::vector<KernelArgs> copies;  // BN state updates -> its state row
  InputStaging staging;
  const Batch* batch = nullptr;
  double loss = 0;
  Event done;  // its forward and backward of this step, on its stream
  std::exception_ptr error;
  Worker worker;  // last: joined before the rest is destroyed
};

template <class F>
void Trainer::on_drivers(F&& f) {
  settle();
  for (auto& gp : groups_) {
    Group& g = *gp;
    g.driver.post([&f, &g] { f(g); });
  }
  wait_all(groups_, [](const auto& g) -> Worker& { return g->driver; });
}

std::string mib(int64_t bytes) {
  return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20));
}

double Trainer::central_scale() const {
  const int K = total_learners();
  switch (opts_.rule(K)) {
    case SmaRule::Paper:
    case SmaRule::PostLocal:
      return 1.0;
    case SmaRule::Elastic:  // eta (mean - z) from sum_j alpha (theta_j - z)
      return alpha_ == 0 ? 1.0 : opts_.eta(K) / (K * alpha_);
    case SmaRule::SlowMo:  // the sum is mean - z already
      return opts_.eta(K);
  }
  return 1.0;
}

Trainer::Trainer(const Graph& forward, const LossSpec& loss, const TrainerOptions& opts,
                 Placement where)
    : opts_(opts),
      model_(
          forward, loss, opts.precision,
          opts.blocked_layouts && std::all_of(where.devices.begin(), where.devices.end(),
                                              [](Device* d) { return d->caps().blocked_layouts; }),
          opts.conv_algorithm) {
  const TrainerOptions& t = opts_;
  t.validate();
  if (where.devices.empty()) fail("the trainer needs at least one device");
  if (t.precision == Precision::BF16)
    for (Device* d : where.devices) {
      const DeviceCaps c = d->caps();
      if (!c.bf16)
        fail("--precision bf16: {} cannot run bf16 convolutions at speed: {}. Use --precision f32",
             c.name, c.bf16_why);
    }
  CB_CHECK(where.collectives.size() == where.devices.size());
  const int ranks = where.collectives[0]->size();
  for (Collective* c : where.collectives) CB_CHECK(c && c->size() == ranks);

  const int64_t P = model_.flat_elems(), S = model_.state_elems();
  const int64_t opt_buffers = t.optimizer == OptimizerKind::AdamW ? 2 : 1;
  const MemoryPlan plan =
      plan_memory(model_.training_graph().graph, t.batch, model_.bound_values());
  mem_.arena = plan.bytes_peak;
  mem_.per_replica =
      plan.bytes_peak + (2 + opt_buffers) * P * 4 + S * 4 + 8 + (t.clip_grad_norm > 0 ? 4 : 0);
  always_shared_ = P * 4 + S * 4 + 64 + (t.ema ? 2 * (P + S) * 4 : 0);
  if (opts_.memory_budget > 0) {
    mem_.budget = opts_.memory_budget;
    mem_.budget_source = "--memory-budget";
  } else {
    const DeviceCaps c = where.devices[0]->caps();
    const auto n = static_cast<int64_t>(where.devices.size());
    mem_.budget = c.host_memory ? c.memory_free / n : c.memory_free;
    mem_.budget_source = c.memory_source;
    if (c.host_memory && n > 1 && !c.memory_source.empty())
      mem_.budget_source += fmt::format("; shared by {} devices", n);
  }

  for (size_t d = 0; d < where.devices.size(); ++d) {
    auto g = std::make_unique<Group>();
    g->index = static_cast<int>(d);
    g->dev = where.devices[d];
    g->coll = where.collectives[d];
    groups_.push_back(std::move(g));
  }
  // Averages of means are parts of a sum over the devices (trainer.h); with one device in all,
  // the part is the whole.
  const bool ema_parts = alpha_for(opts_.learners) == 0 && ranks > 1;
  on_drivers([&](Group& g) { g.init(model_, opts_, g.coll->rank() == 0, ema_parts); });
  // Every device's z holds the initial model from here on (learners start from z): the graphs'
  // copy goes, and with it what loading and compiling the model left freed, before the learners'
  // buffers are allocated and touched.
  model_.release_initial();
  return_free_host_memory();
  set_learners(opts_.learners);
}

Trainer::~Trainer() {
  try {
    settle();      // a z update still running reads the buffers freed below
  } catch (...) {  // its failure has no one left to report to
  }
  learners_.clear();  // their streams first
  groups_.clear();
}

const Device& Trainer::device(int d) const { return *groups_.at(static_cast<size_t>(d))->dev; }
int Trainer::ranks() const { return groups_[0]->coll->size(); }
int Trainer::global_learner(int local) const {
  const Group& g = *groups_[static_cast<size_t>(local / k_)];
  return g.coll->rank() * k_ + local % k_;
}

void Trainer::set_learners(int k) {
  settle();
  if (k < 1) fail("--learners must be at least 1, got {}", k);
  if (k == k_) return;
  if (!fits(k))
    fail(
        "out of memory: {} learner{} per device need {} ({} per replica: a {} activation arena, "
        "the flat parameter, gradient and optimizer buffers and the BN statistics; {} "
        "shared), but the budget is {} per device; use fewer --learners, a smaller --batch-size "
        "or a larger --memory-budget",
        k, k == 1 ? "" : "s", mib(need(k)), mib(mem_.per_replica), mib(mem_.arena),
        mib(shared_bytes(k)), mib(mem_.budget));
  if (k_ > 0) average_for_eval();  // new learners take the averaged BN statistics
  evaluators_.clear();             // bound to buffers resize() may replace, in learner 0's arena
  learners_.clear();
  const int old = k_;
  // From alpha 0 (one learner by default) to a pull: z never moved, so it starts as the learners'
  // average (computed by average_for_eval() above), and so do the new learners.
  const bool pull = alpha_for(k) != 0, with_mean = k * ranks() > 1;
  const bool seed_z = old > 0 && alpha_ == 0 && pull;
  const bool adamw = opts_.optimizer == OptimizerKind::AdamW;
  on_drivers([&](Group& g) { g.resize(model_, k, old, adamw, seed_z, pull, with_mean); });
  k_ = k;
  alpha_ = alpha_for(k_);
  mem_.fixed = shared_bytes(k_);
  start_learners();
}

void Trainer::start_learners() {
  const int64_t P = model_.flat_elems(), S = model_.state_elems();
  for (int d = 0; d < devices(); ++d) {
    Group& g = *groups_[static_cast<size_t>(d)];
    for (int j = 0; j < k_; ++j) {
      auto l = std::make_unique<Learner>();
      l->local = d * k_ + j;
      l->device = d;
      l->row = j;
      l->dev = g.dev;
      Learner& L = *l;
      const int global = global_learner(L.local);
      L.worker.post([&, P, S, j, global] {
        L.stream = g.dev->create_stream(j, k_);
        L.ex = std::make_unique<Executor>(
            model_.training_graph().graph, *g.dev, opts_.batch,
            model_.train_bindings(g.params.f32(j * P), g.grads.f32(j * P), g.state.f32(j * S)),
            L.stream);
        L.ex->set_rng(learner_stream(global), static_cast<uint64_t>(steps_));
        L.copies = model_.state_copies(*L.ex);
      });
      learners_.push_back(std::move(l));
    }
  }
  wait_all(learners_, [](const auto& l) -> Worker& { return l->worker; });
}

std::vector<double> Trainer::step(const std::vector<Batch>& batches, double lr) {
  const int L = local_learners();
  if (static_cast<int>(batches.size()) != L)
    fail("a step takes one batch per learner: {} learners, {} batches", L, batches.size());
  // Phase A: every learner's forward and backward on its own stream, concurrently. Failures are
  // kept, not thrown: every rank must first agree that this step stops.
  const auto t_a = Clock::now();
  for (auto& lp : learners_) {
    Learner& l = *lp;
    l.batch = &batches[static_cast<size_t>(l.local)];
    l.error = nullptr;
    l.worker.post([this, &l] {
      try {
        Group& g = *groups_[static_cast<size_t>(l.device)];
        Device& dev = *g.dev;
        dev.wait_event(l.stream, g.updated);  // its rows as the last SMA update left them
        model_.feed(*l.ex, true, *l.batch, l.staging);
        l.ex->run();
        l.loss = model_.read_loss(dev, *l.ex);
        if (std::isfinite(l.loss))
          for (KernelArgs& a : l.copies) dev.launch(OpKind::Identity, a, l.stream);
        l.done = dev.record_event(l.stream);
        dev.synchronize(l.stream);
      } catch (...) {
        l.error = std::current_exception();
      }
    });
  }
  for (auto& lp : learners_) lp->worker.wait();  // never throws: errors are in l.error
  const auto t_b = Clock::now();
  timing_.phase_a_s += seconds(t_b - t_a);
  // The previous step's z update ran on the drivers while this phase A ran; its failure (a
  // collective error, a non-finite z) throws here, before anything of this step is updated.
  settle();
  // Phase B1, per device: agree that everyone succeeded, then the fused update and intra-device
  // sum. The learners' next phase A needs only this (their own rows: the correction uses the
  // pre-step replica and the current z), so `updated` is recorded right after it.
  // With alpha 0 nothing pulls and nothing moves z: local steps only (the same values, without
  // the pull's pass, the sum and the z update).
  const bool sync = alpha_ != 0 && (steps_ + 1) % opts_.sync_period(total_learners(), steps_) == 0;
  // Per device: [failed rank+1, diverged, stop, checkpoint, the sum of the learners' losses].
  std::vector<double>& status = status_;
  status.assign(groups_.size() * 5, 0.0);  // sized once: no allocation per step
  const double stop = stop_requested_ ? 1 : 0;
  const double checkpoint = checkpoint_requested_.exchange(false) ? 1 : 0;
  for (auto& gp : groups_) {
    Group& g = *gp;
    g.error = nullptr;
    g.driver.post([this, &g, lr, sync, &status, stop, checkpoint] {
      double* st = &status[static_cast<size_t>(g.index) * 5];
      try {
        static constexpr ReduceOp kOps[5] = {ReduceOp::Max, ReduceOp::Max, ReduceOp::Max,
                                             ReduceOp::Max, ReduceOp::Sum};
        double v[5] = {0, 0, stop, checkpoint, 0};
        for (int j = 0; j < k_; ++j) {
          const Learner& l = *learners_[static_cast<size_t>(g.index * k_ + j)];
          if (l.error) v[0] = g.coll->rank() + 1;
          if (!l.error && !std::isfinite(l.loss)) v[1] = g.coll->rank() + 1;
          if (!l.error) v[4] += l.loss;
        }
        g.coll->agree(v, kOps);
        std::copy(v, v + 5, st);
        if (v[0] > 0 || v[1] > 0) return;  // nobody updates anything at this step
        auto& sp = std::any_cast<ops::SmaStepParams&>(g.step_params);
        sp.lr = static_cast<float>(lr * lr_factor());
        sp.alpha = static_cast<float>(alpha_);
        sp.post = resets_learners(rule());
        const float d = averages() ? ema_decay(steps_ + 1) : 0.0f;
        const auto scale = static_cast<float>(1.0 / total_learners());
        // With alpha 0 the average follows the learners' mean, folded into the step's pass.
        const bool row_ema = averages() && alpha_ == 0;
        sp.ema_decay = d;
        sp.ema_scale = scale;
        for (int j = 0; j < k_; ++j)  // after every learner's gradients (their streams)
          g.dev->wait_event(kSyncStream, learners_[static_cast<size_t>(g.index * k_ + j)]->done);
        g.dev->launch(OpKind::SmaStep,
                      sync ? g.sync_args : (row_ema ? g.local_ema_args : g.local_args));
        if (averages() && model_.state_elems() > 0) {  // before the learners write them again
          std::any_cast<ops::SmaRowEmaParams&>(g.ema_state_params) = {d, scale};
          g.dev->launch(OpKind::SmaRowEma, g.ema_state_args);
        }
        g.updated = g.dev->record_event(kSyncStream);
        g.dev->synchronize();
      } catch (...) {
        g.error = std::current_exception();
      }
    });
  }
  for (auto& gp : groups_) gp->driver.wait();
  stop_agreed_ = stop_agreed_ || status[2] > 0;
  checkpoint_agreed_ = status[3] > 0;
  job_loss_ = status[4] / total_learners();
  timing_.phase_b_s += seconds(Clock::now() - t_b);
  ++timing_.steps;
  for (auto& lp : learners_)
    if (lp->error) std::rethrow_exception(lp->error);
  for (auto& gp : groups_)
    if (gp->error) std::rethrow_exception(gp->error);
  std::vector<double> losses;
  for (auto& lp : learners_) {
    const double loss = lp->loss;
    if (!std::isfinite(loss))
      fail_run(
          "training diverged at step {}: learner {} (device {}, row {}) has loss {} (learning "
          "rate {:g}); no replica and not z were updated at this step. Lower --lr (or add "
          "--warmup-steps)",
          steps_ + 1, global_learner(lp->local), groups_[static_cast<size_t>(lp->device)]->index,
          lp->row, loss_text(loss), lr * lr_factor());
    losses.push_back(loss);
  }
  if (status[0] > 0)
    fail_run("step {} failed on rank {}: every rank stopped before updating", steps_ + 1,
             static_cast<int>(status[0]) - 1);
  if (status[1] > 0)
    fail_run(
        "training diverged at step {}: a learner of rank {} has a non-finite loss (learning rate "
        "{:g}); no replica and not z were updated at this step. Lower --lr (or add "
        "--warmup-steps)",
        steps_ + 1, static_cast<int>(status[1]) - 1, lr * lr_factor());
  ++steps_;
  if (sync) {
    // Phase B2, per device: the cross-device sum, the central update, and the agreement that z is
    // finite everywhere. With overlap it runs while the caller goes on to the next step's phase
    // A; settle() (next step, or anything that reads z) waits for it.
    const int64_t P = model_.flat_elems();
    const bool reset = resets_learners(rule());
    for (auto& gp : groups_) {
      Group& g = *gp;
      g.bad_z = 0;
      auto& cp = std::any_cast<ops::SmaCentralStepParams&>(g.central_params);
      cp.ema_decay = ema_decay(steps_);
      cp.momentum = static_cast<float>(opts_.mu_z(total_learners()));
      cp.scale = static_cast<float>(central_scale());
      g.driver.post([&g, P, reset, k = k_] {
        g.coll->allreduce_sum(*g.dev, kSyncStream, g.sum.f32(), P);
        g.dev->launch(OpKind::SmaCentralStep, g.central_args);
        float bad = 0;
        g.dev->download(&bad, g.flag.get(), sizeof bad);
        double b[1] = {bad};
        g.coll->agree(b, ReduceOp::Max);
        g.bad_z = b[0];
        // Every learner continues from the new z, with its optimizer state (not from a
        // non-finite z: the replicas stay as they are for settle()'s message).
        if (reset && b[0] == 0) {
          g.set_rows_to_z(P, k);
          g.updated = g.dev->record_event(kSyncStream);
        }
        g.dev->synchronize();
      });
    }
    pending_ = true;
    pending_step_ = steps_;
    pending_lr_ = lr * lr_factor();
    if (!opts_.overlap_sync || reset) {
      const auto t_c = Clock::now();
      settle();
      timing_.phase_b_s += seconds(Clock::now() - t_c);
    }
  }
  return losses;
}

void Trainer::settle() const {
  if (!pending_) return;
  pending_ = false;
  wait_all(groups_, [](const auto& g) -> Worker& { return g->driver; });
  double bad = 0;
  for (const auto& g : groups_) bad = std::max(bad, g->bad_z);
  if (bad == 0) return;
  std::string who;
  for (int l = 0; l < local_learners(); ++l) {
    std::vector<float> r = replica(l);
    if (std::any_of(r.begin(), r.end(), [](float x) { return !std::isfinite(x); }))
      who += fmt::format("{}{}", who.empty() ? "" : ", ", global_learner(l));
  }
  fail_run(
      "training diverged at step {}: the central model z has {} non-finite values after the "
      "SMA update ({}; learning rate {:g}). Lower --lr (or add --warmup-steps)",
      pending_step_, static_cast<int64_t>(bad),
      who.empty() ? std::string("every learner's replica is finite: z itself overflowed")
                  : fmt::format("non-finite replicas: learner{} {}",
                                who.find(',') == std::string::npos ? "" : "s", who),
      pending_lr_);
}

double Trainer::step(const Tensor& input, const Tensor& target, double lr) {
  if (total_learners() != 1)
    fail("step(input, target) is for one learner; this trainer has {}", total_learners());
  std::vector<Batch> b(1);
  b[0].inputs = {input};
  b[0].target = target;
  return step(b, lr)[0];
}

bool Trainer::reset_to_central() {
  // With alpha 0 nothing pulls z: it is still the initial model, and the learners are independent
  // runs (one learner: plain SGD, which keeps its momentum across a learning-rate drop).
  if (alpha_ == 0) return false;
  const int64_t P = model_.flat_elems();
  on_drivers([this, P](Group& g) { g.reset_to_central(P, k_); });
  return true;
}

void Trainer::agree(std::span<double> values, ReduceOp op) {
  // One contribution per process: its other devices' endpoints add the identity of `op` (x + 0
  // and max(x, -inf) are x exactly).
  const double identity = op == ReduceOp::Sum ? 0.0 : -std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> per(groups_.size(),
                                       std::vector<double>(values.size(), identity));
  std::copy(values.begin(), values.end(), per[0].begin());
  on_drivers([&](Group& g) { g.coll->agree(per[static_cast<size_t>(g.index)], op); });
  std::copy(per[0].begin(), per[0].end(), values.begin());
}

float Trainer::ema_decay(int64_t step) const {
  const int64_t n = step - opts_.ema_start;  // the n-th update since the start
  if (n <= 0) return 0.0f;
  const double warm = static_cast<double>(1 + n) / static_cast<double>(10 + n);
  return static_cast<float>(std::min(opts_.ema.value_or(0), warm));
}

void Trainer::set_ema_decay(double d) {
  CB_CHECK(averages());
  if (!(d > 0 && d < 1)) fail("--ema: the decay must be in (0, 1), got {}", d);
  settle();  // a z update still running reads it
  opts_.ema = d;
}

void Trainer::average_for_eval() {
  const float scale = static_cast<float>(1.0 / total_learners());
  const int64_t P = model_.flat_elems(), S = model_.state_elems();
  const bool mean = alpha_ == 0, ema = averages();
  on_drivers([scale, P, S, mean, ema](Group& g) {
    if (ema) {  // the parts' sums over the devices
      if (S > 0) {
        g.copy(g.ema_state_sum.get(), g.ema_state.get(), S);
        g.coll->allreduce_sum(*g.dev, kSyncStream, g.ema_state_sum.f32(), S);
      }
      if (mean) {
        g.copy(g.ema_sum.get(), g.ema.get(), P);
        g.coll->allreduce_sum(*g.dev, kSyncStream, g.ema_sum.f32(), P);
      }
    }
    g.state_sum_params = ops::SmaRowSumParams{scale};
    g.param_sum_params = ops::SmaRowSumParams{scale};
    if (S > 0) {
      g.dev->launch(OpKind::SmaRowSum, g.state_sum_args);
      g.coll->allreduce_sum(*g.dev, kSyncStream, g.state_avg.f32(), S);
    }
    if (mean && g.mean.get()) {  // else one learner in the job: its row is the mean
      g.dev->launch(OpKind::SmaRowSum, g.param_sum_args);
      g.coll->allreduce_sum(*g.dev, kSyncStream, g.mean.f32(), P);
    }
    g.dev->synchronize();
  });
}

EvalResult Trainer::evaluate(const ImageSet& set) {
  int64_t begin = 0;
  const int64_t eb = opts_.eval_batch > 0 ? opts_.eval_batch : opts_.batch;
  return evaluate([&](Batch& b) {
    if (begin >= set.count) return false;
    const int64_t n = std::min(eb, set.count - begin);
    b.inputs.resize(1);
    set.slice(begin, n, b.inputs[0], b.target);
    begin += n;
    return true;
  });
}

std::pair<const void*, const void*> Trainer::eval_buffers(EvalWeights w) const {
  const Group& g = *groups_[0];
  if (averages() && w == EvalWeights::Model)
    return {alpha_ == 0 ? g.ema_sum.get() : g.ema.get(), g.ema_state_sum.get()};
  return {alpha_ == 0 ? g.learners_mean() : g.z.get(), g.state_avg.get()};
}

Evaluator& Trainer::evaluator(EvalWeights w) {
  const auto key = eval_buffers(w);
  std::unique_ptr<Evaluator>& e = evaluators_[key];
  if (!e) {
    const int64_t eb = opts_.eval_batch > 0 ? opts_.eval_batch : opts_.batch;
    // Learner 0 of device 0 is idle whenever the caller evaluates (between steps, its stream
    // synchronised at the end of phase A), so its arena is lent to evaluation.
    CB_CHECK(!learners_.empty() && learners_[0]->device == 0);
    e = std::make_unique<Evaluator>(model_, *groups_[0]->dev, key.first, key.second, eb,
                                    learners_[0]->ex->arena());
  }
  return *e;
}

size_t Trainer::eval_own_arena_bytes() const {
  size_t b = 0;
  for (const auto& [key, e] : evaluators_) b += e->own_arena_bytes();
  return b;
}

EvalResult Trainer::evaluate(const NextBatch& next, EvalWeights w, bool part) {
  average_for_eval();
  EvalScore score;
  // On device 0's synchronisation stream, driven by its driver.
  groups_[0]->driver.run([&] { score = evaluator(w).score(next); });
  const auto [process, processes] = eval_share();
  if (part && processes > 1) {
    // Every process's score in its own slot (the others add zeros: exact), then merged in
    // process order, so every process computes the same result.
    const size_t n = EvalScore::kPacked;
    std::vector<double> all(n * static_cast<size_t>(processes), 0.0);
    const std::vector<double> mine = score.pack();
    std::copy(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(n * process));
    agree(all, ReduceOp::Sum);
    score = EvalScore{};
    for (int p = 0; p < processes; ++p)
      score.merge(EvalScore::unpack(std::span<const double>(all).subspan(n * p, n)));
  }
  return evaluator(w).result(score);
}

std::pair<int, int> Trainer::eval_share() const {
  const int processes = ranks() / devices();
  return {groups_[0]->coll->rank() / devices(), processes};
}

double Trainer::spread() {
  // Every process calls this at the same evaluation: the sum over its learners is agreed over
  // the job (processes under MPI), so every rank reports the spread of all K learners.
  double v[2] = {0, static_cast<double>(local_learners())};
  if (total_learners() > 1) {
    std::vector<float> center;
    if (alpha_ == 0) {
      average_for_eval();
      const Group& g = *groups_[0];
      center.resize(static_cast<size_t>(model_.flat_elems()));
      g.dev->download(center.data(), g.mean.get(), center.size() * sizeof(float));
    } else {
      center = central(0);
    }
    for (int l = 0; l < local_learners(); ++l) {
      const std::vector<float> r = replica(l);
      double d2 = 0;
      for (size_t i = 0; i < r.size(); ++i) {
        const double d = static_cast<double>(r[i]) - center[i];
        d2 += d * d;
      }
      v[0] += std::sqrt(d2);
    }
  }
  agree(v, ReduceOp::Sum);
  return v[1] > 0 ? v[0] / v[1] : 0;
}

std::vector<Tensor> Trainer::eval_outputs(const Batch& batch) {
  average_for_eval();
  std::vector<Tensor> r;
  groups_[0]->driver.run([&] { r = evaluator().outputs(batch); });
  return r;
}

void Trainer::restore(const ModelState& s) {
  settle();
  const int64_t P = model_.flat_elems(), S = model_.state_elems();
  const bool adamw = opts_.optimizer == OptimizerKind::AdamW;
  if (s.learners_per_device < 1 ||
      s.learners.size() != static_cast<size_t>(s.learners_per_device * devices()) ||
      s.z.size() != static_cast<size_t>(P) || s.z_prev.size() != static_cast<size_t>(P))
    fail(
        "the saved state does not fit this model and placement ({} learners, {} values; this "
        "run has {} devices and {} values per replica)",
        s.learners.size(), s.z.size(), devices(), P);
  for (const LearnerState& l : s.learners)
    if (l.params.size() != static_cast<size_t>(P) || l.opt1.size() != static_cast<size_t>(P) ||
        l.opt2.size() != (adamw ? static_cast<size_t>(P) : 0) ||
        l.state.size() != static_cast<size_t>(S))
      fail("the saved state's learner buffers do not fit this model and optimizer");
  // Checked before anything changes: a refused state leaves the trainer as it was.
  if (!s.ema.empty() && averages() &&
      (s.ema.size() != groups_.size() || s.ema_state.size() != groups_.size()))
    fail("the saved weight average has {} parts, this run has {} devices", s.ema.size(),
         groups_.size());
  for (size_t d = 0; averages() && d < s.ema.size(); ++d)
    if (s.ema[d].size() != static_cast<size_t>(P) ||
        s.ema_state[d].size() != static_cast<size_t>(S))
      fail("the saved weight average does not fit this model");
  steps_ = s.steps;  // start_learners() sets each learner's Dropout stream at this step
  if (s.learners_per_device != k_) {
    set_learners(s.learners_per_device);
  } else {
    learners_.clear();  // restarted below at the restored step (their Dropout position)
    start_learners();
  }
  on_drivers([&, P, S](Group& g) {
    g.load(s.z, s.z_prev, s.learners, static_cast<size_t>(g.index * k_), k_, P, S);
    if (averages() && !s.ema.empty()) {
      const auto d = static_cast<size_t>(g.index);
      g.dev->upload(g.ema.get(), s.ema[d].data(), s.ema[d].size() * sizeof(float));
      if (S > 0)
        g.dev->upload(g.ema_state.get(), s.ema_state[d].data(),
                      s.ema_state[d].size() * sizeof(float));
      g.dev->synchronize();
    }
  });
  if (averages() && s.ema.empty()) {
    // A state saved without --ema: the average starts from the restored model.
    average_for_eval();
    const bool parts = alpha_ == 0;
    on_drivers([&, P, S](Group& g) { g.seed_ema(P, S, g.coll->rank() == 0, parts); });
  }
}

}  // namespace cb
