// The Reduce* ops over `axes` (an attribute up to ReduceSum-11 and the others' opset 17, then an
// optional input). No axes: reduce all, unless noop_with_empty_axes is set; then nothing is
// reduced and each element goes through the reduction alone (ReduceSumSquare gives X^2, ReduceL1
// |X|, ReduceLogSum log X: the ONNX reference's np.square for ReduceSumSquare, read for all).
// Empty reductions give the identity: 0 for sums, 1 for ReduceProd, -inf/+inf (the type's
// lowest/highest for integers) for ReduceMax/ReduceMin, log 0 = -inf for ReduceLogSum(Exp).
// On known integer contents (shape arithmetic) ReduceSum, ReduceProd, ReduceMax and ReduceMin
// fold (ReduceProd(Shape(x)) is x's element count).
// Gradients (dY reshaped to X's rank with the reduced dims as 1s, written dY~, broadcasts to X):
// Sum: dY~; Mean: dY~ / count; SumSquare: 2 X dY~; L1: sign(X) dY~; L2: X (dY / Y)~ (0 where Y
// is 0); LogSum: (dY / exp Y)~; LogSumExp: dY~ exp(X - Y~); Max/Min: dY~ / (ties in the slice)
// where X == Y~ (PyTorch's amax/amin backward); Prod: dY~ times the product of the slice's other
// elements, exact where X has zeros (the product of the non-zeros where X is the slice's only
// zero, 0 elsewhere in a slice with zeros), as PyTorch's prod backward.
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

enum class Fold { None, Sum, Prod, Max, Min };

// The known contents of a reduced 1-D (or scalar) integer input.
void fold_known(InferCtx& c, Fold f, bool noop) {
  const auto* k = c.known(0);
  if (f == Fold::None || !k || !dtype_is_int(c.dtype(0)) || c.rank(0) > 1) return;
  if (noop || c.rank(0) == 0) {
    c.set_known(0, *k);
    return;
  }
  std::optional<Dim> r =
      f == Fold::Sum || f == Fold::Max || f == Fold::Min ? Dim::of(0) : Dim::of(1);
  if (k->empty() && (f == Fold::Max || f == Fold::Min)) return;  // the type's lowest/highest
  for (size_t i = 0; i < k->size() && r; ++i) {
    const Dim& d = (*k)[i];
    if (f == Fold::Sum) {
      r = dim_add(*r, d);
    } else if (f == Fold::Prod) {
      r = dim_mul(*r, d);
    } else if (i == 0 || d == *r) {
      r = d;
    } else if (d.batch || r->batch) {
      r = std::nullopt;
    } else if (f == Fold::Max ? d.value > r->value : d.value < r->value) {
      r = d;
    }
  }
  if (r) c.set_known(0, {*r});
}

