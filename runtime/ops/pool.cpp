// Pooling: MaxPool (optional i64 Indices output), AveragePool, GlobalAveragePool.
// X [N,C,D...] -> [N,C,D'...]; the sliding-window rule is shared with Conv (op_util).
#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"
#include "runtime/vjp.h"

namespace cb::ops {

namespace {
std::any parse_max(ParseCtx& c) {
  PoolParams p;
  p.window = parse_window(c, c.opset() >= 10, c.opset() >= 10);
  p.storage_order = c.i("storage_order", 0);
  if (p.window.kernel_shape.empty()) c.fail("needs attribute 'kernel_shape'");
  return p;
}
std::any parse_avg(ParseCtx& c) {
  PoolParams p;
  p.window = parse_window(c, c.opset() >= 10, false);
  p.count_include_pad = c.i("count_include_pad", 0) != 0;
  if (p.window.kernel_shape.empty()) c.fail("needs attribute 'kernel_shape'");
  return p;
}

// MaxPool from opset 12 also takes int8 and uint8; everything else pools floats only.
Shape pooled(InferCtx& c, bool allow_8bit) {
  auto& p = c.p_mut<PoolParams>();
  c.expect_min_rank(0, 3, "X");
  if (!(allow_8bit && (c.dtype(0) == DType::I8 || c.dtype(0) == DType::U8))) c.expect_float(0, "X");
  const Shape& x = c.shape(0);
  if (p.window.kernel_shape.size() != x.size() - 2)
    c.fail("kernel_shape has {} dims but X {} has {} spatial dims", p.window.kernel_shape.size(),
           to_string(x), x.size() - 2);
  Shape out{x[0], x[1]};
  Shape spatial = infer_window(c, p.window, Shape(x.begin() + 2, x.end()));
  out.insert(out.end(), spatial.begin(), spatial.end());
  return out;
}
void infer_max(InferCtx& c) {
  Shape out = pooled(c, c.opset() >= 12);
  c.set(0, c.dtype(0), out);
  c.set(1, DType::I64, out);
}
void infer_avg(InferCtx& c) { c.set(0, c.dtype(0), pooled(c, false)); }

void infer_global(InferCtx& c) {
  c.expect_min_rank(0, 3, "X");
  c.expect_float(0, "X");
  Shape out = c.shape(0);
  for (size_t i = 2; i < out.size(); ++i) out[i] = Dim::of(1);
  c.set(0, c.dtype(0), out);
}
void vjp_max(VjpCtx& c) {  // the window maximum (recomputed from X) gets dy
  if (c.dy(1) != kNoValue) c.fail("the Indices output has no gradient");
  c.set_dx(0, c.b.emit_with("MaxPoolGrad", {c.dy(0), c.x(0)}, c.p<PoolParams>())[0]);
}
void vjp_avg(VjpCtx& c) {
  c.set_dx(0, c.b.emit_with("AveragePoolGrad", {c.dy(0), c.b.shape_of(c.x_shape(0))},
                            c.p<PoolParams>())[0]);
}
void vjp_global(VjpCtx& c) {  // dx = expand(dy) / (H*W)
  const Shape& x = c.x_shape(0);
  int64_t n = 1;
  for (size_t i = 2; i < x.size(); ++i) n *= x[i].value;
  DType t = c.val(c.dy(0)).dtype;
  ValueId e = c.b.op("Expand", {c.dy(0), c.b.shape_of(x)});
  c.set_dx(0, c.b.op("Div", {e, c.b.scalar(static_cast<double>(n), t)}));
}
void infer_max_grad(InferCtx& c) { infer_like(c, 0, 1); }
void infer_avg_grad(InferCtx& c) { infer_known_shape(c, 0, 0, 1); }
}  // namespace

const OpDef kMaxPool{.kind = OpKind::MaxPool,
                     .name = "MaxPool",
                     .inputs_min = 1,
                     .inputs_max = 1,
                     .outputs_min = 1,
                     .outputs_max = 2,
                     .parse = parse_max,
                     .infer = infer_max,
                     .vjp = vjp_max};
const OpDef kAveragePool{.kind = OpKind::AveragePool,
                         .name = "AveragePool",
                         .inputs_min = 1,
                         .inputs_max = 1,
                         .outputs_min = 1,
                         .outputs_max = 1,
                         .parse = parse_avg,
                         .infer = infer_avg,
                         .vjp = vjp_avg};
const OpDef kGlobalAveragePool{.kind = OpKind::GlobalAveragePool,
                               .name = "GlobalAveragePool",
                               .inputs_min = 1,
                               .inputs_max = 1,
                               .outputs_min = 1,
                               .outputs_max = 1,
                               .infer = infer_global,
                               .vjp = vjp_global};

// MaxPoolGrad(dY, X) and AveragePoolGrad(dY, x_shape) (internal), with the forward's PoolParams.
const OpDef kMaxPoolGrad{.kind = OpKind::MaxPoolGrad,
                         .name = "MaxPoolGrad",
                         .inputs_min = 2,
                         .inputs_max = 2,
                         .outputs_min = 1,
                         .outputs_max = 1,
                         .infer = infer_max_grad,
                         .internal = true};
const OpDef kAveragePoolGrad{.kind = OpKind::AveragePoolGrad,
                             .name = "AveragePoolGrad",
                             .inputs_min = 2,
                             .inputs_max = 2,
                             .outputs_min = 1,
                             .outputs_max = 1,
                             .infer = infer_avg_grad,
                             .value_inputs = bit(1),
                             .internal = true};
}  // namespace cb::ops
