// The auto-tuner's decisions (see auto_tuner.h).
#include "sma/auto_tuner.h"

#include <fmt/format.h>

#include "runtime/error.h"

namespace cb {

AutoTuner::AutoTuner(const TunerOptions& o, int learners) : o_(o), k_(learners) {
  CB_CHECK(learners >= 1);
  if (!(o.threshold >= 0)) fail("--tuner-threshold must not be negative, got {}", o.threshold);
  if (o.window_steps <= 0 || o.warmup_steps < 0)
    fail("the tuner needs a positive window of steps, got {} (warm-up {})", o.window_steps,
         o.warmup_steps);
  done_ = learners >= o.max_learners;
}

TunerDecision AutoTuner::observe(double ips, bool next_fits) {
  CB_CHECK(!done_);
  TunerDecision d;
  d.measured = k_;
  d.images_per_s = ips;
  auto grow = [&](const char* why) {
    if (k_ + 1 > o_.max_learners) {
      d.action = TunerDecision::Action::Settle;
      d.reason = fmt::format("{}; {} learners per device is the most the tuner tries", why, k_);
      done_ = true;
    } else if (!next_fits) {
      d.action = TunerDecision::Action::Settle;
      d.reason = fmt::format("{}; one more replica does not fit the memory budget", why);
      done_ = true;
    } else {
      d.action = TunerDecision::Action::Add;
      d.reason = why;
      ++k_;
    }
  };
  if (best_ < 0) {
    best_ = ips;
    best_k_ = k_;
    grow("first measurement");
  } else {
    d.gain = best_ > 0 ? ips / best_ - 1 : 0;
    if (ips > best_ * (1 + o_.threshold)) {
      best_ = ips;
      best_k_ = k_;
      grow(fmt::format("gain {:+.1f}% > {:.1f}%", 100 * d.gain, 100 * o_.threshold).c_str());
    } else {
      d.action = TunerDecision::Action::BackOff;
      d.reason = fmt::format("gain {:+.1f}% <= {:.1f}%: the last learner does not pay",
                             100 * d.gain, 100 * o_.threshold);
      k_ = best_k_;
      done_ = true;
    }
  }
  d.learners = k_;
  return d;
}

}  // namespace cb
