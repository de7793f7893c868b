// Reshape(data, shape) and Flatten(input). The target shape must be known before execution
// (a constant, or shape arithmetic that folds in terms of N): 0 copies the input dim (unless
// allowzero), -1 is inferred from the element count.
#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"
#include "runtime/vjp.h"

namespace cb::ops {

struct FlattenParams {
  int64_t axis = 1;
};

namespace {
std::any parse_reshape(ParseCtx& c) {
  ReshapeParams p;
  if (c.opset() >= 14) p.allowzero = c.i("allowzero", 0) != 0;
  if (c.opset() < 5) c.fail("Reshape before opset 5 is not supported");
  return p;
}
void infer_reshape(InferCtx& c) {
  const Shape& in = c.shape(0);
  std::vector<Dim> spec = c.known_dims(1, "shape");
  if (c.rank(1) != 1) c.fail("shape must be 1-D, got {}", to_string(c.shape(1)));
  Shape out;
  int infer_at = -1;
  for (size_t i = 0; i < spec.size(); ++i) {
    Dim d = spec[i];
    if (d == Dim::of(-1)) {
      if (infer_at >= 0) c.fail("shape {} has more than one -1", to_string(spec));
      infer_at = static_cast<int>(i);
    } else if (d == Dim::of(0) && !c.p<ReshapeParams>().allowzero) {
      if (i >= in.size())
        c.fail("shape {} copies dim {} (0) but the input {} has rank {}", to_string(spec), i,
               to_string(in), in.size());
      d = in[i];
    } else if (d.value < 0) {
      c.fail("shape {} has a negative dim {}", to_string(spec), to_string(d));
    }
    out.push_back(d);
  }
  auto in_n = shape_numel(in);
  if (infer_at >= 0) {
    Shape rest = out;
    rest.erase(rest.begin() + infer_at);
    auto rest_n = shape_numel(rest);
    std::optional<Dim> q;
    if (in_n && rest_n) q = dim_div(*in_n, *rest_n);
    if (!q)
      c.fail("cannot infer the -1 in shape {} from input {}: sizes do not divide", to_string(spec),
             to_string(in));
    out[static_cast<size_t>(infer_at)] = *q;
  }
  auto out_n = shape_numel(out);
  if (!in_n || !out_n || *in_n != *out_n)
    c.fail("cannot reshape {} to {}: element counts differ", to_string(in), to_string(out));
  c.set(0, c.dtype(0), out);
  if (const auto* k = c.known(0)) c.set_known(0, *k);
}

std::any parse_flatten(ParseCtx& c) { return FlattenParams{c.i("axis", 1)}; }
void infer_flatten(InferCtx& c) {
  int64_t r = c.rank(0);
  int64_t axis = c.p<FlattenParams>().axis;
  if (axis < 0) axis += r;
  if (axis < 0 || axis > r) c.fail("axis {} is out of range for rank {}", axis, r);
  const Shape& in = c.shape(0);
  auto a = shape_numel(Shape(in.begin(), in.begin() + axis));
  auto b = shape_numel(Shape(in.begin() + axis, in.end()));
  if (!a || !b) c.fail("cannot flatten {} at axis {}", to_string(in), axis);
  c.set(0, c.dtype(0), {*a, *b});
}
}  // namespace

const OpDef kReshape{.kind = OpKind::Reshape,
                     .name = "Reshape",
                     .inputs_min = 2,
                     .inputs_max = 2,
                     .outputs_min = 1,
                     .outputs_max = 1,
                     .parse = parse_reshape,
                     .infer = infer_reshape,
                     .value_inputs = bit(1),
                     .alias = true,
                     .vjp = vjp_reshape};
const OpDef kFlatten{.kind = OpKind::Flatten,
                     .name = "Flatten",
                     .inputs_min = 1,
                     .inputs_max = 1,
                     .outputs_min = 1,
                     .outputs_max = 1,
                     .parse = parse_flatten,
                     .infer = infer_flatten,
                     .alias = true,
                     .vjp = vjp_reshape};

}  // namespace cb::ops
