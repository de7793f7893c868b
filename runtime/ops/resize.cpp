// Resize(X, roi?, scales?, sizes?) (opset 10: Resize(X, scales)) -> Y, modes nearest, linear and
// cubic (opset 11+), separable over every axis whose size changes (bilinear on images, N-linear
// in general; cubic: the four taps around the source coordinate, Keys' kernel with cubic_coeff_a,
// indices clamped to the input unless exclude_outside drops those taps and renormalises).
// Output dims: sizes, or floor(dim * scale). The coordinate transform maps output index o to a
// source coordinate with the given scale (or output / input where sizes were given):
//   half_pixel (o + 0.5) / s - 0.5; pytorch_half_pixel the same, 0 for outputs of length 1;
//   align_corners o * (in - 1) / (out - 1); asymmetric o / s; tf_half_pixel_for_nn (o + 0.5) / s;
// where `out` is in * scale unfloored (as the ONNX reference has it; sizes: the output size).
// Opset 10 is asymmetric; its nearest rounding (ONNX Runtime's) floors when upsampling and
// rounds up when downsampling. scales and sizes must be known at load time (constants).
// Not supported, each rejected naming the node: tf_crop_and_resize, antialias,
// keep_aspect_ratio_policy other than stretch. exclude_outside changes nothing for nearest and
// linear (an outside tap repeats the edge, which is its inside neighbour); extrapolation_value
// only matters for tf_crop_and_resize.
// Upsample-9 (X, scales) runs as Resize-10.
// Gradient: ResizeGrad (internal), the adjoint: dY scattered back to the taps it came from with
// the same weights (kernels/cpu/resize.cpp).
#include <cmath>

#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"
#include "runtime/vjp.h"

