// ReduceMean and ReduceSum over `axes` (attribute up to ReduceSum-11 / ReduceMean-17, then an
// optional input). No axes: reduce all, unless noop_with_empty_axes is set.
#include <algorithm>

#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"
#include "runtime/vjp.h"

namespace cb::ops {

namespace {
template <int kAxesInputSince>
std::any parse(ParseCtx& c) {
  ReduceParams p;
  p.axes_input_since = kAxesInputSince;
  if (c.opset() < kAxesInputSince) {
    p.axes = c.opt_ints("axes");
  } else {
    p.noop_with_empty_axes = c.i("noop_with_empty_axes", 0) != 0;
  }
  p.keepdims = c.i("keepdims", 1) != 0;
  return p;
}
void infer(InferCtx& c) {
  const auto& p = c.p<ReduceParams>();
  if (c.num_inputs() > 1 && c.opset() < p.axes_input_since)
    c.fail("axes is an attribute before opset {}, not an input", p.axes_input_since);
  auto axes = axes_from(c, p.axes, 1);
  int64_t r = c.rank(0);
  std::vector<bool> reduce(static_cast<size_t>(r), false);
  auto& reduced = c.p_mut<ReduceParams>().reduced;
  reduced.assign(static_cast<size_t>(r), false);
  if (!axes || axes->empty()) {
    if (p.noop_with_empty_axes) {
      infer_same_as_input(c);
      return;
    }
    std::fill(reduce.begin(), reduce.end(), true);
  } else {
    for (int64_t a : *axes) {
      auto n = static_cast<size_t>(c.axis(a, r, "axis"));
      if (reduce[n]) c.fail("axis {} is listed twice", a);
      reduce[n] = true;
    }
  }
  reduced = reduce;
  Shape out;
  for (size_t i = 0; i < reduce.size(); ++i) {
    if (!reduce[i])
      out.push_back(c.shape(0)[i]);
    else if (p.keepdims)
      out.push_back(Dim::of(1));
  }
  c.set(0, c.dtype(0), out);
}
// dx = expand(dy with the reduced dims kept as 1s) [/ count for the mean, which may involve N]
ValueId expand_back(VjpCtx& c) {
  const auto& p = c.p<ReduceParams>();
  const Shape& x = c.x_shape(0);
  bool noop = std::none_of(p.reduced.begin(), p.reduced.end(), [](bool b) { return b; });
  if (noop) return c.dy(0);
  Shape kept = x;
  for (size_t i = 0; i < x.size(); ++i)
    if (p.reduced[i]) kept[i] = Dim::of(1);
  ValueId d = c.b.reshape_to(c.dy(0), kept);
  return c.b.op("Expand", {d, c.b.shape_of(x)});
}
void vjp_sum(VjpCtx& c) { c.set_dx(0, expand_back(c)); }
void vjp_mean(VjpCtx& c) {
  const auto& p = c.p<ReduceParams>();
  const Shape& x = c.x_shape(0);
  Shape counted;
  for (size_t i = 0; i < x.size(); ++i)
    if (p.reduced[i]) counted.push_back(x[i]);
  if (counted.empty()) {
    c.set_dx(0, c.dy(0));
    return;
  }
  auto count = shape_numel(counted);
  if (!count) c.fail("cannot count the reduced elements of {}", to_string(x));
  DType t = c.val(c.dy(0)).dtype;
  ValueId n = count->batch
                  ? c.b.op("Cast", {c.b.shape_of({*count})}, {{"to", int64_t{dtype_to_onnx(t)}}})
                  : c.b.scalar(static_cast<double>(count->value), t);
  c.set_dx(0, c.b.op("Div", {expand_back(c), n}));
}
}  // namespace

const OpDef kReduceMean{.kind = OpKind::ReduceMean,
                        .name = "ReduceMean",
                        .inputs_min = 1,
                        .inputs_max = 2,
                        .outputs_min = 1,
                        .outputs_max = 1,
                        .parse = parse<18>,
                        .infer = infer,
                        .value_inputs = bit(1),
                        .vjp = vjp_mean};
const OpDef kReduceSum{.kind = OpKind::ReduceSum,
                       .name = "ReduceSum",
                       .inputs_min = 1,
                       .inputs_max = 2,
                       .outputs_min = 1,
                       .outputs_max = 1,
                       .parse = parse<13>,
                       .infer = infer,
                       .value_inputs = bit(1),
                       .vjp = vjp_sum};

}  // namespace cb::ops
