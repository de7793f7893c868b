// MaskedSoftmax(X, mask?) -> Y: attention's scale, mask and softmax over the last axis in one op,
// made by fuse_attention_softmax (runtime/passes.h) from the Mul, Where or Add, and Softmax
// nodes exporters write: Y = softmax(masked(scale * X)), masked being Where(mask, fill, .),
// Where(mask, ., fill) or + mask (MaskedSoftmaxParams). The arithmetic is the unfused nodes',
// in their order, in one pass over the [.., T, T] scores instead of three, and only Y is kept for
// the backward pass, MaskedSoftmaxGrad(dY, Y, mask?): dX = scale * Y (dY - sum(dY Y)), 0 where
// the mask filled. The mask never gets a gradient: the pass fuses only masks no parameter
// reaches (bool ones, or float ones computed from inputs and constants).
#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"
#include "runtime/vjp.h"

namespace cb::ops {

namespace {
using Mask = MaskedSoftmaxParams::Mask;

// The mask (input mask_in: 1 of the op, 2 of its gradient) against the kind and X's shape.
void check_mask(InferCtx& c, size_t mask_in, size_t x_in) {
  const auto& p = c.p<MaskedSoftmaxParams>();
  const bool has = c.node().has_input(mask_in);
  if ((p.mask == Mask::None) == has)
    c.fail("{}", has ? "a mask input but no mask kind" : "a mask kind but no mask input");
  if (!has) return;
  if (p.mask == Mask::Add)
    c.expect_same_dtype(x_in, mask_in);
  else if (c.dtype(mask_in) != DType::Bool)
    c.fail("a Where mask must be bool, got {}", dtype_name(c.dtype(mask_in)));
  const Shape &x = c.shape(x_in), &m = c.shape(mask_in);
  bool ok = m.size() <= x.size();
  for (size_t i = 0; ok && i < m.size(); ++i) {
    const Dim md = m[m.size() - 1 - i], xd = x[x.size() - 1 - i];
    ok = md == Dim{1} || md == xd;
  }
  if (!ok) c.fail("mask {} does not broadcast to {}", to_string(m), to_string(x));
}
void infer(InferCtx& c) {
  c.expect_float(0, "X");
  if (c.rank(0) < 1) c.fail("X must have rank >= 1");
  check_mask(c, 1, 0);
  infer_same_as_input(c);
}
void infer_grad(InferCtx& c) {  // (dY, Y, mask?) -> dX
  c.expect_same_dtype(0, 1);
  if (c.shape(0) != c.shape(1))
    c.fail("gradient {} and output {} shapes differ", to_string(c.shape(0)), to_string(c.shape(1)));
  check_mask(c, 2, 1);
  infer_like(c, 0, 1);
}
void vjp(VjpCtx& c) {
  std::vector<ValueId> in = {c.dy(0), c.y(0)};
  if (c.node().has_input(1)) in.push_back(c.x(1));
  c.set_dx(0, c.b.emit_with("MaskedSoftmaxGrad", in, c.p<MaskedSoftmaxParams>())[0]);
}
}  // namespace

const OpDef kMaskedSoftmax{.kind = OpKind::MaskedSoftmax,
                           .name = "MaskedSoftmax",
                           .inputs_min = 1,
                           .inputs_max = 2,
                           .outputs_min = 1,
                           .outputs_max = 1,
                           .infer = infer,
                           .nondiff_inputs = bit(1),
                           .vjp = vjp,
                           .internal = true};
const OpDef kMaskedSoftmaxGrad{.kind = OpKind::MaskedSoftmaxGrad,
                               .name = "MaskedSoftmaxGrad",
                               .inputs_min = 2,
                               .inputs_max = 3,
                               .outputs_min = 1,
                               .outputs_max = 1,
                               .infer = infer_grad,
                               .internal = true};

}  // namespace cb::ops
