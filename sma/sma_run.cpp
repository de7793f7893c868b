// SMA's training loop (see sma_run.h).
#include "sma/sma_run.h"

#include <chrono>
#include <optional>

#include "runtime/error.h"

namespace cb {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
}  // namespace

SmaRunSummary run_sma_training(SmaTrainer& t, const Dataset& data, const SmaRunOptions& o,
                               const SmaCallbacks& cb) {
  const RunOptions& ro = o.run;
  ro.schedule.validate();
  if (ro.steps < 0) fail("--steps must not be negative, got {}", ro.steps);
  if (ro.steps == 0 && ro.epochs <= 0) fail("--epochs must be positive, got {}", ro.epochs);
  if (ro.eval_every < 0) fail("--eval-every must not be negative, got {}", ro.eval_every);
  if (!(o.target_accuracy >= 0 && o.target_accuracy <= 1))
    fail("--target-accuracy must be in [0, 1], got {}", o.target_accuracy);
  t.check_labels(data.train, "training");
  const ImageSet test = data.test.head(ro.test_limit);
  t.check_labels(test, "test");
  const int64_t batch = t.options().train.batch;
  BatchIterator it(data.train, batch, ro.shuffle, ro.seed);
  const int64_t spe = it.batches_per_epoch();
  const int64_t total_batches = ro.steps > 0 ? 0 : ro.epochs * spe;

  std::optional<AutoTuner> tuner;
  if (o.auto_tune) tuner.emplace(o.tuner, t.learners_per_device());

  SmaRunSummary sum;
  std::vector<Batch> batches;
  const auto t_run = Clock::now();
  auto last_progress = t_run;
  int64_t consumed = 0, s = 0;
  // Windows: since the last evaluation (eval), the last progress report (prog), the tuner's.
  double eval_loss = 0, eval_train_s = 0, prog_loss = 0, prog_train_s = 0, tune_s = 0;
  int64_t eval_steps = 0, eval_images = 0, prog_steps = 0, prog_images = 0, tune_images = 0;
  int64_t since_change = 0;
  double prev_lr = -1;
  int64_t decays = ro.schedule.decays(0, spe);
  auto finished = [&] { return ro.steps > 0 ? s >= ro.steps : consumed >= total_batches; };
  while (!finished()) {
    const int K = t.total_learners();
    const int64_t total_for_lr = ro.steps > 0 ? ro.steps * K : total_batches;
    const double lr = ro.schedule.at(consumed, spe, total_for_lr);
    const int64_t d = ro.schedule.decays(consumed, spe);
    if (d > decays && prev_lr > 0 && lr < prev_lr) {
      if (t.reset_to_central() && cb.on_reset) cb.on_reset(s, lr);
    }
    decays = d;
    prev_lr = lr;
    batches.resize(static_cast<size_t>(K));
    for (Batch& b : batches) it.next(b.images, b.labels);
    const auto t0 = Clock::now();
    const std::vector<double> losses = t.step(batches, lr);
    const double dt = seconds_since(t0);
    double mean = 0;
    for (double l : losses) mean += l;
    mean /= static_cast<double>(losses.size());
    ++s;
    consumed += K;
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

    if (tuner && !tuner->done()) {
      if (++since_change > o.tuner.warmup_steps) {
        tune_s += dt;
        tune_images += images;
      }
      if (since_change == o.tuner.warmup_steps + o.tuner.window_steps) {
        const int before = t.learners_per_device();
        TunerDecision dec =
            tuner->observe(static_cast<double>(tune_images) / tune_s, t.fits(before + 1));
        if (cb.on_tune) cb.on_tune(dec, t.memory());
        if (dec.learners != before) t.set_learners(dec.learners);
        since_change = 0;
        tune_s = 0;
        tune_images = 0;
      }
    }

    const bool last = finished();
    if (cb.on_progress && (seconds_since(last_progress) >= o.progress_interval_s || last)) {
      SmaProgress p;
      p.epoch = static_cast<double>(consumed) / static_cast<double>(spe);
      p.step = s;
      p.images_per_s = prog_train_s > 0 ? static_cast<double>(prog_images) / prog_train_s : 0;
      p.loss = prog_loss / static_cast<double>(prog_steps);
      p.lr = lr;
      p.learners = t.total_learners();
      if (p.images_per_s > 0) {
        const double left = ro.steps > 0
                                ? static_cast<double>((ro.steps - s) * t.total_learners() * batch)
                                : static_cast<double>((total_batches - consumed) * batch);
        p.eta_s = std::max(0.0, left) / p.images_per_s;
      }
      cb.on_progress(p);
      last_progress = Clock::now();
      prog_loss = prog_train_s = 0;
      prog_steps = prog_images = 0;
    }

    const bool due =
        ro.eval_every > 0 ? s % ro.eval_every == 0 : consumed / spe > (consumed - K) / spe;
    if (due || last) {
      SmaEvalReport r;
      r.epoch = static_cast<double>(consumed) / static_cast<double>(spe);
      r.step = s;
      r.train_loss = eval_loss / static_cast<double>(eval_steps);
      r.lr = lr;
      r.images_per_s = eval_train_s > 0 ? static_cast<double>(eval_images) / eval_train_s : 0;
      r.learners = t.total_learners();
      r.test = t.evaluate(test);
      r.time_s = seconds_since(t_run);
      sum.test = r.test;
      if (cb.on_eval) cb.on_eval(r);
      eval_loss = eval_train_s = 0;
      eval_steps = eval_images = 0;
      if (o.target_accuracy > 0 && r.test.accuracy >= o.target_accuracy) {
        sum.reached_target = true;
        sum.target_seconds = r.time_s;
        sum.target_epoch = r.epoch;
        sum.target_step = s;
        break;
      }
    }
  }
  sum.steps = s;
  sum.epochs = static_cast<double>(consumed) / static_cast<double>(spe);
  sum.learners = t.total_learners();
  sum.seconds = seconds_since(t_run);
  sum.images_per_s =
      sum.train_seconds > 0 ? static_cast<double>(sum.images) / sum.train_seconds : 0;
  return sum;
}

}  // namespace cb
