// The run's reports (see recorder.h).
#include "session/recorder.h"

#include <unistd.h>

#include <fmt/format.h>

#include <cmath>
#include <cstdio>

#include "runtime/error.h"
#include "sma/mpi_job.h"
#include "viz/report.h"

namespace cb {

namespace {

std::string duration_text(double s) {
  if (s < 0) return "?";
  const auto t = static_cast<int64_t>(std::lround(s));
  if (t >= 3600) return fmt::format("{}h{:02d}m", t / 3600, t / 60 % 60);
  return fmt::format("{}m{:02d}s", t / 60, t % 60);
}

nlohmann::ordered_json accuracy_json(const EvalResult& r) {
  return r.accuracy < 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.accuracy);
}

// The metrics besides the loss and accuracy, for the JSON records and TensorBoard.
void add_scores(nlohmann::ordered_json& j, const EvalResult& r, const char* prefix) {
  if (r.top5) j[fmt::format("{}top5", prefix)] = *r.top5;
  if (r.mae) j[fmt::format("{}mae", prefix)] = *r.mae;
  if (r.r2) j[fmt::format("{}r2", prefix)] = *r.r2;
}

}  // namespace

std::string accuracy_text(const EvalResult& r) {
  return r.accuracy < 0 ? std::string("n/a") : fmt::format("{:.2f}%", 100 * r.accuracy);
}

std::string scores_text(const EvalResult& r) {
  std::string s;
  if (r.accuracy >= 0 || !(r.mae || r.r2)) {
    s = fmt::format("test accuracy {}", accuracy_text(r));
    if (r.accuracy >= 0 && r.counted > r.count) s += fmt::format(" (of {} labels)", r.counted);
    if (r.top5) s += fmt::format("  top-5 {:.2f}%", 100 * *r.top5);
  }
  if (r.mae) s += fmt::format("{}MAE {:.4g}", s.empty() ? "test " : "  ", *r.mae);
  if (r.r2) s += fmt::format("{}R² {:.4f}", s.empty() ? "test " : "  ", *r.r2);
  return s;
}

RunRecorder::RunRecorder(const std::string& metrics, const std::string& report,
                         const std::string& tensorboard)
    // Under mpirun stdout is a pseudo-terminal that ends up in a log: plain lines there.
    : tty_(isatty(fileno(stdout)) != 0 && !launched_by_mpi()),
      metrics_path_(metrics),
      report_(report) {
  if (!tensorboard.empty()) tb_ = std::make_unique<EventWriter>(tensorboard);
  if (!metrics.empty()) {
    metrics_ = std::make_unique<std::ofstream>(metrics, std::ios::app);
    if (!*metrics_) fail("{}: cannot open the metrics file for writing", metrics);
  }
}

void RunRecorder::record(nlohmann::ordered_json j, bool redraw) {
  if (metrics_) {
    *metrics_ << j.dump() << "\n";
    metrics_->flush();
    if (!*metrics_)
      fail("{}: writing the metrics failed (is the disk full, or the file removed?)",
           metrics_path_);
  }
  records_.push_back(std::move(j));
  if (redraw && !report_.empty()) viz::write_file_atomically(report_, viz::render_report(records_));
}

void RunRecorder::clear_progress() {
  if (tty_ && shown_) fmt::print("\r\033[K");
  shown_ = false;
}

double RunRecorder::since_start() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

void RunRecorder::show(const Progress& p, const Trainer& t) {
  const int per_device = t.learners_per_device();
  const int64_t memory = t.need(per_device);
  std::string line = fmt::format(
      "epoch {:.2f}  step {}  {:.0f} {}/s  loss {:.4f}  lr {:.5g}  learners {} ({}/device, "
      "{:.1f} MiB)  data wait {:.0f}%  ETA {}",
      p.epoch, p.step, p.images_per_s, unit_, p.loss, p.lr, p.learners, per_device,
      static_cast<double>(memory) / (1 << 20), 100 * p.data_wait, duration_text(p.eta_s));
  if (tty_) {
    fmt::print("\r\033[K{}", line);
    shown_ = true;
  } else {
    fmt::print("progress {}\n", line);
  }
  std::fflush(stdout);
}

