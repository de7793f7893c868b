// Concat(inputs...) along `axis`; all other dims must agree. Known 1-D contents concatenate.
#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"
#include "runtime/vjp.h"

namespace cb::ops {

namespace {
std::any parse(ParseCtx& c) {
  auto axis = c.opt_i("axis");
  if (!axis) {
    if (c.opset() >= 4) c.fail("needs attribute 'axis'");
    axis = 1;
  }
  return ConcatParams{*axis};
}
void infer(InferCtx& c) {
  int64_t r = c.rank(0);
  auto& p = c.p_mut<ConcatParams>();
  p.axis = c.axis(p.axis, r, "axis");
  auto axis = static_cast<size_t>(p.axis);
  Shape out = c.shape(0);
  std::vector<Dim> known;
  bool all_known = true;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    if (!c.has_input(i)) continue;
    c.expect_same_dtype(0, i);
    const Shape& s = c.shape(i);
    if (static_cast<int64_t>(s.size()) != r)
      c.fail("input {} '{}' {} has rank {}, input 0 {} has rank {}", i, c.in(i).name, to_string(s),
             s.size(), to_string(c.shape(0)), r);
    for (size_t d = 0; d < s.size(); ++d)
      if (d != axis && s[d] != out[d])
        c.fail("input {} '{}' {} differs from input 0 {} in dim {} (axis is {})", i, c.in(i).name,
               to_string(s), to_string(c.shape(0)), d, axis);
    if (i > 0) {
      auto sum = dim_add(out[axis], s[axis]);
      if (!sum) c.fail("concatenated dim is not of the form a or a*N");
      out[axis] = *sum;
    }
    if (const auto* k = c.known(i); k && r == 1)
      known.insert(known.end(), k->begin(), k->end());
    else
      all_known = false;
  }
  c.set(0, c.dtype(0), out);
  if (all_known) c.set_known(0, known);
}
void vjp(VjpCtx& c) {  // each input's gradient is its slice of dy along the axis
  int64_t axis = c.p<ConcatParams>().axis;
  int64_t off = 0;
  for (size_t i = 0; i < c.node().inputs.size(); ++i) {
    if (!c.node().has_input(i)) continue;
    Dim d = c.x_shape(i)[static_cast<size_t>(axis)];
    if (d.batch) c.fail("concatenation along the batch dim");
    if (c.need(i))
      c.set_dx(i, c.b.op("Slice",
                         {c.dy(0), c.b.ints({off}), c.b.ints({off + d.value}), c.b.ints({axis})}));
    off += d.value;
  }
}
}  // namespace

const OpDef kConcat{.kind = OpKind::Concat,
                    .name = "Concat",
                    .inputs_min = 1,
                    .inputs_max = -1,
                    .outputs_min = 1,
                    .outputs_max = 1,
                    .parse = parse,
                    .infer = infer,
                    .vjp = vjp};

}  // namespace cb::ops
