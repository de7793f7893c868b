// Cast(X) to the type in attribute `to`. Known integer contents pass through int->int casts.
#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"

namespace cb::ops {


namespace {
std::any parse(ParseCtx& c) {
  auto to = c.opt_i("to");
  if (!to) c.fail("needs attribute 'to'");
  auto t = dtype_from_onnx(static_cast<int32_t>(*to));
  if (!t)
    c.fail("cannot cast to {} (ONNX type {}): crossbow tensors are f32, f16, bf16, f64, i64, "
           "i32, i8, u8 or bool",
           onnx_dtype_name(static_cast<int32_t>(*to)), *to);
  return CastParams{*t};
}
void infer(InferCtx& c) {
  DType to = c.p<CastParams>().to;
  c.set(0, to, c.shape(0));
  if (const auto* k = c.known(0); k && (dtype_is_int(to) || to == DType::Bool)) c.set_known(0, *k);
}
}  // namespace

const OpDef kCast{OpKind::Cast, "Cast", 1, 1, 1, 1, parse, infer};

}  // namespace cb::ops
