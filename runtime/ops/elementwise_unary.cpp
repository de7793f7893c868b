// Unary elementwise ops: output has the input's type and shape. Their vjps and kernels differ;
// their contract up to inference is this one shape rule, so they share this file.
#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"

namespace cb::ops {

namespace {
void infer_float_unary(InferCtx& c) {
  c.expect_float(0, "X");
  infer_same_as_input(c);
}
void infer_numeric_unary(InferCtx& c) {
  if (c.dtype(0) == DType::Bool) c.fail("input must be numeric, got bool");
  infer_same_as_input(c);
}
void infer_identity(InferCtx& c) {
  infer_same_as_input(c);
  if (const auto* k = c.known(0)) c.set_known(0, *k);
}
void infer_neg(InferCtx& c) {
  infer_numeric_unary(c);
  if (auto k = known_elementwise(c, 1, [](const std::vector<Dim>& a) -> std::optional<Dim> {
        return Dim{-a[0].value, a[0].batch};
      }))
    c.set_known(0, *k);
}

std::any parse_leaky_relu(ParseCtx& c) { return LeakyReluParams{c.f("alpha", 0.01f)}; }
}  // namespace

#define CB_UNARY(name, infer, param_parse) \
  const OpDef k##name{OpKind::name, #name, 1, 1, 1, 1, param_parse, infer, 0, 0, 0, bit(0)};

CB_UNARY(Abs, infer_numeric_unary, nullptr)
CB_UNARY(Ceil, infer_float_unary, nullptr)
CB_UNARY(Erf, infer_float_unary, nullptr)
CB_UNARY(Exp, infer_float_unary, nullptr)
CB_UNARY(Floor, infer_float_unary, nullptr)
CB_UNARY(LeakyRelu, infer_float_unary, parse_leaky_relu)
CB_UNARY(Log, infer_float_unary, nullptr)
CB_UNARY(Neg, infer_neg, nullptr)
CB_UNARY(Reciprocal, infer_float_unary, nullptr)
CB_UNARY(Relu, infer_numeric_unary, nullptr)
CB_UNARY(Sigmoid, infer_float_unary, nullptr)
CB_UNARY(Sqrt, infer_float_unary, nullptr)
CB_UNARY(Tanh, infer_float_unary, nullptr)
#undef CB_UNARY

const OpDef kIdentity{OpKind::Identity, "Identity", 1, 1, 1, 1, nullptr, infer_identity, 0, 0, 0, 0, true};

}  // namespace cb::ops
