// Max, Min, Mean, Sum over 1..N inputs with numpy multi-way broadcasting. Max/Min take every
// numeric type from opset 12 (floats before); Mean takes floats; Sum floats (and, beyond ONNX,
// integers). On integer inputs whose contents are known, Max/Min/Sum fold like Add does.
// Gradients: Sum passes dY to every input, Mean dY / N; Max/Min route dY to the inputs equal to
// the result, split equally between ties (PyTorch's maximum/minimum backward, extended to N
// inputs). Each gradient is summed back to its input's shape.
#include "runtime/ops/op_util.h"
#include "runtime/vjp.h"

namespace cb::ops {

namespace {
enum class Kind { Max, Min, Mean, Sum };

template <Kind K>
void infer(InferCtx& c) {
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    if (!c.has_input(i)) c.fail("input {} is missing: the inputs are not optional", i);
    c.expect_same_dtype(0, i);
  }
  DType t = c.dtype(0);
  if (K == Kind::Mean || ((K == Kind::Max || K == Kind::Min) && c.opset() < 12))
    c.expect_float(0, "data_0");
  else if (t == DType::Bool)
    c.fail("inputs must be numeric, got bool");
  c.set(0, t, infer_broadcast(c, 0, c.num_inputs()));
  if (K == Kind::Mean || !dtype_is_int(t)) return;
  auto fold = [](const std::vector<Dim>& a) -> std::optional<Dim> {
    Dim r = a[0];
    for (size_t i = 1; i < a.size(); ++i) {
      if (K == Kind::Sum) {
        auto s = dim_add(r, a[i]);
        if (!s) return std::nullopt;
        r = *s;
      } else if (r != a[i]) {
        if (r.batch || a[i].batch) return std::nullopt;  // max(N, 3) depends on N
        bool take = K == Kind::Max ? a[i].value > r.value : a[i].value < r.value;
        if (take) r = a[i];
      }
    }
    return r;
  };
  if (auto k = known_elementwise(c, c.num_inputs(), fold)) c.set_known(0, *k);
}

void vjp_sum(VjpCtx& c) {
  for (size_t i = 0; i < c.node().inputs.size(); ++i)
    if (c.need(i)) c.set_dx(i, c.b.sum_to(c.dy(0), c.x_shape(i)));
}
void vjp_mean(VjpCtx& c) {
  size_t n = c.node().inputs.size();
  ValueId g = c.dy(0);
  if (n > 1) g = c.b.op("Div", {g, c.b.scalar(static_cast<double>(n), c.val(g).dtype)});
  for (size_t i = 0; i < n; ++i)
    if (c.need(i)) c.set_dx(i, c.b.sum_to(g, c.x_shape(i)));
}
// dX_i = dY / (number of inputs equal to Y) where X_i == Y, else 0.
void vjp_extremum(VjpCtx& c) {
  size_t n = c.node().inputs.size();
  if (n == 1) {
    c.set_dx(0, c.dy(0));
    return;
  }
  DType t = c.val(c.dy(0)).dtype;
  std::vector<ValueId> mask(n);
  ValueId count = kNoValue;
  for (size_t i = 0; i < n; ++i) {
    mask[i] = c.b.op("Equal", {c.x(i), c.y(0)});
    ValueId m = c.b.op("Cast", {mask[i]}, {{"to", int64_t{dtype_to_onnx(t)}}});
    count = count == kNoValue ? m : c.b.op("Add", {count, m});
  }
  ValueId share = c.b.op("Div", {c.dy(0), count});
  ValueId zero = c.b.scalar(0.0, t);
  for (size_t i = 0; i < n; ++i)
    if (c.need(i)) c.set_dx(i, c.b.sum_to(c.b.op("Where", {mask[i], share, zero}), c.x_shape(i)));
}
}  // namespace

#define CB_VARIADIC(op_, vjp_)                          \
  const OpDef k##op_{.kind = OpKind::op_,               \
                     .name = #op_,                      \
                     .inputs_min = 1,                   \
                     .inputs_max = -1,                  \
                     .outputs_min = 1,                  \
                     .outputs_max = 1,                  \
                     .infer = infer<Kind::op_>,         \
                     .inplace_inputs = bit(0) | bit(1), \
                     .vjp = vjp_};

CB_VARIADIC(Max, vjp_extremum)
CB_VARIADIC(Min, vjp_extremum)
CB_VARIADIC(Mean, vjp_mean)
CB_VARIADIC(Sum, vjp_sum)
#undef CB_VARIADIC

}  // namespace cb::ops
