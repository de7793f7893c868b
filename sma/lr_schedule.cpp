// Closed-form learning-rate schedules (formulas in lr_schedule.h).
#include "sma/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include <fmt/ranges.h>

#include "runtime/error.h"

namespace cb {

double LrSchedule::at(int64_t step, int64_t steps_per_epoch, int64_t total_steps) const {
  const int64_t epoch = steps_per_epoch > 0 ? step / steps_per_epoch : 0;
  double r = lr;
  switch (kind) {
    case LrScheduleKind::Constant:
      break;
    case LrScheduleKind::Step:
      r = lr * std::pow(gamma, static_cast<double>(epoch / step_size));
      break;
    case LrScheduleKind::MultiStep: {
      auto passed =
          std::upper_bound(milestones.begin(), milestones.end(), epoch) - milestones.begin();
      r = lr * std::pow(gamma, static_cast<double>(passed));
      break;
    }
    case LrScheduleKind::Cosine:
      if (total_steps > 0) {
        double t = static_cast<double>(std::min(step, total_steps));
        r = lr * (1 + std::cos(std::numbers::pi * t / static_cast<double>(total_steps))) / 2;
      }
      break;
  }
  if (warmup_steps > 0 && step < warmup_steps)
    r *= static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  return r;
}

int64_t LrSchedule::decays(int64_t step, int64_t steps_per_epoch) const {
  const int64_t epoch = steps_per_epoch > 0 ? step / steps_per_epoch : 0;
  switch (kind) {
    case LrScheduleKind::Step:
      return step_size > 0 ? epoch / step_size : 0;
    case LrScheduleKind::MultiStep:
      return std::upper_bound(milestones.begin(), milestones.end(), epoch) - milestones.begin();
    case LrScheduleKind::Constant:
    case LrScheduleKind::Cosine:
      break;
  }
  return 0;
}

void LrSchedule::validate() const {
  if (!(lr > 0) || !std::isfinite(lr)) fail("--lr must be a positive number, got {}", lr);
  if (kind == LrScheduleKind::Step && step_size <= 0)
    fail("--lr-step-size must be a positive number of epochs, got {}", step_size);
  if ((kind == LrScheduleKind::Step || kind == LrScheduleKind::MultiStep) && !(gamma > 0))
    fail("--lr-gamma must be positive, got {}", gamma);
  if (kind == LrScheduleKind::MultiStep) {
    if (milestones.empty())
      fail("--lr-schedule multistep needs --lr-milestones (epochs, e.g. 30,60)");
    for (size_t i = 0; i < milestones.size(); ++i)
      if (milestones[i] <= 0 || (i > 0 && milestones[i] <= milestones[i - 1]))
        fail("--lr-milestones must be positive and increasing epochs, got {}",
             fmt::join(milestones, ","));
  }
  if (warmup_steps < 0) fail("--warmup-steps must not be negative, got {}", warmup_steps);
}

LrScheduleKind parse_lr_schedule(const std::string& s) {
  if (s == "constant") return LrScheduleKind::Constant;
  if (s == "step") return LrScheduleKind::Step;
  if (s == "multistep") return LrScheduleKind::MultiStep;
  if (s == "cosine") return LrScheduleKind::Cosine;
  fail("unknown learning-rate schedule '{}' (choices: constant, step, multistep, cosine)", s);
}

std::string_view lr_schedule_name(LrScheduleKind k) {
  switch (k) {
    case LrScheduleKind::Constant:
      return "constant";
    case LrScheduleKind::Step:
      return "step";
    case LrScheduleKind::MultiStep:
      return "multistep";
    case LrScheduleKind::Cosine:
      return "cosine";
  }
  return "?";
}

}  // namespace cb
