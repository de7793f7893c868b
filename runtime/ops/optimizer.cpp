// Optimizer steps over flat buffers (internal; launched by the trainer, never in a graph):
//   SgdStep(param [P], grad [P], velocity [P])            in place, PyTorch's SGD semantics
//   AdamWStep(param [P], grad [P], m [P], v [P])         in place, PyTorch's AdamW semantics
// Params: SgdParams / AdamWParams (runtime/ops/params.h).
#include "runtime/ops/op_util.h"

namespace cb::ops {

const OpDef kSgdStep{.kind = OpKind::SgdStep, .name = "SgdStep", .inputs_min = 3,
                     .inputs_max = 3, .outputs_min = 0, .outputs_max = 0, .internal = true};
const OpDef kAdamWStep{.kind = OpKind::AdamWStep, .name = "AdamWStep", .inputs_min = 4,
                       .inputs_max = 4, .outputs_min = 0, .outputs_max = 0, .internal = true};

}  // namespace cb::ops
