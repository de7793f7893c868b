// Cast(X) to the type in attribute `to`. Known integer contents pass through int->int casts.
#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"
#include "runtime/vjp.h"

namespace cb::ops {

namespace {
std::any parse(ParseCtx& c) {
  auto to = c.opt_i("to");
  if (!to) c.fail("needs attribute 'to'");
  auto t = dtype_from_onnx(static_cast<int32_t>(*to));
  if (!t)
    c.fail(
        "cannot cast to {} (ONNX type {}): crossbow tensors are f32, f16, bf16, f64, i64, "
        "i32, i8, u8 or bool",
        onnx_dtype_name(static_cast<int32_t>(*to)), *to);
  return CastParams{*t};
}
void infer(InferCtx& c) {
  DType to = c.p<CastParams>().to;
  c.set(0, to, c.shape(0));
  if (const auto* k = c.known(0); k && (dtype_is_int(to) || to == DType::Bool)) c.set_known(0, *k);
}
void vjp(VjpCtx& c) {
  DType from = c.val(c.x(0)).dtype;
  if (!dtype_is_float(from)) return;  // integer inputs get no gradient
  c.set_dx(0, c.b.op("Cast", {c.dy(0)}, {{"to", int64_t{dtype_to_onnx(from)}}}));
}
}  // namespace

const OpDef kCast{.kind = OpKind::Cast,
                  .name = "Cast",
                  .inputs_min = 1,
                  .inputs_max = 1,
                  .outputs_min = 1,
                  .outputs_max = 1,
                  .parse = parse,
                  .infer = infer,
                  .vjp = vjp};

}  // namespace cb::ops
