// Slice(data, starts, ends, axes?, steps?) (attributes starts/ends/axes before opset 10).
// Starts/ends must be known; a batch dim can only be taken whole.
#include <algorithm>
#include <limits>

#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"
#include "runtime/vjp.h"

namespace cb::ops {

namespace {
std::any parse(ParseCtx& c) {
  SliceParams p;
  if (c.opset() < 10) {
    p.starts = c.opt_ints("starts");
    p.ends = c.opt_ints("ends");
    p.axes = c.opt_ints("axes");
    if (!p.starts || !p.ends) c.fail("needs attributes 'starts' and 'ends'");
  }
  return p;
}

struct Range1 {
  int64_t start, step, len;
};
// ONNX Slice clamping: negative indices count from the end; then [0, dim] for a positive step,
// start in [0, dim-1] and end in [-1, dim-1] for a negative one (an empty dim gives nothing).
Range1 clamp_range(int64_t dim, int64_t start, int64_t end, int64_t step) {
  if (dim == 0) return {0, step, 0};
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
  } else {
    start = std::clamp<int64_t>(start, 0, dim - 1);
    end = std::clamp<int64_t>(end, -1, dim - 1);
  }
  // Written so that huge steps (INT64_MAX, INT64_MIN) do not overflow.
  int64_t len = step > 0 ? (end > start ? (end - start - 1) / step + 1 : 0)
                         : (start > end ? 1 - (start - end - 1) / step : 0);
  return {start, step, len};
}

void infer(InferCtx& c) {
  const auto& p = c.p<SliceParams>();
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.opset() < 10) {
    starts = *p.starts;
    ends = *p.ends;
    if (p.axes) axes = *p.axes;
  } else {
    starts = c.known_ints(1, "starts");
    ends = c.known_ints(2, "ends");
    if (c.has_input(3)) axes = c.known_ints(3, "axes");
    if (c.has_input(4)) steps = c.known_ints(4, "steps");
  }
  int64_t r = c.rank(0);
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    c.fail("starts, ends, axes and steps must have the same length ({}, {}, {}, {})", starts.size(),
           ends.size(), axes.size(), steps.size());
  Shape out = c.shape(0);
  auto& rp = c.p_mut<SliceParams>();
  rp.dim_start.assign(static_cast<size_t>(r), 0);
  rp.dim_step.assign(static_cast<size_t>(r), 1);
  std::vector<bool> seen(static_cast<size_t>(r), false);
  std::optional<Range1> range0;  // for folding known 1-D contents
  for (size_t i = 0; i < starts.size(); ++i) {
    auto a = static_cast<size_t>(c.axis(axes[i], r, "axis"));
    if (seen[a]) c.fail("axis {} is sliced twice", axes[i]);
    seen[a] = true;
    if (steps[i] == 0) c.fail("steps must not be 0");
    Dim d = out[a];
    if (d.batch) {
      if (starts[i] == 0 && steps[i] == 1 && ends[i] >= std::numeric_limits<int32_t>::max())
        continue;
      c.fail("slicing the batch dim {} of {} is not supported (starts {}, ends {})", to_string(d),
             to_string(c.shape(0)), starts[i], ends[i]);
    }
    Range1 rg = clamp_range(d.value, starts[i], ends[i], steps[i]);
    out[a] = Dim::of(rg.len);
    rp.dim_start[a] = rg.start;
    rp.dim_step[a] = rg.step;
    if (a == 0) range0 = rg;
  }
  c.set(0, c.dtype(0), out);
  if (const auto* k = c.known(0); k && r == 1) {
    if (!range0) {
      c.set_known(0, *k);
      return;
    }
    std::vector<Dim> v;
    for (int64_t j = 0; j < range0->len; ++j)
      v.push_back((*k)[static_cast<size_t>(range0->start + j * range0->step)]);
    c.set_known(0, v);
  }
}
void vjp(VjpCtx& c) {
  c.set_dx(
      0, c.b.emit_with("SliceGrad", {c.dy(0), c.b.shape_of(c.x_shape(0))}, c.p<SliceParams>())[0]);
}
void infer_grad(InferCtx& c) { infer_known_shape(c, 0, 0, 1); }
}  // namespace

const OpDef kSlice{.kind = OpKind::Slice,
                   .name = "Slice",
                   .inputs_min = 1,
                   .inputs_max = 5,
                   .outputs_min = 1,
                   .outputs_max = 1,
                   .parse = parse,
                   .infer = infer,
                   .value_inputs = bit(1) | bit(2) | bit(3) | bit(4),
                   .vjp = vjp};

// SliceGrad(dY, x_shape) (internal): dX zero except the sliced positions, which get dY.
const OpDef kSliceGrad{.kind = OpKind::SliceGrad,
                       .name = "SliceGrad",
                       .inputs_min = 2,
                       .inputs_max = 2,
                       .outputs_min = 1,
                       .outputs_max = 1,
                       .infer = infer_grad,
                       .value_inputs = bit(1),
                       .internal = true};
}  // namespace cb::ops
