// Optimizer and SMA steps over flat buffers (internal; launched by the trainer, never in a
// graph). Every buffer is f32 unless said; [P] is one replica's flat row, [R,P] the rows of R
// learners. Inputs are read only; every buffer a step updates is an output (updated in place:
// the trainer passes the same buffers every step). The element math is kernels/common/
// optimizer_math.h, shared by every backend.
//   SgdStep(grad [P]) -> (param [P], velocity [P]?)        torch.optim.SGD (f32 or f64)
//   AdamWStep(grad [P]) -> (param [P], m [P], v [P])        torch.optim.AdamW (f32 or f64)
//   SmaStep(grad [R,P], z [P]?) -> (param [R,P], opt1 [R,P]?, opt2 [R,P]?, sum [P]?,
//                                   steps i64 [R], norms [R]?, ema [P]?)
//       for every learner r and element i (sma/trainer.h has the whole algorithm): theta = param
//       (pre-step, kept in a register: no snapshot buffer), its optimizer step (SGD: opt1 =
//       velocity, first step when steps[r] == 0; AdamW: opt1 = m, opt2 = v, bias correction at step
//       steps[r] + 1), then c = alpha * (theta - z), param = stepped - c, and sum[i] = sum over r
//       (in row order) of c: the SMA update and the intra-device sum in one pass. Without z (or
//       with alpha 0) it is R independent optimizer steps and sum is not written. steps[r] += 1.
//       With norms, norms[r] = |grad[r]| (L2, summed in double) before the step; with clip_norm > 0
//       (which needs norms) every learner's step reads grad[r] * min(1, clip_norm / (norms[r] +
//       1e-6)). With ema, after the rows' steps: ema = d * ema + (1 - d) * m, m[i] = sum over r
//       (in row order) of ema_scale * param[r][i] (SmaRowEma's arithmetic, fused: the weight
//       average of the learners' mean costs no pass of its own).
//   SmaCentralStep(sum [P]) -> (z [P], z_prev [P], nonfinite [1], ema [P]?)
//       z' = z + sum + mu_z * (z - z_prev); z_prev = z; z = z'; nonfinite: count of non-finite z';
//       with ema (the weight average, fused into the same pass): ema = d * ema + (1 - d) * z'.
//   SmaRowSum(rows [R,S]) -> out [S]
//       out[i] = sum over r (in row order) of scale * rows[r][i] (averaging BN statistics).
//   SmaRowEma(rows [R,S]) -> ema [S]
//       m = SmaRowSum's out; ema[i] = d * ema[i] + (1 - d) * m (the weight average of the
//       learners' mean, or of their BN statistics).
// Params: SgdParams / AdamWParams / SmaStepParams / SmaCentralStepParams / SmaRowSumParams /
// SmaRowEmaParams (runtime/ops/params.h).
#include "runtime/ops/op_util.h"

namespace cb::ops {

const OpDef kSgdStep{.kind = OpKind::SgdStep,
                     .name = "SgdStep",
                     .inputs_min = 1,
                     .inputs_max = 1,
                     .outputs_min = 1,
                     .outputs_max = 2,
                     .internal = true};
const OpDef kAdamWStep{.kind = OpKind::AdamWStep,
                       .name = "AdamWStep",
                       .inputs_min = 1,
                       .inputs_max = 1,
                       .outputs_min = 3,
                       .outputs_max = 3,
                       .internal = true};
const OpDef kSmaStep{.kind = OpKind::SmaStep,
                     .name = "SmaStep",
                     .inputs_min = 1,
                     .inputs_max = 2,
                     .outputs_min = 5,
                     .outputs_max = 7,
                     .internal = true};
const OpDef kSmaCentralStep{.kind = OpKind::SmaCentralStep,
                            .name = "SmaCentralStep",
                            .inputs_min = 1,
                            .inputs_max = 1,
                            .outputs_min = 3,
                            .outputs_max = 4,
                            .internal = true};
const OpDef kSmaRowSum{.kind = OpKind::SmaRowSum,
                       .name = "SmaRowSum",
                       .inputs_min = 1,
                       .inputs_max = 1,
                       .outputs_min = 1,
                       .outputs_max = 1,
                       .internal = true};
const OpDef kSmaRowEma{.kind = OpKind::SmaRowEma,
                       .name = "SmaRowEma",
                       .inputs_min = 1,
                       .inputs_max = 1,
                       .outputs_min = 1,
                       .outputs_max = 1,
                       .internal = true};

}  // namespace cb::ops
