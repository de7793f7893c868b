// What a training run reports, in one place: the console (a progress line redrawn in place on a
// terminal, plain "progress" lines every 10 s in a log; one line per evaluation, tuner decision,
// learning-rate reset and batch of skipped files), the --metrics file (one JSON object per line:
// config, tune, eval, summary), the --report HTML (viz/report.h, redrawn from those records) and
// TensorBoard scalars (sma/tensorboard.h). One Callbacks implementation for the loop.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "sma/tensorboard.h"
#include "sma/train_loop.h"

namespace cb {

class RunRecorder {
 public:
  // Opens --metrics (appending) and --tensorboard (a new event file); throws cb::Error naming the
  // file. Empty paths write nothing there.
  RunRecorder(const std::string& metrics, const std::string& report,
              const std::string& tensorboard);
  // Whether the console is a terminal (the progress line is redrawn in place).
  bool tty() const { return tty_; }
  // Seconds between progress reports the loop should use for this console.
  double progress_interval_s() const { return tty_ ? 0.25 : 10; }

  // One record: appended to --metrics and, with `redraw`, --report drawn again from all of them.
  void record(nlohmann::ordered_json j, bool redraw = true);
  // Every record of this recorder, in order.
  const std::vector<nlohmann::ordered_json>& records() const { return records_; }
  // Removes the progress line before other output.
  void clear_progress();
  // Restarts the clock the tuner's records are timed by (the loop times evaluations the same way).
  void start_clock() { t0_ = std::chrono::steady_clock::now(); }

  // The loop's reporting callbacks (progress, tune, reset, skipped, eval), for trainer `t` with
  // --lr `lr`. `program` starts warning lines.
  void attach(Callbacks& cbs, const Trainer& t, double lr, const std::string& program);
  // What the lines count: "images" (the default), or "examples" for tensor data.
  void set_unit(std::string unit) { unit_ = std::move(unit); }
  // One process of a job under mpirun, as the summary shows it (a slow node stands out).
  struct RankNumbers {
    int rank = 0;
    std::string host;
    int64_t examples_made = 0;       // training examples its pipeline read and decoded
    int64_t test_examples_made = 0;  // test examples its evaluations read and decoded
    double compute_per_s = 0;        // its learners' examples per second of forward/backward
    double data_wait_s = 0;          // its time waiting for training batches
  };
  // The end of a run: the summary lines and record (with `ranks`, one line and entry per process).
  void summary(const RunSummary& s, const Trainer& t, const RunOptions& o, int64_t skipped_files,
               const std::vector<RankNumbers>& ranks = {});

 private:
  void show(const Progress& p, const Trainer& t);
  double since_start() const;

  bool tty_ = false, shown_ = false;
  std::string unit_ = "images";
  std::string metrics_path_, report_;
  std::unique_ptr<std::ofstream> metrics_;
  std::unique_ptr<EventWriter> tb_;
  std::vector<nlohmann::ordered_json> records_;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

// Text helpers the session's lines share (and mib(), sma/trainer.h).
std::string accuracy_text(const EvalResult& r);  // "85.12%", or "n/a" without labels
// The test metrics for the console: "test accuracy 85.12%" (with " (of N labels)" for sequences
// and pixels, "  top-5 97.10%" with 100 classes or more), then "MAE 0.031  R² 0.987" for a
// regression loss ("test MAE 0.031  R² 0.987" alone when there are no labels to score).
std::string scores_text(const EvalResult& r);

}  // namespace cb
