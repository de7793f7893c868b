// Gemm: Y = alpha * op(A) op(B) + beta * C, A [M,K] (or [K,M] with transA), B [K,N] (or [N,K]),
// C broadcastable to [M,N] and optional from opset 11.
#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"
#include "runtime/vjp.h"

namespace cb::ops {

namespace {
std::any parse(ParseCtx& c) {
  GemmParams p;
  p.alpha = c.f("alpha", 1);
  p.beta = c.f("beta", 1);
  p.trans_a = c.i("transA", 0) != 0;
  p.trans_b = c.i("transB", 0) != 0;
  if (c.opset() < 7) c.only("broadcast", 1, "Gemm before opset 7");
  return p;
}
void infer(InferCtx& c) {
  const auto& p = c.p<GemmParams>();
  c.expect_rank(0, 2, "A");
  c.expect_rank(1, 2, "B");
  c.expect_same_dtype(0, 1);
  if (c.has_input(2)) c.expect_same_dtype(0, 2);  // ONNX: A, B and C are all T
  const Shape &a = c.shape(0), &b = c.shape(1);
  Dim m = p.trans_a ? a[1] : a[0], ka = p.trans_a ? a[0] : a[1];
  Dim kb = p.trans_b ? b[1] : b[0], n = p.trans_b ? b[0] : b[1];
  if (ka != kb)
    c.fail("inner dims differ: A {}{} vs B {}{}", to_string(a), p.trans_a ? " (transposed)" : "",
           to_string(b), p.trans_b ? " (transposed)" : "");
  Shape out{m, n};
  if (c.has_input(2) && !broadcast(out, c.shape(2)).has_value())
    c.fail("C {} does not broadcast to the output [{},{}]", to_string(c.shape(2)), to_string(m),
           to_string(n));
  if (c.has_input(2) && *broadcast(out, c.shape(2)) != out)
    c.fail("C {} would enlarge the output [{},{}]", to_string(c.shape(2)), to_string(m),
           to_string(n));
  c.set(0, c.dtype(0), out);
}
// Y = alpha op(A) op(B) + beta C; each gradient is one more Gemm with the right transposes.
void vjp(VjpCtx& c) {
  const auto& p = c.p<GemmParams>();
  auto gemm = [&](ValueId a, ValueId b, bool ta, bool tb) {
    return c.b.op("Gemm", {a, b},
                  {{"alpha", p.alpha}, {"transA", int64_t{ta}}, {"transB", int64_t{tb}}});
  };
  ValueId dy = c.dy(0);
  if (c.need(0))
    c.set_dx(0,
             p.trans_a ? gemm(c.x(1), dy, p.trans_b, true) : gemm(dy, c.x(1), false, !p.trans_b));
  if (c.need(1))
    c.set_dx(1,
             p.trans_b ? gemm(dy, c.x(0), true, p.trans_a) : gemm(c.x(0), dy, !p.trans_a, false));
  if (c.need(2)) {
    DType t = c.val(dy).dtype;
    ValueId d = p.beta == 1.0f ? dy : c.b.op("Mul", {dy, c.b.scalar(p.beta, t)});
    c.set_dx(2, c.b.sum_to(d, c.x_shape(2)));
  }
}
}  // namespace

const OpDef kGemm{.kind = OpKind::Gemm,
                  .name = "Gemm",
                  .inputs_min = 2,
                  .inputs_max = 3,
                  .outputs_min = 1,
                  .outputs_max = 1,
                  .parse = parse,
                  .infer = infer,
                  .weight_inputs = bit(0) | bit(1) | bit(2),
                  .vjp = vjp};

}  // namespace cb::ops