namespace cb::ops {

namespace {
using P = ResizeParams;

// Resize-10 and Upsample: X, scales; asymmetric coordinates, no other attribute than mode.
bool legacy_form(const Node& n, int64_t opset) {
  return opset < 11 || n.def->kind == OpKind::Upsample;
}

std::any parse_form(ParseCtx& c, bool legacy) {
  P p;
  p.mode = c.choice<P::Mode>(
      "mode", "nearest",
      {{"nearest", P::Mode::Nearest}, {"linear", P::Mode::Linear}, {"cubic", P::Mode::Cubic}});
  if (legacy) {
    if (p.mode == P::Mode::Cubic) c.fail("mode 'cubic' needs opset 11 (nearest or linear here)");
    p.coord = P::Coord::Asymmetric;
    p.nearest = P::Nearest::Simple;
    return p;
  }
  const std::string coord = c.s("coordinate_transformation_mode", "half_pixel");
  if (coord == "tf_crop_and_resize")
    c.fail("coordinate_transformation_mode 'tf_crop_and_resize' is not supported");
  p.coord = c.choice<P::Coord>("coordinate_transformation_mode", "half_pixel",
                               {{"half_pixel", P::Coord::HalfPixel},
                                {"pytorch_half_pixel", P::Coord::PytorchHalfPixel},
                                {"align_corners", P::Coord::AlignCorners},
                                {"asymmetric", P::Coord::Asymmetric},
                                {"tf_half_pixel_for_nn", P::Coord::TfHalfPixelForNN}});
  p.nearest = c.choice<P::Nearest>("nearest_mode", "round_prefer_floor",
                                   {{"round_prefer_floor", P::Nearest::RoundPreferFloor},
                                    {"round_prefer_ceil", P::Nearest::RoundPreferCeil},
                                    {"floor", P::Nearest::Floor},
                                    {"ceil", P::Nearest::Ceil}});
  p.cubic_a = c.f("cubic_coeff_a", -0.75f);
  c.f("extrapolation_value", 0.0f);  // tf_crop_and_resize only
  const int64_t exclude = c.i("exclude_outside", 0);
  if (exclude != 0 && exclude != 1) c.fail("exclude_outside must be 0 or 1, got {}", exclude);
  p.exclude_outside = exclude == 1;
  if (c.opset() >= 18) {
    c.only("antialias", 0, "antialiased resizing is not supported");
    p.axes = c.opt_ints("axes");
    const std::string policy = c.s("keep_aspect_ratio_policy", "stretch");
    if (policy != "stretch")
      c.fail("keep_aspect_ratio_policy '{}' is not supported (only stretch)", policy);
  }
  return p;
}

std::any parse(ParseCtx& c) { return parse_form(c, c.opset() < 11); }

void infer(InferCtx& c) {
  auto& p = c.p_mut<P>();
  const bool legacy = legacy_form(c.node(), c.opset());
  c.expect_float(0, "X");
  const Shape& x = c.shape(0);
  const int64_t r = c.rank(0);
  if (r < 1) c.fail("X must have at least one dim");
  std::vector<int64_t> axes;
  if (p.axes) {
    std::vector<bool> seen(static_cast<size_t>(r));
    for (int64_t a : *p.axes) {
      a = c.axis(a, r, "axes");
      if (seen[static_cast<size_t>(a)]) c.fail("axes repeats axis {}", a);
      seen[static_cast<size_t>(a)] = true;
      axes.push_back(a);
    }
  } else {
    for (int64_t a = 0; a < r; ++a) axes.push_back(a);
  }
  const size_t scales_in = legacy ? 1 : 2;
  std::vector<double> scales;
  if (c.has_input(scales_in)) {
    const Tensor* t = c.data(scales_in);
    if (!t)
      c.fail("scales (input {} '{}') must be a constant (an initializer or a Constant node)",
             scales_in, c.in(scales_in).name);
    if (!dtype_is_float(t->dtype)) c.fail("scales must be float, got {}", dtype_name(t->dtype));
    for (int64_t i = 0; i < t->numel(); ++i) scales.push_back(t->real_at(i));
  }
  std::vector<int64_t> sizes;
  if (!legacy && c.has_input(3)) sizes = c.known_ints(3, "sizes");
  if (!scales.empty() && !sizes.empty()) c.fail("takes scales or sizes, not both");
  if (scales.empty() && sizes.empty()) c.fail("needs non-empty scales or sizes");
  const size_t n = scales.empty() ? sizes.size() : scales.size();
  if (n != axes.size())
    c.fail("{} has {} values; {} axes need {}", scales.empty() ? "sizes" : "scales", n, axes.size(),
           axes.size());
  p.scales.assign(static_cast<size_t>(r), 1.0);
  Shape out = x;
  constexpr double kMax = double(int64_t{1} << 40);
  for (size_t k = 0; k < n; ++k) {
    const auto a = static_cast<size_t>(axes[k]);
    const Dim in = x[a];
    double s;
    int64_t len;
    if (!scales.empty()) {
      s = scales[k];
      if (!(s > 0) || s * std::max<double>(1, double(in.value)) > kMax)
        c.fail("scale {} (axis {}) must be positive and finite", s, a);
      if (in.batch) {
        if (s != 1) c.fail("resizing the batch dim is not supported (scale {})", s);
        continue;
      }
      len = static_cast<int64_t>(std::floor(s * double(in.value)));
    } else {
      len = sizes[k];
      if (len < 0 || double(len) > kMax) c.fail("sizes {} (axis {}) is out of range", len, a);
      if (in.batch) c.fail("resizing the batch dim with sizes is not supported");
      s = in.value > 0 ? double(len) / double(in.value) : 1.0;
    }
    if (in.value == 0 && len > 0) c.fail("axis {} is empty and cannot be resized to {}", a, len);
    p.scales[a] = s;
    out[a] = Dim::of(len);
  }
  c.set(0, c.dtype(0), out);
}

// Upsample (deprecated since opset 10) is Resize-10: Upsample-9's inputs are Resize-10's.
std::any parse_upsample(ParseCtx& c) {
  if (c.opset() < 9) c.fail("Upsample before opset 9 (scales as an attribute) is not supported");
  return parse_form(c, true);
}

void vjp(VjpCtx& c) {
  c.set_dx(0, c.b.emit_with("ResizeGrad", {c.dy(0), c.b.shape_of(c.x_shape(0))}, c.p<P>())[0]);
}
void infer_grad(InferCtx& c) { infer_known_shape(c, 0, 0, 1); }
}  // namespace

const OpDef kResize{.kind = OpKind::Resize,
                    .name = "Resize",
                    .inputs_min = 2,
                    .inputs_max = 4,
                    .outputs_min = 1,
                    .outputs_max = 1,
                    .parse = parse,
                    .infer = infer,
                    .value_inputs = bit(1) | bit(2) | bit(3),
                    .vjp = vjp};

const OpDef kUpsample{.kind = OpKind::Upsample,
                      .name = "Upsample",
                      .inputs_min = 2,
                      .inputs_max = 2,
                      .outputs_min = 1,
                      .outputs_max = 1,
                      .parse = parse_upsample,
                      .infer = infer,
                      .value_inputs = bit(1),
                      .vjp = vjp};

// ResizeGrad(dY, x_shape) (internal) -> dX: the adjoint of the forward's taps (ResizeParams,
// scales resolved by the forward's infer()).
const OpDef kResizeGrad{.kind = OpKind::ResizeGrad,
                        .name = "ResizeGrad",
                        .inputs_min = 2,
                        .inputs_max = 2,
                        .outputs_min = 1,
                        .outputs_max = 1,
                        .infer = infer_grad,
                        .value_inputs = bit(1),
                        .internal = true};

}  // namespace cb::ops
