// Helpers shared by the op files: building OpDefs, elementwise inference, and arithmetic on the
// `known` integer contents that lets shape subgraphs fold away at import time.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "runtime/op_catalog.h"
#include "runtime/ops/params.h"

namespace cb::ops {

constexpr uint32_t bit(int i) { return 1u << i; }

// Output 0 = input 0's dtype and shape (Relu, Sigmoid, Dropout's data, ...).
void infer_same_as_input(InferCtx& c);

// numpy broadcasting of inputs [first, last) into one shape, or a clear error naming both shapes.
Shape infer_broadcast(const InferCtx& c, size_t first, size_t last);

// Known contents of an elementwise op's output, when every input's contents are known and they
// are scalars or vectors of one common length. `f` returns nullopt where the result is not a Dim.
std::optional<std::vector<Dim>> known_elementwise(
    const InferCtx& c, size_t n_inputs,
    const std::function<std::optional<Dim>(const std::vector<Dim>&)>& f);

// Reads an axes list from an attribute (older opsets) or an input (newer ones).
std::optional<std::vector<int64_t>> axes_from(const InferCtx& c,
                                              const std::optional<std::vector<int64_t>>& attr,
                                              size_t input);

// Output spatial size of a sliding window (Conv, pools) along one axis.
struct Window {
  int64_t kernel, stride, dilation, pad_begin, pad_end;
};
int64_t window_output(const InferCtx& c, int64_t in, const Window& w, bool ceil_mode);

WindowAttrs parse_window(ParseCtx& c, bool has_ceil_mode, bool has_dilations);
// Resolves auto_pad and defaults against the spatial input dims; returns the output dims and
// writes the effective pads back into `w` (pads are what kernels use).
Shape infer_window(const InferCtx& c, WindowAttrs& w, const Shape& spatial_in);

}  // namespace cb::ops

namespace cb::ops {
// The vjp of every op that only reshapes (Reshape, Flatten, Squeeze, Unsqueeze).
void vjp_reshape(VjpCtx& c);
// Output `out` gets input `in`'s dtype and shape (gradient ops: dX is shaped like X).
inline void infer_like(InferCtx& c, size_t out, size_t in) { c.set(out, c.dtype(in), c.shape(in)); }
// Output `out` gets input `like`'s dtype and the known shape held by input `shape_in`.
inline void infer_known_shape(InferCtx& c, size_t out, size_t like, size_t shape_in) {
  c.set(out, c.dtype(like), c.known_dims(shape_in, "shape"));
}
}  // namespace cb::ops
