// Learning-rate schedules, as closed-form functions of the global step (0-based) so that every
// learner and every process computes the same rate without shared state. The epoch-based ones use
// PyTorch's formulas with the scheduler stepped once per epoch (epoch = step / steps_per_epoch):
//   constant   lr
//   step       lr * gamma^floor(epoch / step_size)                      (StepLR)
//   multistep  lr * gamma^(number of milestones <= epoch)               (MultiStepLR)
//   cosine     lr * (1 + cos(pi * step / total_steps)) / 2              (CosineAnnealingLR with
//              eta_min 0 and T_max = total_steps, stepped per *step*, not per epoch: smooth)
// Warm-up: over the first `warmup_steps` steps the rate above is multiplied by (step + 1) /
// warmup_steps (PyTorch's LinearLR(start_factor=1/W, total_iters=W-1) stepped per step, chained).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cb {

enum class LrScheduleKind { Constant, Step, MultiStep, Cosine };

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::Constant;
  double lr = 0.01;
  int64_t step_size = 1;            // step: epochs between decays
  double gamma = 0.1;               // step, multistep: decay factor
  std::vector<int64_t> milestones;  // multistep: epochs (increasing)
  int64_t warmup_steps = 0;

  // The rate of global step `step` (0-based). `total_steps` is only read by cosine.
  double at(int64_t step, int64_t steps_per_epoch, int64_t total_steps) const;
  // How many decays of a step/multistep schedule have happened by global step `step` (0 for the
  // others): SMA resets its replicas to the central model whenever this grows.
  int64_t decays(int64_t step, int64_t steps_per_epoch) const;
  // Throws cb::Error naming the bad setting.
  void validate() const;
};

// "constant" | "step" | "multistep" | "cosine"; throws cb::Error listing the choices otherwise.
LrScheduleKind parse_lr_schedule(const std::string& s);
std::string_view lr_schedule_name(LrScheduleKind k);

}  // namespace cb