void RunRecorder::attach(Callbacks& cbs, const Trainer& t, double lr, const std::string& program) {
  cbs.on_progress = [this, &t](const Progress& p) {
    show(p, t);
    const int per_device = t.learners_per_device();
    if (tb_)
      tb_->scalars(p.step,
                   {{"train/loss", p.loss},
                    {"train/lr", p.lr},
                    {"train/images_per_s", p.images_per_s},
                    {"train/learners", p.learners},
                    {"train/data_wait_share", p.data_wait},
                    {"train/learners_per_device", per_device},
                    {"train/memory_mib", static_cast<double>(t.need(per_device)) / (1 << 20)}});
  };
  cbs.on_tune = [this, &t, lr](const TunerDecision& d, const TrainMemory& m) {
    clear_progress();
    const char* what = d.action == TunerDecision::Action::Add       ? "add one"
                       : d.action == TunerDecision::Action::BackOff ? "back off one"
                                                                    : "keep";
    std::string windows;
    for (double w : d.windows) windows += fmt::format("{}{:.0f}", windows.empty() ? "" : " ", w);
    const int cores = t.device(0).caps().cores;
    fmt::print(
        "tuner    {} learner{}/device ({}): {:.0f} {}/s, median of [{}], spread {:.1f}%{}: "
        "{} -> {}/device (alpha {:.4g}, learners' lr {:.5g}; {} of {} budget) [{}]\n",
        d.measured, d.measured == 1 ? "" : "s",
        d.measured <= cores ? fmt::format("{} thread{} each", cores / d.measured,
                                          cores / d.measured == 1 ? "" : "s")
                            : fmt::format("{} on {} cores", d.measured, cores),
        d.images_per_s, unit_, windows, 100 * d.spread,
        d.gain != 0
            ? fmt::format(", gain {:+.1f}% (needed {:.1f}%)", 100 * d.gain, 100 * d.required)
            : std::string(),
        what, d.learners, t.alpha_for(d.learners),
        lr * lr_scale(t.options().lr_scaling, d.learners * t.ranks(),
                      t.options().rule(d.learners * t.ranks()), t.options().optimizer),
        mib(t.need(d.learners)), mib(m.budget), d.reason);
    std::fflush(stdout);
    record({{"type", "tune"},
            {"time", since_start()},
            {"measured", d.measured},
            {"learners", d.learners},
            {"action", what},
            {"images_per_s", d.images_per_s},
            {"windows", d.windows},
            {"spread", d.spread},
            {"gain", d.gain},
            {"required", d.required},
            {"reason", d.reason}});
  };
  cbs.on_reset = [this](int64_t step, double new_lr) {
    clear_progress();
    fmt::print("reset    step {}: the learning rate drops to {:.5g}; every replica reset to z\n",
               step + 1, new_lr);
  };
  cbs.on_skipped = [this, program](const std::vector<SkipLog::Entry>& fresh, int64_t total) {
    clear_progress();
    fmt::print(stderr, "{}: warning: {}{}\n", program, skip_summary(fresh),
               total > static_cast<int64_t>(fresh.size())
                   ? fmt::format(" ({} skipped so far)", total)
                   : std::string());
    std::fflush(stderr);
  };
  cbs.on_eval = [this, &t](const EvalReport& p) {
    clear_progress();
    fmt::print(
        "epoch {:6.2f}  step {:7d}  lr {:.5g}  train loss {:.4f}  {}{}  {:.0f} {}/s  learners {}  "
        "spread {:.4g}\n",
        p.epoch, p.step, p.lr, p.train_loss,
        p.test.count > 0 ? fmt::format("test loss {:.4f}  {}", p.test.loss, scores_text(p.test))
                         : std::string("(no test data)"),
        p.unaveraged ? fmt::format(" (without the average: {})", scores_text(*p.unaveraged))
                     : std::string(),
        p.images_per_s, unit_, p.learners, p.spread);
    const int per_device = t.learners_per_device();
    nlohmann::ordered_json j = {{"type", "eval"},
                                {"time", p.time_s},
                                {"epoch", p.epoch},
                                {"step", p.step},
                                {"loss", p.train_loss},
                                {"test_loss", p.test.loss},
                                {"accuracy", accuracy_json(p.test)}};
    add_scores(j, p.test, "test_");
    if (p.unaveraged) {  // --ema: the weights it averages
      j["unaveraged_test_loss"] = p.unaveraged->loss;
      j["unaveraged_accuracy"] = accuracy_json(*p.unaveraged);
      add_scores(j, *p.unaveraged, "unaveraged_test_");
    }
    j.update(nlohmann::ordered_json{{"images_per_s", p.images_per_s},
                                    {"learners", p.learners},
                                    {"learners_per_device", per_device},
                                    {"lr", p.lr},
                                    {"data_wait_s", p.data_wait_s},
                                    {"spread", p.spread},
                                    {"memory_bytes", t.need(per_device)}});
    record(j);
    if (tb_) {
      std::vector<std::pair<std::string, double>> v = {{"eval/train_loss", p.train_loss},
                                                       {"eval/test_loss", p.test.loss},
                                                       {"eval/lr", p.lr},
                                                       {"eval/images_per_s", p.images_per_s},
                                                       {"eval/learners", p.learners},
                                                       {"eval/learners_per_device", per_device},
                                                       {"eval/data_wait_s", p.data_wait_s},
                                                       {"eval/sma_spread", p.spread},
                                                       {"eval/epoch", p.epoch}};
      if (p.test.accuracy >= 0) v.emplace_back("eval/test_accuracy", p.test.accuracy);
      if (p.test.top5) v.emplace_back("eval/test_top5", *p.test.top5);
      if (p.test.mae) v.emplace_back("eval/test_mae", *p.test.mae);
      if (p.test.r2) v.emplace_back("eval/test_r2", *p.test.r2);
      if (p.unaveraged && p.unaveraged->accuracy >= 0)
        v.emplace_back("eval/unaveraged_test_accuracy", p.unaveraged->accuracy);
      tb_->scalars(p.step, v);
    }
  };
}

