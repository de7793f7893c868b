// BatchNormalization(X [N,C,...], scale [C], B [C], mean [C], var [C]).
// Training mode: opset <= 13 when the node has more than one output (Y, running_mean,
// running_var, saved_mean, saved_var); opset >= 14 with training_mode=1 (Y, running_mean,
// running_var). mean/var initializers are training state (running statistics), not parameters.
// Internal sixth input: a residual added before the fused activation (params.h's residual).
#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"
#include "runtime/vjp.h"

namespace cb::ops {

namespace {
std::any parse(ParseCtx& c) {
  BatchNormalizationParams p;
  p.epsilon = c.f("epsilon", 1e-5f);
  p.momentum = c.f("momentum", 0.9f);
  if (c.opset() < 9) c.only("spatial", 1, "per-activation batchnorm (spatial=0) is not supported");
  if (c.opset() < 7) c.fail("BatchNormalization before opset 7 is not supported");
  if (c.opset() >= 14) {
    p.training = c.i("training_mode", 0) != 0;
  }
  if (c.has_output(5))
    c.fail(
        "has 6 outputs; BatchNormalization gives at most 5 (Y, running_mean, running_var, "
        "saved_mean, saved_var)");
  return p;
}
void infer(InferCtx& c) {
  auto& p = c.p_mut<BatchNormalizationParams>();
  if (c.opset() < 14) p.training = c.num_outputs() > 1;
  if (c.opset() >= 14 && !p.training && c.num_outputs() > 1 && (c.has_output(1) || c.has_output(2)))
    c.fail("running_mean/running_var outputs need training_mode=1");
  c.expect_min_rank(0, 2, "X");
  c.expect_float(0, "X");
  Dim ch = c.shape(0)[1];
  const char* names[] = {"X", "scale", "B", "input_mean", "input_var"};
  for (size_t i = 1; i < 5; ++i)
    if (c.rank(i) != 1 || c.shape(i)[0] != ch)
      c.fail("{} (input {} '{}') must be [{}] (X {} has {} channels), got {}", names[i], i,
             c.in(i).name, to_string(ch), to_string(c.shape(0)), to_string(ch),
             to_string(c.shape(i)));
  if (c.num_inputs() > 5) {  // only fuse_batch_norm_relu's residual input; not in ONNX files
    if (!p.residual)
      c.fail("has {} inputs; BatchNormalization takes 5 (X, scale, B, input_mean, input_var)",
             c.num_inputs());
    if (c.dtype(5) != c.dtype(0) || c.shape(5) != c.shape(0))
      c.fail("the residual input (input 5 '{}') must be X's {} {}, got {} {}", c.in(5).name,
             dtype_name(c.dtype(0)), to_string(c.shape(0)), dtype_name(c.dtype(5)),
             to_string(c.shape(5)));
  }
  c.set(0, c.dtype(0), c.shape(0));
  for (size_t i = 1; i < 5; ++i) c.set(i, c.dtype(3), {ch});
  if (c.num_outputs() > 5) c.set(5, DType::F64, {Dim::of(4), ch});
}
// Forcing training mode (the trainer, cb-run --train-mode) trains as the frameworks do: the running
// variance moves with the unbiased batch variance. A node left in the mode its file gives keeps
// the ONNX spec's biased one.
void set_training(Node& n, bool training) {
  auto& p = std::any_cast<BatchNormalizationParams&>(n.params);
  p.training = training;
  p.unbiased_running_var = training;
}
// Training mode: BatchNormalizationGrad(dY, X, scale) -> (dX, dscale, dB), recomputing the batch
// statistics from X (cheaper in memory than saving them; opset 14+ BN has no saved outputs).
// fuse_batch_norm_relu gives it a fourth input, the fused forward's Y, with the params' relu;
// save_batch_norm_statistics a fifth, the forward's output 5 (input 3 absent without relu).
void vjp(VjpCtx& c) {
  const auto& p = c.p<BatchNormalizationParams>();
  if (!p.training)
    c.fail("BatchNormalization in inference mode (frozen statistics) is not trained");
  auto out = c.b.emit_with("BatchNormalizationGrad", {c.dy(0), c.x(0), c.x(1)}, p, 3);
  for (size_t i = 0; i < 3; ++i)
    if (c.need(i)) c.set_dx(i, out[i]);
}
void infer_grad(InferCtx& c) {
  infer_like(c, 0, 1);
  infer_like(c, 1, 2);
  infer_like(c, 2, 2);
}
}  // namespace

const OpDef kBatchNormalization{.kind = OpKind::BatchNormalization,
                                .name = "BatchNormalization",
                                .inputs_min = 5,
                                .inputs_max = 6,  // 6: the fused residual (params.h)
                                .outputs_min = 1,
                                .outputs_max = 6,
                                .parse = parse,
                                .infer = infer,
                                .state_inputs = bit(3) | bit(4),
                                .weight_inputs = bit(1) | bit(2),
                                .set_training = set_training,
                                .vjp = vjp};

const OpDef kBatchNormalizationGrad{.kind = OpKind::BatchNormalizationGrad,
                                    .name = "BatchNormalizationGrad",
                                    .inputs_min = 3,
                                    .inputs_max = 5,
                                    .outputs_min = 3,
                                    .outputs_max = 3,
                                    .infer = infer_grad,
                                    // dX may take dY's buffer: each kernel reads all of dY
                                    // (its sums) before it writes dX, element for element.
                                    .inplace_inputs = bit(0),
                                    .internal = true};
}  // namespace cb::ops
