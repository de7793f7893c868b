// Squeeze and Unsqueeze; axes are an attribute before opset 13 and an input from 13.
#include <algorithm>

#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"
#include "runtime/vjp.h"

namespace cb::ops {

namespace {
std::any parse(ParseCtx& c) {
  SqueezeParams p;
  if (c.opset() < 13) p.axes = c.opt_ints("axes");
  return p;
}
void pass_known(InferCtx& c) {
  if (const auto* k = c.known(0)) c.set_known(0, *k);
}
void infer_squeeze(InferCtx& c) {
  auto axes = axes_from(c, c.p<SqueezeParams>().axes, 1);
  const Shape& in = c.shape(0);
  int64_t r = c.rank(0);
  std::vector<bool> drop(in.size(), false);
  if (!axes) {
    for (size_t i = 0; i < in.size(); ++i) drop[i] = in[i] == Dim::of(1);
  } else {
    for (int64_t a : *axes) {
      auto n = static_cast<size_t>(c.axis(a, r, "axis"));
      if (in[n] != Dim::of(1))
        c.fail("cannot squeeze axis {} of {}: its size is {}, not 1", a, to_string(in),
               to_string(in[n]));
      drop[n] = true;
    }
  }
  Shape out;
  for (size_t i = 0; i < in.size(); ++i)
    if (!drop[i]) out.push_back(in[i]);
  c.set(0, c.dtype(0), out);
  pass_known(c);
}
void infer_unsqueeze(InferCtx& c) {
  auto axes = axes_from(c, c.p<SqueezeParams>().axes, 1);
  if (!axes) c.fail("needs axes");
  auto r = static_cast<int64_t>(c.rank(0) + static_cast<int64_t>(axes->size()));
  std::vector<bool> add(static_cast<size_t>(r), false);
  for (int64_t a : *axes) {
    auto n = static_cast<size_t>(c.axis(a, r, "axis"));
    if (add[n]) c.fail("axis {} is listed twice", a);
    add[n] = true;
  }
  Shape out;
  size_t j = 0;
  for (size_t i = 0; i < add.size(); ++i) out.push_back(add[i] ? Dim::of(1) : c.shape(0)[j++]);
  c.set(0, c.dtype(0), out);
  pass_known(c);
}
}  // namespace

const OpDef kSqueeze{.kind = OpKind::Squeeze,
                     .name = "Squeeze",
                     .inputs_min = 1,
                     .inputs_max = 2,
                     .outputs_min = 1,
                     .outputs_max = 1,
                     .parse = parse,
                     .infer = infer_squeeze,
                     .value_inputs = bit(1),
                     .alias = true,
                     .vjp = vjp_reshape};
const OpDef kUnsqueeze{.kind = OpKind::Unsqueeze,
                       .name = "Unsqueeze",
                       .inputs_min = 1,
                       .inputs_max = 2,
                       .outputs_min = 1,
                       .outputs_max = 1,
                       .parse = parse,
                       .infer = infer_unsqueeze,
                       .value_inputs = bit(1),
                       .alias = true,
                       .vjp = vjp_reshape};

}  // namespace cb::ops
