// The auto-tuner's decision logic, kept free of timing so that tests can drive it with synthetic
// throughput. The training loop warms up after every change, then measures images/s over
// `windows` windows of `window_steps` steps each and reports every window here; once a number of
// learners has all its windows, the tuner compares the MEDIAN of them with the best median so far.
// A machine's throughput is noisy (other processes, frequency scaling, the scheduler), so the tuner
// also measures that noise: the spread (max - min) / median between the identical windows of the
// two numbers compared (with 5 or more windows, without the fastest and the slowest). It adds one
// learner per device only while the gain exceeds both the threshold and noise_factor x that spread,
// and the memory plan says one more replica fits; the first addition that does not clearly pay is
// backed off, and the tuner is done.
//
// On a CPU device the learners share its cores (sma/trainer.h): one learner runs on all of them,
// two on half each, and so on. Adding a learner is therefore also the choice between one learner
// on more threads and more learners on fewer, measured for the model at hand.
#pragma once

#include <string>
#include <vector>

namespace cb {

struct TunerOptions {
  double threshold = 0.05;    // add only while the median images/s grow by more than this ...
  double noise_factor = 1.0;  // ... and by more than this many times the measured spread
  long warmup_steps = 20;     // steps after each change that are not measured
  long window_steps = 50;     // steps per measurement window
  int windows = 5;            // windows per number of learners (their median is compared)
  int max_learners = 64;      // per device
};

struct TunerDecision {
  enum class Action { Measure, Add, BackOff, Settle };
  Action action = Action::Measure;  // Measure: more windows at this number are needed
  int measured = 0;                 // learners per device during the windows
  int learners = 0;                 // learners per device from now on
  std::vector<double> windows;      // images/s of each window at `measured`
  double images_per_s = 0;          // their median
  double spread = 0;                // (max - min) / median of those windows (5+: trimmed by one)
  double noise = 0;                 // the larger spread of the two numbers compared
  double required = 0;              // the gain an addition needed: max(threshold, factor x noise)
  double gain = 0;                  // median over the best median before it (0 for the first)
  std::string reason;
};

class AutoTuner {
 public:
  AutoTuner(const TunerOptions& o, int learners);
  bool done() const { return done_; }
  int learners() const { return k_; }
  // The throughput of one window at learners() per device; `next_fits`: the memory plan says
  // learners() + 1 per device fit the budget.
  TunerDecision observe(double images_per_s, bool next_fits);

  // Everything observe() has accumulated (for checkpoints); restore() puts it back.
  struct State {
    int k = 1, best_k = 0;
    double best = -1, best_spread = 0;
    bool done = false;
    std::vector<double> windows;
  };
  State state() const { return {k_, best_k_, best_, best_spread_, done_, windows_}; }
  void restore(const State& s) {
    k_ = s.k;
    best_k_ = s.best_k;
    best_ = s.best;
    best_spread_ = s.best_spread;
    done_ = s.done;
    windows_ = s.windows;
  }
  const TunerOptions& options() const { return o_; }

 private:
  TunerOptions o_;
  int k_;
  std::vector<double> windows_;  // at k_
  int best_k_ = 0;
  double best_ = -1, best_spread_ = 0;
  bool done_ = false;
};

}  // namespace cb
