// Tile(input, repeats): output dim i = input dim i * repeats[i] (repeats: int64 [rank], known
// before execution, possibly in terms of N). Known 1-D integer contents are tiled at import time.
// The gradient sums dY's copies: dY [r0*d0, r1*d1, ...] reshaped to [r0, d0, r1, d1, ...] (dims
// with r = 1 left whole), then ReduceSum over the r axes.
#include "runtime/ops/op_util.h"
#include "runtime/vjp.h"

namespace cb::ops {

namespace {
void infer(InferCtx& c) {
  if (c.dtype(1) != DType::I64)
    c.fail("repeats (input 1 '{}') must be int64, got {}", c.in(1).name, dtype_name(c.dtype(1)));
  c.expect_rank(1, 1, "repeats");
  std::vector<Dim> reps = c.known_dims(1, "repeats");
  const Shape& in = c.shape(0);
  if (reps.size() != in.size())
    c.fail("repeats has {} values; input of rank {} needs {}", reps.size(), in.size(), in.size());
  Shape out(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (reps[i].value < 0) c.fail("repeats[{}] must not be negative, got {}", i, reps[i].value);
    auto d = dim_mul(in[i], reps[i]);
    if (!d)
      c.fail("dim {} ({}) times repeats {} is not of the form a or a*N", i, to_string(in[i]),
             to_string(reps[i]));
    out[i] = *d;
  }
  c.set(0, c.dtype(0), out);
  const auto* k = c.known(0);
  if (!k || in.size() != 1 || !out[0].is_static() || out[0].value > kKnownMaxElems ||
      k->size() != static_cast<size_t>(in[0].value))
    return;
  std::vector<Dim> tiled;
  for (int64_t r = 0; r < reps[0].value; ++r) tiled.insert(tiled.end(), k->begin(), k->end());
  c.set_known(0, tiled);
}

void vjp(VjpCtx& c) {
  const Shape x = c.x_shape(0);
  const std::vector<Dim>& reps = *c.val(c.x(1)).known;
  DType t = c.val(c.dy(0)).dtype;
  for (size_t i = 0; i < x.size(); ++i)
    if (reps[i] == Dim::of(0) || x[i] == Dim::of(0)) {  // an empty output or X: zeros
      c.set_dx(0, c.b.op("Expand", {c.b.scalar(0.0, t), c.b.shape_of(x)}));
      return;
    }
  Shape split;
  std::vector<int64_t> axes;
  for (size_t i = 0; i < x.size(); ++i) {
    if (reps[i] != Dim::of(1)) {
      axes.push_back(static_cast<int64_t>(split.size()));
      split.push_back(reps[i]);
    }
    split.push_back(x[i]);
  }
  if (axes.empty()) {
    c.set_dx(0, c.dy(0));
    return;
  }
  if (split.size() > 16) c.fail("the gradient needs rank {} (at most 16)", split.size());
  ValueId g = c.b.reshape_to(c.dy(0), split);
  c.set_dx(0, c.b.op("ReduceSum", {g, c.b.ints(axes)}, {{"keepdims", int64_t{0}}}));
}
}  // namespace

const OpDef kTile{.kind = OpKind::Tile,
                  .name = "Tile",
                  .inputs_min = 2,
                  .inputs_max = 2,
                  .outputs_min = 1,
                  .outputs_max = 1,
                  .infer = infer,
                  .value_inputs = bit(1),
                  .vjp = vjp};

}  // namespace cb::ops
