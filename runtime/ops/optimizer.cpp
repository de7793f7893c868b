// Optimizer and SMA steps over flat buffers (internal; launched by the trainers, never in a
// graph). Every buffer is f32; [P] is one replica's flat row, [R,P] the rows of R learners.
//   SgdStep(param [P], grad [P], velocity [P])            in place, PyTorch's SGD semantics
//   AdamWStep(param [P], grad [P], m [P], v [P])         in place, PyTorch's AdamW semantics
//   SmaStep(param [R,P], grad [R,P], velocity [R,P], snapshot [R,P], z [P]?, sum [P]?)
//       in place, for every learner r and element i (sma/sma_trainer.h has the whole algorithm):
//         d = g + wd * theta                    (theta: the pre-step replica, kept in snapshot)
//         v = first_step[r] ? d : mu * v + d    (PyTorch's momentum form)
//         c = alpha * (theta - z)
//         theta = theta - lr * v - c
//       and sum[i] = sum over r (in row order) of c: the SMA update and the intra-device sum in
//       one pass. Without z/sum (or alpha 0) it is R independent SgdSteps and sum is not written.
//   SmaCentralStep(z [P], z_prev [P], sum [P]) -> nonfinite f32 [1]
//       z' = z + sum + mu_z * (z - z_prev); z_prev = z; z = z'; out: count of non-finite z'.
//   SmaRowSum(rows [R,S]) -> out [S]
//       out[i] = sum over r (in row order) of scale * rows[r][i] (averaging BN statistics).
// Params: SgdParams / AdamWParams / SmaStepParams / SmaCentralStepParams / SmaRowSumParams
// (runtime/ops/params.h).
#include "runtime/ops/op_util.h"

namespace cb::ops {

const OpDef kSgdStep{.kind = OpKind::SgdStep,
                     .name = "SgdStep",
                     .inputs_min = 3,
                     .inputs_max = 3,
                     .outputs_min = 0,
                     .outputs_max = 0,
                     .internal = true};
const OpDef kAdamWStep{.kind = OpKind::AdamWStep,
                       .name = "AdamWStep",
                       .inputs_min = 4,
                       .inputs_max = 4,
                       .outputs_min = 0,
                       .outputs_max = 0,
                       .internal = true};
const OpDef kSmaStep{.kind = OpKind::SmaStep,
                     .name = "SmaStep",
                     .inputs_min = 4,
                     .inputs_max = 6,
                     .outputs_min = 0,
                     .outputs_max = 0,
                     .internal = true};
const OpDef kSmaCentralStep{.kind = OpKind::SmaCentralStep,
                            .name = "SmaCentralStep",
                            .inputs_min = 3,
                            .inputs_max = 3,
                            .outputs_min = 1,
                            .outputs_max = 1,
                            .internal = true};
const OpDef kSmaRowSum{.kind = OpKind::SmaRowSum,
                       .name = "SmaRowSum",
                       .inputs_min = 1,
                       .inputs_max = 1,
                       .outputs_min = 1,
                       .outputs_max = 1,
                       .internal = true};

}  // namespace cb::ops
