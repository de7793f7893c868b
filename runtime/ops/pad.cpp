// Pad(data, pads, constant_value?, axes?) (attributes pads/value before opset 11).
// pads = [begin_0, ..., begin_k, end_0, ..., end_k]; negative pads crop.
#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"

namespace cb::ops {


namespace {
std::any parse(ParseCtx& c) {
  PadParams p;
  p.mode = c.s("mode", "constant");
  if (p.mode != "constant" && p.mode != "reflect" && p.mode != "edge")
    c.fail("mode '{}' is not one of constant, reflect, edge", p.mode);
  if (c.opset() < 11) {
    p.pads = c.opt_ints(c.opset() < 2 ? "paddings" : "pads");
    p.value = c.f("value", 0);
    if (!p.pads) c.fail("needs attribute 'pads'");
  }
  return p;
}
void infer(InferCtx& c) {
  const auto& p = c.p<PadParams>();
  std::vector<int64_t> pads = p.pads ? *p.pads : c.known_ints(1, "pads");
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
}  // namespace

const OpDef kPad{OpKind::Pad, "Pad", 1, 4, 1, 1, parse, infer, 0, 0, bit(1) | bit(3)};

}  // namespace cb::ops
