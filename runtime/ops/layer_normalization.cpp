// LayerNormalization (opset 17): normalises over dims [axis, rank); Scale and B broadcast to
// those dims. Optional outputs Mean and InvStdDev have X's leading dims and 1s after.
#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"
#include "runtime/vjp.h"

namespace cb::ops {

namespace {
std::any parse(ParseCtx& c) {
  LayerNormalizationParams p;
  p.axis = c.i("axis", -1);
  p.epsilon = c.f("epsilon", 1e-5f);
  auto stash = c.i("stash_type", 1);
  if (stash != 1) c.fail("stash_type={} is not supported (only 1: float32 statistics)", stash);
  return p;
}
void infer(InferCtx& c) {
  c.expect_float(0, "X");
  int64_t r = c.rank(0);
  int64_t axis = c.axis(c.p<LayerNormalizationParams>().axis, r, "axis");
  Shape norm(c.shape(0).begin() + axis, c.shape(0).end());
  for (size_t i = 1; i < 3; ++i) {
    if (!c.has_input(i)) continue;
    auto b = broadcast(norm, c.shape(i));
    if (!b || *b != norm)
      c.fail("{} {} must broadcast to the normalised dims {}", i == 1 ? "Scale" : "B",
             to_string(c.shape(i)), to_string(norm));
  }
  c.set(0, c.dtype(0), c.shape(0));
  Shape stat = c.shape(0);
  for (int64_t i = axis; i < r; ++i) stat[static_cast<size_t>(i)] = Dim::of(1);
  c.set(1, DType::F32, stat);
  c.set(2, DType::F32, stat);
}
// LayerNormalizationGrad(dY, X, scale) -> (dX, dscale, dB), statistics recomputed from X. dB
// comes out shaped like scale; a B of another shape (both broadcast to the normalised dims) gets
// dY summed down to its own shape instead.
void vjp(VjpCtx& c) {
  if (c.dy(1) != kNoValue || c.dy(2) != kNoValue) c.fail("Mean/InvStdDev outputs have no gradient");
  auto out = c.b.emit_with("LayerNormalizationGrad", {c.dy(0), c.x(0), c.x(1)},
                           c.p<LayerNormalizationParams>(), 3);
  for (size_t i = 0; i < 2; ++i)
    if (c.need(i)) c.set_dx(i, out[i]);
  if (c.need(2)) {
    Shape b = c.x_shape(2);
    c.set_dx(2, b == c.x_shape(1) ? out[2] : c.b.sum_to(c.dy(0), b));  // [outer..., norm...] -> B
  }
}
void infer_grad(InferCtx& c) {
  infer_like(c, 0, 1);
  infer_like(c, 1, 2);
  infer_like(c, 2, 2);
}
}  // namespace

const OpDef kLayerNormalization{.kind = OpKind::LayerNormalization,
                                .name = "LayerNormalization",
                                .inputs_min = 2,
                                .inputs_max = 3,
                                .outputs_min = 1,
                                .outputs_max = 3,
                                .parse = parse,
                                .infer = infer,
                                .weight_inputs = bit(1) | bit(2),
                                .vjp = vjp};

const OpDef kLayerNormalizationGrad{.kind = OpKind::LayerNormalizationGrad,
                                    .name = "LayerNormalizationGrad",
                                    .inputs_min = 3,
                                    .inputs_max = 3,
                                    .outputs_min = 3,
                                    .outputs_max = 3,
                                    .infer = infer_grad,
                                    .internal = true};
}  // namespace cb::ops
