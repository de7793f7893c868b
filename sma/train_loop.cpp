// The training loop (see train_loop.h).
#include "sma/train_loop.h"

#include <chrono>
#include <limits>

#include "runtime/error.h"

namespace cb {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
}  // namespace

double ema_decay_for(double epochs, int64_t batches, int K) {
  const double steps = epochs * static_cast<double>(batches) / K;
  return std::clamp(1 - 1 / std::max(steps, 1.0), 1e-6, 1 - 1e-9);
}

void RunOptions::validate() const {
  schedule.validate();
  if (steps < 0) fail("--steps must not be negative, got {}", steps);
  if (steps == 0 && epochs <= 0) fail("--epochs must be positive, got {}", epochs);
  if (eval_every < 0) fail("--eval-every must not be negative, got {}", eval_every);
  if (evals_per_epoch < 1) fail("--evals-per-epoch must be at least 1, got {}", evals_per_epoch);
  if (test_limit < 0) fail("--test-limit must not be negative, got {}", test_limit);
  if (!(target_accuracy >= 0 && target_accuracy <= 1))
    fail("--target-accuracy must be in [0, 1], got {}", target_accuracy);
  if (workers < 0) fail("--workers must not be negative, got {}", workers);
  if (!(ema_epochs >= 0)) fail("--ema: the time constant must be positive, got {}e", ema_epochs);
  if (auto_tune) AutoTuner(tuner, 1);  // its settings, checked where they are defined
}

TrainState capture(const Trainer& t, const LoopState& loop) { return {t.state(), loop}; }

LoopState restore(Trainer& t, const TrainState& s) {
  t.restore(s.model);
  return s.loop;
}