template <Fold F>
void infer(InferCtx& c) {
  const auto& p = c.p<ReduceParams>();
  if (c.num_inputs() > 1 && c.opset() < p.axes_input_since)
    c.fail("axes is an attribute before opset {}, not an input", p.axes_input_since);
  if (c.dtype(0) == DType::Bool) c.fail("data must be numeric, got bool");
  auto axes = axes_from(c, p.axes, 1);
  int64_t r = c.rank(0);
  std::vector<bool> reduce(static_cast<size_t>(r), false);
  auto& reduced = c.p_mut<ReduceParams>().reduced;
  reduced.assign(static_cast<size_t>(r), false);
  if (!axes || axes->empty()) {
    if (p.noop_with_empty_axes) {
      infer_same_as_input(c);
      fold_known(c, F, true);
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
  fold_known(c, F, false);
}

// ---- vjps
bool is_noop(const ReduceParams& p) {
  return std::none_of(p.reduced.begin(), p.reduced.end(), [](bool b) { return b; });
}
// An output-shaped value as X's rank with the reduced dims as 1s (so that it broadcasts to X).
ValueId kept(VjpCtx& c, ValueId v) {
  const auto& p = c.p<ReduceParams>();
  Shape k = c.x_shape(0);
  for (size_t i = 0; i < k.size(); ++i)
    if (p.reduced[i]) k[i] = Dim::of(1);
  return c.b.reshape_to(v, k);
}
ValueId expand_back(VjpCtx& c, ValueId v) {
  if (is_noop(c.p<ReduceParams>())) return v;
  return c.b.op("Expand", {kept(c, v), c.b.shape_of(c.x_shape(0))});
}
// `op` (ReduceSum or ReduceProd) of an X-shaped value over this node's axes, dims kept.
ValueId reduce_like(VjpCtx& c, std::string_view op, ValueId v) {
  const auto& p = c.p<ReduceParams>();
  std::vector<int64_t> axes;
  for (size_t i = 0; i < p.reduced.size(); ++i)
    if (p.reduced[i]) axes.push_back(static_cast<int64_t>(i));
  int64_t since = op == "ReduceSum" ? 13 : 18;
  if (kEmitOpset >= since) return c.b.op(op, {v, c.b.ints(axes)}, {{"keepdims", int64_t{1}}});
  return c.b.op(op, {v}, {{"keepdims", int64_t{1}}, {"axes", axes}});
}
DType dtype_of(VjpCtx& c) { return c.val(c.dy(0)).dtype; }
ValueId cast_to(VjpCtx& c, ValueId v, DType t) {
  return c.b.op("Cast", {v}, {{"to", int64_t{dtype_to_onnx(t)}}});
}

void vjp_sum(VjpCtx& c) { c.set_dx(0, expand_back(c, c.dy(0))); }
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
  DType t = dtype_of(c);
  ValueId n = count->batch ? cast_to(c, c.b.shape_of({*count}), t)
                           : c.b.scalar(static_cast<double>(count->value), t);
  c.set_dx(0, c.b.op("Div", {expand_back(c, c.dy(0)), n}));
}
void vjp_sum_square(VjpCtx& c) {  // 2 X dY~
  ValueId two_dy = c.b.op("Mul", {c.dy(0), c.b.scalar(2.0, dtype_of(c))});
  c.set_dx(0, c.b.op("Mul", {c.x(0), kept(c, two_dy)}));
}
void vjp_l1(VjpCtx& c) {  // sign(X) dY~, sign(0) = 0
  DType t = dtype_of(c);
  ValueId zero = c.b.scalar(0.0, t);
  ValueId sign = c.b.op("Sub", {cast_to(c, c.b.op("Greater", {c.x(0), zero}), t),
                                cast_to(c, c.b.op("Less", {c.x(0), zero}), t)});
  c.set_dx(0, c.b.op("Mul", {sign, kept(c, c.dy(0))}));
}
void vjp_l2(VjpCtx& c) {  // X (dY / Y)~, 0 where Y = 0 (then X is 0 there too)
  ValueId zero = c.b.scalar(0.0, dtype_of(c));
  ValueId r =
      c.b.op("Where", {c.b.op("Equal", {c.y(0), zero}), zero, c.b.op("Div", {c.dy(0), c.y(0)})});
  c.set_dx(0, c.b.op("Mul", {c.x(0), kept(c, r)}));
}
void vjp_log_sum(VjpCtx& c) {  // (dY / sum)~ with sum = exp(Y)
  c.set_dx(0, expand_back(c, c.b.op("Div", {c.dy(0), c.b.op("Exp", {c.y(0)})})));
}
void vjp_log_sum_exp(VjpCtx& c) {  // dY~ exp(X - Y~)
  if (is_noop(c.p<ReduceParams>())) return c.set_dx(0, c.dy(0));
  ValueId e = c.b.op("Exp", {c.b.op("Sub", {c.x(0), kept(c, c.y(0))})});
  c.set_dx(0, c.b.op("Mul", {e, kept(c, c.dy(0))}));
}
void vjp_extremum(VjpCtx& c) {  // dY~ / ties where X == Y~
  if (is_noop(c.p<ReduceParams>())) return c.set_dx(0, c.dy(0));
  DType t = dtype_of(c);
  ValueId mask = c.b.op("Equal", {c.x(0), kept(c, c.y(0))});
  ValueId ties = reduce_like(c, "ReduceSum", cast_to(c, mask, t));
  ValueId share = c.b.op("Div", {kept(c, c.dy(0)), ties});
  c.set_dx(0, c.b.op("Where", {mask, share, c.b.scalar(0.0, t)}));
}
void vjp_prod(VjpCtx& c) {
  if (is_noop(c.p<ReduceParams>())) return c.set_dx(0, c.dy(0));
  DType t = dtype_of(c);
  ValueId zero = c.b.scalar(0.0, t), one = c.b.scalar(1.0, t);
  ValueId is_zero = c.b.op("Equal", {c.x(0), zero});
  ValueId nonzero = c.b.op("Where", {is_zero, one, c.x(0)});  // X with its zeros as 1s
  ValueId prod = reduce_like(c, "ReduceProd", nonzero);       // of the non-zeros
  ValueId zeros = reduce_like(c, "ReduceSum", cast_to(c, is_zero, t));
  // At a zero: the product of the others if it is the slice's only zero. Elsewhere: the product
  // over X / X if the slice has no zero.
  ValueId at_zero = c.b.op("Where", {c.b.op("Equal", {zeros, one}), prod, zero});
  ValueId others =
      c.b.op("Where", {c.b.op("Equal", {zeros, zero}), c.b.op("Div", {prod, nonzero}), zero});
  ValueId d = c.b.op("Where", {is_zero, at_zero, others});
  c.set_dx(0, c.b.op("Mul", {d, kept(c, c.dy(0))}));
}
}  // namespace

#define CB_REDUCE(op_, since_, fold_, vjp_)       \
  const OpDef k##op_{.kind = OpKind::op_,         \
                     .name = #op_,                \
                     .inputs_min = 1,             \
                     .inputs_max = 2,             \
                     .outputs_min = 1,            \
                     .outputs_max = 1,            \
                     .parse = parse<since_>,      \
                     .infer = infer<Fold::fold_>, \
                     .value_inputs = bit(1),      \
                     .vjp = vjp_};

CB_REDUCE(ReduceL1, 18, None, vjp_l1)
CB_REDUCE(ReduceL2, 18, None, vjp_l2)
CB_REDUCE(ReduceLogSum, 18, None, vjp_log_sum)
CB_REDUCE(ReduceLogSumExp, 18, None, vjp_log_sum_exp)
CB_REDUCE(ReduceMax, 18, Max, vjp_extremum)
CB_REDUCE(ReduceMean, 18, None, vjp_mean)
CB_REDUCE(ReduceMin, 18, Min, vjp_extremum)
CB_REDUCE(ReduceProd, 18, Prod, vjp_prod)
CB_REDUCE(ReduceSum, 13, Sum, vjp_sum)
CB_REDUCE(ReduceSumSquare, 18, None, vjp_sum_square)
#undef CB_REDUCE

}  // namespace cb::ops
