// ConvTranspose(X [N,C,D...], W [C,M/group,k...], B [M]?) -> Y [N,M,D'...], 1-D to 3-D, with
//   D' = stride * (D - 1) + output_padding + (k - 1) * dilation + 1 - pad_begin - pad_end
// (or output_shape, from which the pads are derived). It is the data gradient of the Conv
// Y -> X with weights W: infer() stores that Conv's geometry in ConvParams::window (begin pads as
// resolved, end pads minus output_padding; negative where the output reaches past every window),
// the kernel runs ConvGrad's data path, and the vjp is that Conv (dX) plus ConvGrad's weight
// gradient with the roles of X and dY swapped (dW), dB the sum of dY over N and the spatial dims.
#include <algorithm>

#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"
#include "runtime/vjp.h"

namespace cb::ops {

namespace {
int64_t floor_div2(int64_t v) { return v >= 0 ? v / 2 : -((-v + 1) / 2); }

std::any parse(ParseCtx& c) {
  ConvParams p;
  WindowAttrs w = parse_window(c, false, true);
  p.window.kernel_shape = w.kernel_shape;
  p.window.strides = w.strides;
  p.window.dilations = w.dilations;
  p.transpose.auto_pad = w.auto_pad;
  p.transpose.pads = w.pads;
  p.transpose.output_padding = c.ints("output_padding");
  p.transpose.output_shape = c.ints("output_shape");
  p.group = c.i("group", 1);
  if (p.group <= 0) c.fail("group must be positive, got {}", p.group);
  return p;
}

void infer(InferCtx& c) {
  auto& p = c.p_mut<ConvParams>();
  const ConvParams::Transpose& t = p.transpose;
  c.expect_min_rank(0, 3, "X");
  c.expect_float(0, "X");
  c.expect_same_dtype(0, 1);
  if (c.has_input(2)) c.expect_same_dtype(0, 2);
  const Shape& x = c.shape(0);
  const Shape& w = c.shape(1);
  if (x.size() > 5)
    c.fail("X {} has {} spatial dims; 1 to 3 are supported", to_string(x), x.size() - 2);
  if (w.size() != x.size()) c.fail("W {} must have the rank of X {}", to_string(w), to_string(x));
  const size_t r = x.size() - 2;
  if (x[1].batch || w[0].batch || w[1].batch) c.fail("channels must not depend on the batch");
  if (x[1].value != w[0].value)
    c.fail("X {} has {} channels but W {} has {} input channels", to_string(x), x[1].value,
           to_string(w), w[0].value);
  if (w[0].value % p.group != 0)
    c.fail("W {} has {} input channels, not divisible by group={}", to_string(w), w[0].value,
           p.group);
  const int64_t m = w[1].value * p.group;
  if (c.has_input(2) && (c.rank(2) != 1 || c.shape(2)[0] != Dim::of(m)))
    c.fail("bias B {} must be [{}] (W's output channels times group)", to_string(c.shape(2)), m);
  WindowAttrs& win = p.window;
  if (!win.kernel_shape.empty() && win.kernel_shape.size() != r)
    c.fail("kernel_shape has {} values; {} spatial dims need {}", win.kernel_shape.size(), r, r);
  for (size_t i = 0; i < r; ++i) {
    if (w[i + 2].batch) c.fail("W's spatial dims must not depend on the batch");
    if (!win.kernel_shape.empty() && win.kernel_shape[i] != w[i + 2].value)
      c.fail("kernel_shape attribute does not match W {}", to_string(w));
  }
  if (win.kernel_shape.empty())
    for (size_t i = 0; i < r; ++i) win.kernel_shape.push_back(w[i + 2].value);
  auto check_len = [&](auto& v, size_t n, int64_t def, const char* what) {
    if (v.empty()) v.assign(n, def);
    if (v.size() != n) c.fail("{} has {} values; {} spatial dims need {}", what, v.size(), r, n);
  };
  check_len(win.strides, r, 1, "strides");
  check_len(win.dilations, r, 1, "dilations");
  DimList out_pad = t.output_padding;
  check_len(out_pad, r, 0, "output_padding");
  PadList pads = t.pads;
  check_len(pads, 2 * r, 0, "pads");
  // output_shape: the spatial dims, or (as ONNX Runtime also accepts) the whole output shape
  DimList out_shape = t.output_shape;
  if (out_shape.size() == r + 2) out_shape = DimList(out_shape.begin() + 2, out_shape.end());
  if (!out_shape.empty() && out_shape.size() != r)
    c.fail("output_shape has {} values; {} spatial dims need {}", t.output_shape.size(), r, r);
  constexpr int64_t kMax = int64_t{1} << 40;  // keeps the arithmetic below exact
  Shape out{x[0], Dim::of(m)};
  win.pads.assign(2 * r, 0);
  win.auto_pad = AutoPad::NotSet;
  for (size_t i = 0; i < r; ++i) {
    const int64_t k = win.kernel_shape[i], s = win.strides[i], d = win.dilations[i];
    const int64_t op = out_pad[i];
    if (k <= 0 || k > kMax) c.fail("kernel_shape must be positive, got {}", k);
    if (s <= 0 || s > kMax) c.fail("strides must be positive, got {}", s);
    if (d <= 0 || d > kMax) c.fail("dilations must be positive, got {}", d);
    if (op < 0 || op > kMax) c.fail("output_padding must not be negative, got {}", op);
    if (op >= std::max(s, d))
      c.fail("output_padding {} must be less than the stride {} or the dilation {}", op, s, d);
    if (x[i + 2].batch) c.fail("spatial dim {} depends on the batch size", i);
    const int64_t in = x[i + 2].value, span = d * (k - 1) + 1;
    const int64_t full = s * (in - 1) + op + span;  // the output before pads
    int64_t pb = 0, pe = 0;
    if (!out_shape.empty() || t.auto_pad == AutoPad::SameUpper ||
        t.auto_pad == AutoPad::SameLower) {
      const int64_t want = !out_shape.empty() ? out_shape[i] : in * s;
      if (want < 0 || want > kMax) c.fail("output_shape {} is out of range", want);
      const int64_t total = full - want;  // split as the ONNX spec says (Python's floor division)
      if (t.auto_pad == AutoPad::SameUpper) {
        pb = floor_div2(total);
        pe = total - pb;
      } else {
        pe = floor_div2(total);
        pb = total - pe;
      }
    } else if (t.auto_pad == AutoPad::NotSet) {
      pb = pads[i];
      pe = pads[i + r];
      if (pb < 0 || pe < 0) c.fail("pads must not be negative");
      if (pb > kMax || pe > kMax) c.fail("pads {}+{} are implausibly large", pb, pe);
    }
    const int64_t len = full - pb - pe;
    if (len < 0)
      c.fail("spatial dim {}: pads {}+{} crop the output ({} before pads) below zero", i, pb, pe,
             full);
    win.pads[i] = pb;
    win.pads[i + r] = pe - op;
    out.push_back(Dim::of(len));
  }
  c.set(0, c.dtype(0), out);
}

// Y = ConvGrad_dX(X; W) for the Conv Y -> X, so <dY, Y> = <X, Conv(dY, W)>: dX = Conv(dY, W),
// dW = ConvGrad_dW of that Conv with input dY and output gradient X.
void vjp(VjpCtx& c) {
  const ConvParams& p = c.p<ConvParams>();
  ConvParams q;  // the plain Conv dY -> dX
  q.window = p.window;
  q.group = p.group;
  const Shape y = c.val(c.dy(0)).shape;
  const size_t r = y.size() - 2;
  // Negative pads: output positions that no window reaches; Conv wants them cropped.
  std::vector<int64_t> starts, ends, axes;
  for (size_t i = 0; i < r; ++i) {
    int64_t& pb = q.window.pads[i];
    int64_t& pe = q.window.pads[i + r];
    if (pb >= 0 && pe >= 0) continue;
    starts.push_back(std::max<int64_t>(0, -pb));
    ends.push_back(y[i + 2].value + std::min<int64_t>(0, pe));
    axes.push_back(static_cast<int64_t>(i + 2));
    pb = std::max<int64_t>(pb, 0);
    pe = std::max<int64_t>(pe, 0);
  }
  ValueId dy = c.dy(0);
  if (!axes.empty() && (c.need(0) || c.need(1)))
    dy = c.b.op("Slice", {dy, c.b.ints(starts), c.b.ints(ends), c.b.ints(axes)});
  if (c.need(0)) c.set_dx(0, c.b.emit_with("Conv", {dy, c.x(1)}, q)[0]);
  if (c.need(1)) {
    auto g = c.b.emit_with("ConvGrad", {c.x(0), dy, c.x(1)}, q, 2);  // (d input, dW)
    c.b.omit(g[0]);
    c.set_dx(1, g[1]);
  }
  if (c.need(2)) {
    std::vector<int64_t> sum_axes{0};
    for (size_t i = 0; i < r; ++i) sum_axes.push_back(static_cast<int64_t>(i + 2));
    c.set_dx(2, c.b.op("ReduceSum", {c.dy(0), c.b.ints(sum_axes)}, {{"keepdims", int64_t{0}}}));
  }
}
}  // namespace

const OpDef kConvTranspose{.kind = OpKind::ConvTranspose,
                           .name = "ConvTranspose",
                           .inputs_min = 2,
                           .inputs_max = 3,
                           .outputs_min = 1,
                           .outputs_max = 1,
                           .parse = parse,
                           .infer = infer,
                           .weight_inputs = bit(1) | bit(2),
                           .vjp = vjp};

}  // namespace cb::ops
