// ReduceMean and ReduceSum over `axes` (attribute up to ReduceSum-11 / ReduceMean-17, then an
// optional input). No axes: reduce all, unless noop_with_empty_axes is set.
#include <algorithm>

#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"

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
  Shape out;
  for (size_t i = 0; i < reduce.size(); ++i) {
    if (!reduce[i]) out.push_back(c.shape(0)[i]);
    else if (p.keepdims) out.push_back(Dim::of(1));
  }
  c.set(0, c.dtype(0), out);
}
}  // namespace

const OpDef kReduceMean{OpKind::ReduceMean, "ReduceMean", 1, 2, 1, 1, parse<18>, infer,
                        0,                  0,            bit(1)};
const OpDef kReduceSum{OpKind::ReduceSum, "ReduceSum", 1, 2, 1, 1, parse<13>, infer,
                       0,                 0,           bit(1)};

}  // namespace cb::ops
