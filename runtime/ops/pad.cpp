// Pad(data, pads, constant_value?, axes?) (attributes pads/value before opset 11).
// pads = [begin_0, ..., begin_k, end_0, ..., end_k]; negative pads crop.
#include <algorithm>

#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"
#include "runtime/vjp.h"

namespace cb::ops {

namespace {
std::any parse(ParseCtx& c) {
  PadParams p;
  using M = PadParams::Mode;
  p.mode = c.choice<M>("mode", "constant",
                       {{"constant", M::Constant}, {"reflect", M::Reflect}, {"edge", M::Edge}});
  if (c.opset() < 11) {
    p.pads = c.opt_ints(c.opset() < 2 ? "paddings" : "pads");
    p.value = c.f("value", 0);
    if (!p.pads) c.fail("needs attribute 'pads'");
  }
  return p;
}
void infer(InferCtx& c) {
  const auto& p = c.p<PadParams>();
  std::vector<int64_t> pads = p.pads ? std::vector<int64_t>(*p.pads) : c.known_ints(1, "pads");
  int64_t r = c.rank(0);
  std::vector<int64_t> axes;
  if (c.has_input(3)) {
    for (int64_t a : c.known_ints(3, "axes")) axes.push_back(c.axis(a, r, "axis"));
  } else {
    for (int64_t a = 0; a < r; ++a) axes.push_back(a);
  }
  if (pads.size() != 2 * axes.size())
    c.fail("pads has {} values; {} axes need {}", pads.size(), axes.size(), 2 * axes.size());
  if (c.has_input(2) && c.in(2).shape.size() > 1) c.fail("constant_value must be a scalar");
  Shape out = c.shape(0);
  for (size_t i = 0; i < axes.size(); ++i) {
    Dim& d = out[static_cast<size_t>(axes[i])];
    int64_t add, size;
    if (__builtin_add_overflow(pads[i], pads[i + axes.size()], &add) ||
        __builtin_add_overflow(d.value, add, &size))
      c.fail("pads {} overflow on axis {}", to_string(shape_of(pads)), axes[i]);
    if (add == 0) continue;
    if (d.batch) c.fail("padding the batch dim is not supported");
    if (size < 0) c.fail("pads {} crop dim {} below zero", to_string(shape_of(pads)), axes[i]);
    d.value = size;
  }
  c.set(0, c.dtype(0), out);
}
// Constant mode with pads >= 0: dX is dY's inner block (Slice). Otherwise (reflect and edge fold
// the gradient of every padded copy back onto its source; negative pads crop) PadGrad, with the
// pads resolved over every dim.
void vjp(VjpCtx& c) {
  const auto& p = c.p<PadParams>();
  std::vector<int64_t> given;
  if (p.pads) {
    given.assign(p.pads->begin(), p.pads->end());
  } else {
    for (const Dim& d : *c.val(c.x(1)).known) given.push_back(d.value);
  }
  const Shape x = c.x_shape(0);
  const size_t r = x.size();
  std::vector<int64_t> pads(2 * r, 0);
  if (c.node().has_input(3)) {
    const auto& axes = *c.val(c.x(3)).known;
    for (size_t i = 0; i < axes.size(); ++i) {
      int64_t a = axes[i].value < 0 ? axes[i].value + static_cast<int64_t>(r) : axes[i].value;
      pads[static_cast<size_t>(a)] = given[i];
      pads[static_cast<size_t>(a) + r] = given[i + axes.size()];
    }
  } else {
    pads = given;
  }
  const bool cropped = std::any_of(pads.begin(), pads.end(), [](int64_t v) { return v < 0; });
  if (p.mode != PadParams::Mode::Constant || cropped) {
    PadParams q;
    q.mode = p.mode;
    q.pads = PadList(pads.begin(), pads.end());
    c.set_dx(0, c.b.emit_with("PadGrad", {c.dy(0)}, q)[0]);
    return;
  }
  std::vector<int64_t> starts, ends, axes;
  for (size_t i = 0; i < r; ++i) {
    if (pads[i] == 0 && pads[i + r] == 0) continue;
    starts.push_back(pads[i]);
    ends.push_back(pads[i] + x[i].value);
    axes.push_back(static_cast<int64_t>(i));
  }
  if (axes.empty()) {
    c.set_dx(0, c.dy(0));
    return;
  }
  c.set_dx(0, c.b.op("Slice", {c.dy(0), c.b.ints(starts), c.b.ints(ends), c.b.ints(axes)}));
}

// PadGrad(dY) -> dX: dY's dims less the pads (PadParams::pads holds begins then ends of every dim).
void infer_grad(InferCtx& c) {
  const auto& p = c.p<PadParams>();
  Shape dx = c.shape(0);
  const size_t r = dx.size();
  if (!p.pads || p.pads->size() != 2 * r) c.fail("needs the pads of all {} dims", r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t add = (*p.pads)[i] + (*p.pads)[i + r];
    if (add == 0) continue;
    if (dx[i].batch) c.fail("padding the batch dim is not supported");
    dx[i].value -= add;
  }
  c.set(0, c.dtype(0), dx);
}
}  // namespace

const OpDef kPad{.kind = OpKind::Pad,
                 .name = "Pad",
                 .inputs_min = 1,
                 .inputs_max = 4,
                 .outputs_min = 1,
                 .outputs_max = 1,
                 .parse = parse,
                 .infer = infer,
                 .value_inputs = bit(1) | bit(3),
                 .vjp = vjp};

// PadGrad(dY) (internal) -> dX, with the forward's mode and its pads resolved over every dim:
// each dX element sums the dY elements the forward copied from it.
const OpDef kPadGrad{.kind = OpKind::PadGrad,
                     .name = "PadGrad",
                     .inputs_min = 1,
                     .inputs_max = 1,
                     .outputs_min = 1,
                     .outputs_max = 1,
                     .infer = infer_grad,
                     .internal = true};

}  // namespace cb::ops