void RunRecorder::summary(const RunSummary& s, const Trainer& t, const RunOptions& o,
                          int64_t skipped_files, const std::vector<RankNumbers>& ranks) {
  fmt::print(
      "done     {} steps, {} {} in {:.2f} s ({:.2f} s training): {:.0f} {}/s, "
      "{} on {} {}, {:.2f} epochs, {} learner{}\n",
      s.steps, s.images, unit_, s.seconds, s.train_seconds, s.images_per_s, unit_,
      scores_text(s.test), s.test.count, unit_, s.epochs, s.learners, s.learners == 1 ? "" : "s");
  fmt::print(
      "data     waited {:.2f} s for training batches ({:.1f}% of training time){}\n", s.data_wait_s,
      s.train_seconds + s.data_wait_s > 0 ? 100 * s.data_wait_s / (s.train_seconds + s.data_wait_s)
                                          : 0.0,
      skipped_files > 0
          ? fmt::format("; {} file{} skipped", skipped_files, skipped_files == 1 ? "" : "s")
          : std::string());
  const StepTiming& tm = t.timing();
  fmt::print(
      "steps    forward/backward (phase A) {:.1f}%, waiting for the SMA update (phase B) "
      "{:.1f}% of step time, z update {}\n",
      100 * (1 - tm.phase_b_share()), 100 * tm.phase_b_share(),
      t.options().overlap_sync ? "overlapped with the next step" : "not overlapped (--no-overlap)");
  int64_t made = 0;
  for (const RankNumbers& r : ranks) made += r.examples_made;
  for (const RankNumbers& r : ranks)
    fmt::print(
        "rank     {} on {}: made {} training {} ({:.1f}% of the job's) and {} test {}, "
        "forward/backward {:.0f} {}/s, waited {:.2f} s for data\n",
        r.rank, r.host, r.examples_made, unit_,
        made > 0 ? 100.0 * static_cast<double>(r.examples_made) / static_cast<double>(made) : 0.0,
        r.test_examples_made, unit_, r.compute_per_s, unit_, r.data_wait_s);
  if (o.target_accuracy > 0) {
    if (s.reached_target)
      fmt::print("target   test accuracy {:.2f}% reached after {:.2f} s, {:.2f} epochs, step {}\n",
                 100 * o.target_accuracy, s.target_seconds, s.target_epoch, s.target_step);
    else
      fmt::print("target   test accuracy {:.2f}% not reached ({} after {:.2f} epochs)\n",
                 100 * o.target_accuracy, accuracy_text(s.test), s.epochs);
  }
  nlohmann::ordered_json sum = {{"type", "summary"},
                                {"steps", s.steps},
                                {"images", s.images},
                                {"seconds", s.seconds},
                                {"train_seconds", s.train_seconds},
                                {"images_per_s", s.images_per_s},
                                {"epochs", s.epochs},
                                {"learners", s.learners},
                                {"data_wait_s", s.data_wait_s},
                                {"test_accuracy", accuracy_json(s.test)},
                                {"test_loss", s.test.loss},
                                {"phase_b_share", tm.phase_b_share()}};
  add_scores(sum, s.test, "test_");
  if (!ranks.empty()) {
    nlohmann::ordered_json rs = nlohmann::ordered_json::array();
    for (const RankNumbers& r : ranks)
      rs.push_back({{"rank", r.rank},
                    {"host", r.host},
                    {"examples_made", r.examples_made},
                    {"test_examples_made", r.test_examples_made},
                    {"compute_per_s", r.compute_per_s},
                    {"data_wait_s", r.data_wait_s}});
    sum["ranks"] = rs;
  }
  if (o.target_accuracy > 0) {
    sum["target_accuracy"] = o.target_accuracy;
    sum["target_reached"] = s.reached_target;
    if (s.reached_target) {
      sum["target_seconds"] = s.target_seconds;
      sum["target_epoch"] = s.target_epoch;
      sum["target_step"] = s.target_step;
    }
  }
  record(sum, true);
  if (!report_.empty()) fmt::print("report   {}\n", report_);
}

}  // namespace cb
