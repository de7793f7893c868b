#include "runtime/ops/op_util.h"

#include <cstdint>

#include "runtime/vjp.h"

namespace cb::ops {

void infer_same_as_input(InferCtx& c) { c.set(0, c.dtype(0), c.shape(0)); }

Shape infer_broadcast(const InferCtx& c, size_t first, size_t last) {
  Shape out;
  bool have = false;
  for (size_t i = first; i < last; ++i) {
    if (!c.has_input(i)) continue;
    if (!have) {
      out = c.shape(i);
      have = true;
      continue;
    }
    auto b = broadcast(out, c.shape(i));
    if (!b)
      c.fail(
          "input shapes {} and {} do not broadcast (input {} '{}'); numpy broadcasting "
          "needs equal dims or 1 at each trailing position",
          to_string(out), to_string(c.shape(i)), i, c.in(i).name);
    out = *b;
  }
  return out;
}

std::optional<std::vector<Dim>> known_elementwise(
    const InferCtx& c, size_t n_inputs,
    const std::function<std::optional<Dim>(const std::vector<Dim>&)>& f) {
  size_t len = 1;
  for (size_t i = 0; i < n_inputs; ++i) {
    const auto* k = c.known(i);
    if (!k || c.rank(i) > 1) return std::nullopt;
    if (k->size() != 1) {
      if (len != 1 && len != k->size()) return std::nullopt;
      len = k->size();
    }
  }
  std::vector<Dim> out;
  std::vector<Dim> args(n_inputs);
  for (size_t e = 0; e < len; ++e) {
    for (size_t i = 0; i < n_inputs; ++i) {
      const auto& k = *c.known(i);
      args[i] = k.size() == 1 ? k[0] : k[e];
    }
    auto r = f(args);
    if (!r) return std::nullopt;
    out.push_back(*r);
  }
  return out;
}

std::optional<std::vector<int64_t>> axes_from(const InferCtx& c,
                                              const std::optional<std::vector<int64_t>>& attr,
                                              size_t input) {
  if (attr) return attr;
  if (c.has_input(input)) return c.known_ints(input, "axes");
  return std::nullopt;
}

namespace {
// Window attributes beyond this are no real model's: kernel_shape, dilations and pads are capped
// here, so that shapes and every kernel's index arithmetic stay far from int64 overflow (strides
// need no cap: they only divide, and a window past the input is dropped).
constexpr int64_t kMaxWindowAttr = int64_t{1} << 40;

// The positions a window covers: dilation * (kernel - 1) + 1, or an error naming both attributes
// where that overflows int64 (both may be up to 2^40).
int64_t window_span(const InferCtx& c, int64_t kernel, int64_t dilation) {
  int64_t span = 0;
  if (__builtin_mul_overflow(dilation, kernel - 1, &span) || span == INT64_MAX)
    c.fail("kernel_shape {} with dilations {} spans more positions than int64 counts", kernel,
           dilation);
  return span + 1;
}
}  // namespace

int64_t window_output(const InferCtx& c, int64_t in, const Window& w, bool ceil_mode) {
  if (w.stride <= 0) c.fail("strides must be positive, got {}", w.stride);
  if (w.kernel > kMaxWindowAttr)
    c.fail("kernel_shape {} is implausibly large (at most 2^40)", w.kernel);
  if (w.dilation > kMaxWindowAttr)
    c.fail("dilations {} is implausibly large (at most 2^40)", w.dilation);
  if (w.pad_begin > kMaxWindowAttr || w.pad_end > kMaxWindowAttr)
    c.fail("pads {}+{} are implausibly large (at most 2^40 each)", w.pad_begin, w.pad_end);
  const int64_t span = window_span(c, w.kernel, w.dilation);
  const int64_t avail = in + w.pad_begin + w.pad_end - span;
  if (avail < 0)
    c.fail(
        "window of size {} (kernel {}, dilation {}) does not fit input size {} with pads "
        "{}+{}",
        span, w.kernel, w.dilation, in, w.pad_begin, w.pad_end);
  // avail / stride rounded up without avail + stride - 1, which overflows for strides near 2^63
  int64_t out = (ceil_mode && avail % w.stride != 0 ? avail / w.stride + 1 : avail / w.stride) + 1;
  // A window that would start in the end padding is dropped (PyTorch and ONNX reference).
  if (ceil_mode && (out - 1) * w.stride >= in + w.pad_begin) --out;
  return out;
}

WindowAttrs parse_window(ParseCtx& c, bool has_ceil_mode, bool has_dilations) {
  WindowAttrs w;
  w.auto_pad = c.choice<AutoPad>("auto_pad", "NOTSET",
                                 {{"NOTSET", AutoPad::NotSet},
                                  {"SAME_UPPER", AutoPad::SameUpper},
                                  {"SAME_LOWER", AutoPad::SameLower},
                                  {"VALID", AutoPad::Valid}});
  w.kernel_shape = c.ints("kernel_shape");
  w.strides = c.ints("strides");
  if (has_dilations) w.dilations = c.ints("dilations");
  w.pads = c.ints("pads");
  if (has_ceil_mode) w.ceil_mode = c.i("ceil_mode", 0) != 0;
  return w;
}

Shape infer_window(const InferCtx& c, WindowAttrs& w, const Shape& spatial_in) {
  size_t r = spatial_in.size();
  auto check_len = [&](auto& v, size_t n, int64_t def, const char* what) {
    if (v.empty()) v.assign(n, def);
    if (v.size() != n) c.fail("{} has {} values; {} spatial dims need {}", what, v.size(), r, n);
  };
  check_len(w.kernel_shape, r, -1, "kernel_shape");
  check_len(w.strides, r, 1, "strides");
  check_len(w.dilations, r, 1, "dilations");
  check_len(w.pads, 2 * r, 0, "pads");
  for (size_t i = 0; i < r; ++i) {
    if (w.kernel_shape[i] <= 0) c.fail("kernel_shape must be positive, got {}", w.kernel_shape[i]);
    if (w.dilations[i] <= 0) c.fail("dilations must be positive, got {}", w.dilations[i]);
    if (w.strides[i] <= 0) c.fail("strides must be positive, got {}", w.strides[i]);
    if (w.pads[i] < 0 || w.pads[i + r] < 0) c.fail("pads must not be negative");
  }
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    if (spatial_in[i].batch) c.fail("spatial dim {} depends on the batch size", i);
    int64_t in = spatial_in[i].value;
    if (w.auto_pad == AutoPad::SameUpper || w.auto_pad == AutoPad::SameLower) {
      // The pads SAME derives from the window: check what they come from before using it.
      if (w.kernel_shape[i] > kMaxWindowAttr || w.dilations[i] > kMaxWindowAttr)
        c.fail("kernel_shape {} or dilations {} is implausibly large (at most 2^40)",
               w.kernel_shape[i], w.dilations[i]);
      const int64_t span = window_span(c, w.kernel_shape[i], w.dilations[i]);
      // ceil(in / stride) outputs; (o - 1) * stride < in, so total < span: no overflow
      const int64_t o = in > 0 ? (in - 1) / w.strides[i] + 1 : 0;
      int64_t total = std::max<int64_t>(0, (o - 1) * w.strides[i] + span - in);
      if (total - total / 2 > kMaxWindowAttr)
        c.fail(
            "auto_pad with kernel_shape {} and dilations {} needs pads {}: implausibly large "
            "(at most 2^40 each)",
            w.kernel_shape[i], w.dilations[i], total);
      int64_t small = total / 2, big = total - small;
      w.pads[i] = w.auto_pad == AutoPad::SameUpper ? small : big;
      w.pads[i + r] = total - w.pads[i];
    } else if (w.auto_pad == AutoPad::Valid) {
      w.pads[i] = w.pads[i + r] = 0;
    }
    out[i] = Dim::of(window_output(
        c, in, {w.kernel_shape[i], w.strides[i], w.dilations[i], w.pads[i], w.pads[i + r]},
        w.ceil_mode));
  }
  return out;
}

void vjp_reshape(VjpCtx& c) { c.set_dx(0, c.b.reshape_to(c.dy(0), c.x_shape(0))); }

}  // namespace cb::ops
