// The auto-tuner's decisions (see auto_tuner.h).
#include "sma/auto_tuner.h"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/error.h"

namespace cb {

namespace {
double median_of_sorted(const std::vector<double>& v) {
  CB_CHECK(!v.empty());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
}  // namespace

AutoTuner::AutoTuner(const TunerOptions& o, int learners) : o_(o), k_(learners) {
  CB_CHECK(learners >= 1);
  if (!(o.threshold >= 0)) fail("--tuner-threshold must not be negative, got {}", o.threshold);
  if (!(o.noise_factor >= 0))
    fail("the tuner's noise factor must not be negative, got {}", o.noise_factor);
  if (o.window_steps <= 0 || o.warmup_steps < 0)
    fail("the tuner needs a positive window of steps, got {} (warm-up {})", o.window_steps,
         o.warmup_steps);
  if (o.windows < 1) fail("--tuner-windows must be at least 1, got {}", o.windows);
  done_ = learners >= o.max_learners;
}

TunerDecision AutoTuner::observe(double ips, bool next_fits) {
  CB_CHECK(!done_);
  windows_.push_back(ips);
  TunerDecision d;
  d.measured = d.learners = k_;
  d.windows = windows_;
  if (static_cast<int>(windows_.size()) < o_.windows) return d;  // Measure
  // The median and the spread of the windows, the spread without the fastest and the slowest when
  // there are 5 or more: one window that another process disturbed moves neither.
  std::vector<double> w = windows_;
  std::sort(w.begin(), w.end());
  d.images_per_s = median_of_sorted(w);
  const size_t trim = w.size() >= 5 ? 1 : 0;
  d.spread = d.images_per_s > 0 ? (w[w.size() - 1 - trim] - w[trim]) / d.images_per_s : 0;
  windows_.clear();
  auto grow = [&](const std::string& why) {
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
    best_ = d.images_per_s;
    best_k_ = k_;
    best_spread_ = d.spread;
    d.noise = d.spread;
    grow("first measurement");
  } else {
    d.gain = best_ > 0 ? d.images_per_s / best_ - 1 : 0;
    d.noise = std::max(d.spread, best_spread_);
    d.required = std::max(o_.threshold, o_.noise_factor * d.noise);
    if (d.images_per_s > best_ * (1 + d.required)) {
      best_ = d.images_per_s;
      best_k_ = k_;
      best_spread_ = d.spread;
      grow(
          fmt::format("gain {:+.1f}% > {:.1f}% (the larger of the threshold {:.1f}% and the "
                      "noise {:.1f}%)",
                      100 * d.gain, 100 * d.required, 100 * o_.threshold, 100 * d.noise));
    } else {
      d.action = TunerDecision::Action::BackOff;
      d.reason = fmt::format(
          "gain {:+.1f}% <= {:.1f}% (the larger of the threshold {:.1f}% and the noise {:.1f}%): "
          "the last learner does not clearly pay",
          100 * d.gain, 100 * d.required, 100 * o_.threshold, 100 * d.noise);
      k_ = best_k_;
      done_ = true;
    }
  }
  d.learners = k_;
  return d;
}

}  // namespace cb
