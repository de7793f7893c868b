// Conv(X [N,C,D...], W [M,C/group,k...], B [M]?) -> [N,M,D'...]
#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"
#include "runtime/vjp.h"

namespace cb::ops {

namespace {
std::any parse(ParseCtx& c) {
  ConvParams p;
  p.window = parse_window(c, false, true);
  p.group = c.i("group", 1);
  if (p.group <= 0) c.fail("group must be positive, got {}", p.group);
  return p;
}

void infer(InferCtx& c) {
  auto& p = c.p_mut<ConvParams>();
  c.expect_min_rank(0, 3, "X");
  c.expect_float(0, "X");
  c.expect_same_dtype(0, 1);
  if (c.has_input(2)) c.expect_same_dtype(0, 2);  // ONNX: X, W and B are all T
  const Shape& x = c.shape(0);
  const Shape& w = c.shape(1);
  if (w.size() != x.size()) c.fail("W {} must have the rank of X {}", to_string(w), to_string(x));
  if (!p.window.kernel_shape.empty()) {
    for (size_t i = 0; i < p.window.kernel_shape.size(); ++i)
      if (i + 2 >= w.size() || w[i + 2] != Dim::of(p.window.kernel_shape[i]))
        c.fail("kernel_shape attribute does not match W {}", to_string(w));
  } else {
    for (size_t i = 2; i < w.size(); ++i) p.window.kernel_shape.push_back(w[i].value);
  }
  if (x[1].batch || w[0].batch || w[1].batch) c.fail("channels must not depend on the batch");
  if (x[1].value != w[1].value * p.group)
    c.fail("X {} has {} channels but W {} with group={} expects {}", to_string(x), x[1].value,
           to_string(w), p.group, w[1].value * p.group);
  if (w[0].value % p.group != 0)
    c.fail("W {} has {} output channels, not divisible by group={}", to_string(w), w[0].value,
           p.group);
  if (c.has_input(2) && (c.rank(2) != 1 || c.shape(2)[0] != w[0]))
    c.fail("bias B {} must be [{}] (W's output channels)", to_string(c.shape(2)), w[0].value);
  Shape out{x[0], w[0]};
  Shape spatial = infer_window(c, p.window, Shape(x.begin() + 2, x.end()));
  out.insert(out.end(), spatial.begin(), spatial.end());
  c.set(0, c.dtype(0), out);
}
void vjp(VjpCtx& c) {  // one ConvGrad computes dX, dW and dB (those needed)
  auto out = c.b.emit_with("ConvGrad", {c.dy(0), c.x(0), c.x(1)}, c.p<ConvParams>(),
                           c.node().has_input(2) ? 3 : 2);
  for (size_t i = 0; i < out.size(); ++i) {
    if (c.need(i))
      c.set_dx(i, out[i]);
    else
      c.b.omit(out[i]);  // e.g. no dX for the first layer: the kernel skips it
  }
}
void infer_grad(InferCtx& c) {  // (dY, X, W) -> (dX, dW, dB [M])
  infer_like(c, 0, 1);
  infer_like(c, 1, 2);
  c.set(2, c.dtype(2), {c.shape(2)[0]});
}
}  // namespace

const OpDef kConv{.kind = OpKind::Conv,
                  .name = "Conv",
                  .inputs_min = 2,
                  .inputs_max = 3,
                  .outputs_min = 1,
                  .outputs_max = 1,
                  .parse = parse,
                  .infer = infer,
                  .weight_inputs = bit(1) | bit(2),
                  .vjp = vjp};

// ConvGrad(dY, X, W) -> (dX, dW, dB?) (internal), with the forward's ConvParams.
const OpDef kConvGrad{.kind = OpKind::ConvGrad,
                      .name = "ConvGrad",
                      .inputs_min = 3,
                      .inputs_max = 3,
                      .outputs_min = 2,
                      .outputs_max = 3,
                      .infer = infer_grad,
                      .internal = true};
}  // namespace cb::ops