RunSummary train(Trainer& t, const Dataset& data, const RunOptions& o, const Callbacks& cb,
                 LoopState* loop_in, const LoopSources* sources) {
  o.validate();
  BatchStream* stream = sources ? sources->train : nullptr;
  const FeedSpec fs = t.model().feed_spec();
  const bool has_test = data.test_size() > 0;
  std::optional<FeedPlan> plan;
  if (!stream || has_test) {
    plan = plan_feed(data, fs, {o.target, o.transforms});
    if (!stream) check_targets(data, true, fs, *plan, "training");
    if (has_test) check_targets(data, false, fs, *plan, "test");
  }
  const int64_t batch = t.options().batch;
  const int64_t eval_batch = t.options().eval_batch > 0 ? t.options().eval_batch : batch;
  int cores = 0;
  for (int d = 0; d < t.devices(); ++d) cores += t.device(d).caps().cores;
  // Arrays whose batches are cheaper to copy than to hand between threads are batched on the
  // loop's thread (batches_inline); everything else on the pipeline's workers.
  const int workers = o.workers > 0                          ? o.workers
                      : plan && batches_inline(*plan, batch) ? 0
                                                             : default_workers(cores);
  // Batches per epoch: the data set's, or the stream's when it says (0: passes end when the
  // stream does, and nothing is scheduled by epochs).
  const int64_t spe =
      stream ? stream->batches_per_pass : BatchOrder::epoch_batches(data.train_size(), batch);
  if (stream && spe == 0) {
    const LrScheduleKind k = o.schedule.kind;
    if (k == LrScheduleKind::Step || k == LrScheduleKind::MultiStep ||
        (k == LrScheduleKind::Cosine && o.steps == 0))
      fail(
          "batches from a stream of unknown length: --lr-schedule {} counts in epochs, so it needs "
          "the number of batches per pass (give it, or train by --steps with cosine)",
          lr_schedule_name(k));
    if (o.evals_per_epoch != 1 && o.eval_every == 0)
      fail(
          "batches from a stream of unknown length: --evals-per-epoch needs the number of batches "
          "per pass (give it, or evaluate by --eval-every)");
  }
  const int64_t total_batches = o.steps > 0 || spe == 0 ? 0 : o.epochs * spe;
  size_t skip_cursor = 0;
  auto report_skipped = [&] {
    if (!cb.on_skipped) return;
    std::vector<SkipLog::Entry> fresh = data.skipped->since(&skip_cursor);
    if (!fresh.empty()) cb.on_skipped(fresh, data.skipped->count());
  };
  // Several processes: each scores every P-th batch of the pass, and the scores are merged.
  int64_t eval_made = 0;  // test examples this process's evaluation pipelines made
  auto evaluate = [&](EvalWeights w = EvalWeights::Model) -> EvalResult {
    if (sources && sources->evaluate) return sources->evaluate();
    if (!has_test) return {};
    const auto [process, processes] = t.eval_share();
    PipelineOptions po;
    po.batch = eval_batch;
    po.train = false;
    po.workers = workers;
    po.limit = o.test_limit;
    if (processes > 1) {
      po.period = processes;
      po.first = process;
      po.take = 1;
    }
    BatchPipeline ev(data.test_size(), make_batches(data, false, *plan, o.seed), po);
    const EvalResult r = t.evaluate([&](Batch& b) { return ev.next(b); }, w, processes > 1);
    eval_made += ev.examples_made();
    return r;
  };
  const bool evaluates = has_test || (sources && sources->evaluate);

  // The average's time constant in epochs: a decay per step of K batches.
  auto set_ema_decay = [&] {
    if (o.ema_epochs <= 0 || !t.averages() || spe == 0) return;
    t.set_ema_decay(ema_decay_for(o.ema_epochs, spe, t.total_learners()));
  };
  set_ema_decay();

  LoopState fresh;
  LoopState& st = loop_in ? *loop_in : fresh;
  if (!st.started) {
    st = LoopState{};
    st.started = true;
    st.step = o.first_step;
    st.decays = spe ? o.schedule.decays(0, spe) : 0;
    if (o.auto_tune) st.tuner.emplace(o.tuner, t.learners_per_device());
  }
  report_skipped();
  PipelineOptions po;
  po.batch = batch;
  po.shuffle = o.shuffle;
  po.seed = o.seed;
  po.workers = workers;
  // The ring holds two steps' batches (this process's L each) beyond what the workers have in
  // hand; it is made again at the current position when the tuner changes K (the batches are the
  // same: they depend on their place in the sequence only). Under MPI this process makes only its
  // own learners' batches (the sequence is global, the reading and decoding is not).
  std::optional<BatchPipeline> pipe;
  int64_t made_before = 0;  // examples made by the pipelines before the current one
  auto start_pipe = [&] {
    if (stream) return;
    if (pipe) made_before += pipe->examples_made();
    pipe.reset();
    po.start = st.consumed;
    const int K = t.total_learners(), L = t.local_learners();
    po.period = L != K ? K : 0;
    po.first = L != K ? t.global_learner(0) : 0;
    po.take = L != K ? L : 0;
    po.depth = 2 * L + 2 * workers + 2;
    pipe.emplace(data.train_size(), make_batches(data, true, *plan, o.seed), po);
  };
  start_pipe();
  // A stream: its passes, the batches of the current one, and the time spent waiting in next().
  int64_t passes = 0, in_pass = 0;
  bool stream_done = false;
  double stream_wait = 0;
  auto stream_next = [&](Batch& b) {
    const auto t0 = Clock::now();
    while (!stream->next(b)) {
      if (in_pass == 0)
        fail(
            "the batches ended: pass {} yielded none (a one-shot source, such as a generator, "
            "gives one pass: train one epoch, or give a source that can start again)",
            passes + 1);
      ++passes;
      in_pass = 0;
      if (o.steps == 0 && passes >= o.epochs) {
        stream_done = true;
        break;
      }
      stream->start();
    }
    if (!stream_done) ++in_pass;
    stream_wait += seconds_since(t0);
    return !stream_done;
  };
  if (stream) {
    stream->start();
    Batch skip;
    for (int64_t i = 0; i < st.consumed && stream_next(skip); ++i) {
    }
    stream_wait = 0;
  }
  RunSummary sum;
  std::vector<Batch> all, local;
  const auto t_run = Clock::now();
  auto last_progress = t_run;
  // Windows: since the last evaluation (eval) and the last progress report (prog).
  double eval_loss = 0, eval_train_s = 0, prog_loss = 0, prog_train_s = 0;
  double eval_wait_s = 0, prog_wait_s = 0;
  int64_t eval_steps = 0, eval_images = 0, prog_steps = 0, prog_images = 0;
  int64_t passes_at_eval = 0;
  auto epoch_now = [&] {
    if (spe > 0) return static_cast<double>(st.consumed) / static_cast<double>(spe);
    return static_cast<double>(passes);  // a stream of unknown length: whole passes
  };
  auto finished = [&] {
    if (o.steps > 0) return st.step - o.first_step >= o.steps;
    return spe > 0 ? st.consumed >= total_batches : stream_done;
  };
  // One evaluation report at the current position; true when it reaches the target accuracy.
  auto eval_now = [&](double lr) {
    passes_at_eval = passes;
    EvalReport r;
    r.epoch = epoch_now();
    r.step = st.step;
    r.train_loss = eval_steps > 0 ? eval_loss / static_cast<double>(eval_steps) : 0;
    r.lr = lr * t.lr_factor();
    r.images_per_s = eval_train_s > 0 ? static_cast<double>(eval_images) / eval_train_s : 0;
    r.learners = t.total_learners();
    r.data_wait_s = eval_wait_s;
    r.spread = t.spread();
    if (evaluates) r.test = evaluate();
    // The weights the average is of too (as timm evaluates both), from the test data.
    if (o.eval_unaveraged && has_test && t.averages() && !(sources && sources->evaluate))
      r.unaveraged = evaluate(EvalWeights::Unaveraged);
    r.time_s = seconds_since(t_run);
    sum.test = r.test;
    if (cb.on_eval) cb.on_eval(r);
    report_skipped();
    eval_loss = eval_train_s = eval_wait_s = 0;
    eval_steps = eval_images = 0;
    if (o.target_accuracy > 0 && r.test.count > 0 && r.test.accuracy >= o.target_accuracy) {
      sum.reached_target = true;
      sum.target_seconds = r.time_s;
      sum.target_epoch = r.epoch;
      sum.target_step = st.step;
      return true;
    }
    return false;
  };
  double last_lr = 0;
  while (!finished()) {
    const int K = t.total_learners(), L = t.local_learners();
    const int64_t total_for_lr = o.steps > 0 ? o.steps * K : total_batches;
    const double lr = spe ? o.schedule.at(st.consumed, spe, total_for_lr)
                          : o.schedule.at(st.consumed, 1, total_for_lr);  // constant + warm-up
    const int64_t d = spe ? o.schedule.decays(st.consumed, spe) : 0;
    if (d > st.decays && st.prev_lr > 0 && lr < st.prev_lr) {
      if (t.reset_to_central() && cb.on_reset) cb.on_reset(st.step, lr);
    }
    st.decays = d;
    st.prev_lr = lr;
    last_lr = lr;
    double wait = 0;
    const std::vector<Batch>* mine = &all;
    if (stream) {
      all.resize(static_cast<size_t>(K));
      const double waited = stream_wait;
      for (Batch& b : all)
        if (!stream_next(b)) break;
      wait = stream_wait - waited;
      if (stream_done) break;  // the last passes end inside a step: its batches are dropped
      if (L != K) {            // several processes: this one feeds its own learners
        local.resize(static_cast<size_t>(L));
        for (int l = 0; l < L; ++l)
          local[static_cast<size_t>(l)] = std::move(all[static_cast<size_t>(t.global_learner(l))]);
        mine = &local;
      }
    } else {  // the pipeline makes this process's learners' batches only
      all.resize(static_cast<size_t>(L));
      const double waited = pipe->wait_seconds();
      for (Batch& b : all) pipe->next(b);
      wait = pipe->wait_seconds() - waited;
    }
    sum.data_wait_s += wait;
    eval_wait_s += wait;
    prog_wait_s += wait;
    const auto t0 = Clock::now();
    t.step(*mine, lr);
    const double dt = seconds_since(t0);
    const double mean = t.job_loss();  // of every process's learners
    ++st.step;
    st.consumed += K;
    const int64_t images = K * batch;
    sum.train_seconds += dt;
    sum.images += images;
    sum.losses.push_back(mean);
    eval_loss += mean;
    prog_loss += mean;
    eval_train_s += dt;
    prog_train_s += dt;
    ++eval_steps;
    ++prog_steps;
    eval_images += images;
    prog_images += images;

    if (st.tuner && !st.tuner->done()) {
      if (++st.since_change > o.tuner.warmup_steps) {
        st.tune_s += dt;
        st.tune_images += L * batch;
      }
      const int64_t measured = st.since_change - o.tuner.warmup_steps;
      if (measured > 0 && measured % o.tuner.window_steps == 0) {  // a window ends
        const int before = t.learners_per_device();
        // Global: images/s summed over processes, and one more learner fits only if it fits on
        // every device of every process.
        double ips[1] = {static_cast<double>(st.tune_images) / st.tune_s};
        t.agree(ips, ReduceOp::Sum);
        double no_fit[1] = {t.fits(before + 1) ? 0.0 : 1.0};
        t.agree(no_fit, ReduceOp::Max);
        TunerDecision dec = st.tuner->observe(ips[0], no_fit[0] == 0);
        st.tune_s = 0;
        st.tune_images = 0;
        if (dec.action != TunerDecision::Action::Measure) {
          if (cb.on_tune) cb.on_tune(dec, t.memory());
          if (dec.learners != before) {
            t.set_learners(dec.learners);
            set_ema_decay();
            start_pipe();
          }
          st.since_change = 0;
        }
      }
    }

    const bool last = finished();
    if (cb.on_progress && (seconds_since(last_progress) >= o.progress_interval_s || last)) {
      Progress p;
      p.epoch = epoch_now();
      p.step = st.step;
      p.images_per_s = prog_train_s > 0 ? static_cast<double>(prog_images) / prog_train_s : 0;
      p.loss = prog_loss / static_cast<double>(prog_steps);
      p.lr = lr * t.lr_factor();
      p.learners = t.total_learners();
      p.data_wait = prog_train_s + prog_wait_s > 0 ? prog_wait_s / (prog_train_s + prog_wait_s) : 0;
      if (p.images_per_s > 0 && (o.steps > 0 || spe > 0)) {
        const double left = o.steps > 0
                                ? static_cast<double>((o.steps - (st.step - o.first_step)) *
                                                      t.total_learners() * batch)
                                : static_cast<double>((total_batches - st.consumed) * batch);
        p.eta_s = std::max(0.0, left) / p.images_per_s;
      }
      cb.on_progress(p);
      last_progress = Clock::now();
      prog_loss = prog_train_s = prog_wait_s = 0;
      prog_steps = prog_images = 0;
    }

    const int64_t parts = o.evals_per_epoch;  // evaluation points per epoch, in batches
    const bool due = o.eval_every > 0 ? (st.step - o.first_step) % o.eval_every == 0
                     : spe > 0        ? st.consumed * parts / spe > (st.consumed - K) * parts / spe
                                      : passes > passes_at_eval;
    if ((due || last) && eval_now(lr)) break;  // the target accuracy is reached
    if (!last && cb.after_step && cb.after_step(st)) {
      sum.stopped = true;
      break;
    }
  }
  // A stream of unknown length ends inside a step: the steps since the last evaluation get theirs.
  if (stream && stream_done && eval_steps > 0 && !sum.stopped && !sum.reached_target)
    eval_now(last_lr);
  if (evaluates && sum.test.count == 0 && !sum.stopped && !sum.reached_target && finished()) {
    sum.test = evaluate();  // a run that was already complete (resumed at its end)
  }
  sum.steps = st.step - o.first_step;
  sum.examples_made = made_before + (pipe ? pipe->examples_made() : 0);
  sum.test_examples_made = eval_made;
  sum.epochs = epoch_now();
  sum.learners = t.total_learners();
  sum.seconds = seconds_since(t_run);
  sum.images_per_s =
      sum.train_seconds > 0 ? static_cast<double>(sum.images) / sum.train_seconds : 0;
  return sum;
}

}  // namespace cb
