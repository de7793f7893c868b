// Gather(data, indices) along `axis`: out = data.shape[:axis] + indices.shape +
// data.shape[axis+1:]. Gather on a known shape vector (Shape -> Gather) folds.
#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"
#include "runtime/vjp.h"

namespace cb::ops {

namespace {
std::any parse(ParseCtx& c) { return GatherParams{c.i("axis", 0)}; }
void infer(InferCtx& c) {
  if (!dtype_is_int(c.dtype(1)) || c.dtype(1) == DType::U8 || c.dtype(1) == DType::I8)
    c.fail("indices must be int32 or int64, got {}", dtype_name(c.dtype(1)));
  int64_t r = c.rank(0);
  if (r == 0) c.fail("data must have rank >= 1");
  auto& p = c.p_mut<GatherParams>();
  p.axis = c.axis(p.axis, r, "axis");
  auto axis = static_cast<size_t>(p.axis);
  const Shape& d = c.shape(0);
  Shape out(d.begin(), d.begin() + p.axis);
  out.insert(out.end(), c.shape(1).begin(), c.shape(1).end());
  out.insert(out.end(), d.begin() + p.axis + 1, d.end());
  c.set(0, c.dtype(0), out);
  if (const auto* ki = c.known(1); ki && d[axis].is_static())
    for (const Dim& i : *ki)
      if (!i.batch && (i.value < -d[axis].value || i.value >= d[axis].value))
        c.fail("constant index {} is out of range for axis {} of size {} (data {})", i.value, axis,
               d[axis].value, to_string(d));
  const auto* kd = c.known(0);
  const auto* ki = c.known(1);
  if (kd && ki && r == 1) {
    std::vector<Dim> k;
    Dim len = d[axis];
    for (const Dim& i : *ki) {
      if (i.batch || len.batch) return;
      int64_t j = i.value < 0 ? i.value + len.value : i.value;
      if (j < 0 || j >= len.value)
        c.fail("index {} is out of range for axis {} of size {}", i.value, axis, len.value);
      k.push_back((*kd)[static_cast<size_t>(j)]);
    }
    c.set_known(0, k);
  }
}
void vjp(VjpCtx& c) {  // scatter-add dy into zeros shaped like data (embedding tables)
  c.set_dx(0, c.b.emit_with("GatherGrad", {c.dy(0), c.x(1), c.b.shape_of(c.x_shape(0))},
                            c.p<GatherParams>())[0]);
}
void infer_grad(InferCtx& c) { infer_known_shape(c, 0, 0, 2); }
}  // namespace

const OpDef kGather{.kind = OpKind::Gather,
                    .name = "Gather",
                    .inputs_min = 2,
                    .inputs_max = 2,
                    .outputs_min = 1,
                    .outputs_max = 1,
                    .parse = parse,
                    .infer = infer,
                    .nondiff_inputs = bit(1),
                    .vjp = vjp};

// GatherGrad(dY, indices, data_shape) (internal): zeros shaped like data, dY added at the
// gathered positions (repeated indices accumulate).
const OpDef kGatherGrad{.kind = OpKind::GatherGrad,
                        .name = "GatherGrad",
                        .inputs_min = 3,
                        .inputs_max = 3,
                        .outputs_min = 1,
                        .outputs_max = 1,
                        .infer = infer_grad,
                        .nondiff_inputs = bit(1),
                        .value_inputs = bit(2),
                        .internal = true};
}  // namespace cb::ops
