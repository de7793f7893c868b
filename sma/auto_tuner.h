// The auto-tuner's decision logic, kept free of timing so that tests
// can drive it with synthetic throughput: the training loop warms up after every change, measures
// images/s over a fixed window of steps and reports it here; the tuner answers with the next
// number of learners per device. It adds one learner per device while the gain over the best
// window so far exceeds the threshold and the memory plan says one more replica fits, and backs
// off one on the first addition that does not pay; then it is done.
#pragma once

#include <string>

namespace cb {

struct TunerOptions {
  double threshold = 0.05;  // add while images/s grow by more than this fraction
  long warmup_steps = 20;   // steps after each change that are not measured
  long window_steps = 100;  // steps per measurement window
  int max_learners = 64;    // per device
};

struct TunerDecision {
  enum class Action { Add, BackOff, Settle };
  Action action = Action::Settle;
  int measured = 0;         // learners per device during the window
  int learners = 0;         // learners per device from now on
  double images_per_s = 0;  // the window's throughput
  double gain = 0;          // over the best window before it (0 for the first window)
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

 private:
  TunerOptions o_;
  int k_;
  int best_k_ = 0;
  double best_ = -1;
  bool done_ = false;
};

}  // namespace cb
