// Split(input, split?) along `axis` into the node's outputs (sizes from `split`, an attribute
// before opset 13 and an input after; else equal parts, the last smaller with num_outputs at 18).
#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"
#include "runtime/vjp.h"

namespace cb::ops {

namespace {
std::any parse(ParseCtx& c) {
  SplitParams p;
  p.axis = c.i("axis", 0);
  if (c.opset() < 13) p.split = c.opt_ints("split");
  if (c.opset() >= 18) p.num_outputs = c.opt_i("num_outputs");
  return p;
}
void infer(InferCtx& c) {
  auto& p = c.p_mut<SplitParams>();
  int64_t r = c.rank(0);
  p.axis = c.axis(p.axis, r, "axis");
  Dim d = c.shape(0)[static_cast<size_t>(p.axis)];
  if (d.batch) c.fail("splitting the batch dim is not supported");
  auto n = static_cast<int64_t>(c.num_outputs());
  std::vector<int64_t> sizes;
  if (p.split)
    sizes = *p.split;
  else if (c.has_input(1))
    sizes = c.known_ints(1, "split");
  if (p.num_outputs && c.has_input(1))
    c.fail("has both the 'split' input and the 'num_outputs' attribute; give one");
  if (sizes.empty()) {
    if (p.num_outputs && *p.num_outputs != n)
      c.fail("num_outputs={} but the node has {} outputs", *p.num_outputs, n);
    if (!p.num_outputs && d.value % n != 0)
      c.fail("dim {} of size {} does not split evenly into {} outputs", p.axis, d.value, n);
    // Split-18 with num_outputs: chunks of ceil(size / n), the last one takes the rest.
    int64_t chunk = (d.value + n - 1) / n, last = d.value - chunk * (n - 1);
    if (last < 0)
      c.fail("dim {} of size {} cannot be split into {} chunks of {} (the last would be {})",
             p.axis, d.value, n, chunk, last);
    sizes.assign(static_cast<size_t>(n), chunk);
    sizes.back() = last;
  }
  if (static_cast<int64_t>(sizes.size()) != n)
    c.fail("split has {} sizes for {} outputs", sizes.size(), n);
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  if (total != d.value)
    c.fail("split sizes {} sum to {}, not the dim size {}", to_string(shape_of(sizes)), total,
           d.value);
  for (size_t i = 0; i < sizes.size(); ++i) {
    Shape s = c.shape(0);
    s[static_cast<size_t>(p.axis)] = Dim::of(sizes[i]);
    c.set(i, c.dtype(0), s);
  }
}
void vjp(VjpCtx& c) {  // concatenate the outputs' gradients, zeros where none flows
  std::vector<ValueId> parts;
  for (size_t i = 0; i < c.node().outputs.size(); ++i) {
    if (c.dy(i) != kNoValue) {
      parts.push_back(c.dy(i));
      continue;
    }
    const Value& y = c.val(c.y(i));
    Tensor zero;
    zero.dtype = y.dtype;
    zero.dims = {1};
    zero.bytes.resize(dtype_size(y.dtype));
    parts.push_back(c.b.op("ConstantOfShape", {c.b.shape_of(y.shape)},
                           {{"value", std::make_shared<Tensor>(zero)}}));
  }
  c.set_dx(0, c.b.op("Concat", parts, {{"axis", c.p<SplitParams>().axis}}));
}
}  // namespace

const OpDef kSplit{.kind = OpKind::Split,
                   .name = "Split",
                   .inputs_min = 1,
                   .inputs_max = 2,
                   .outputs_min = 1,
                   .outputs_max = -1,
                   .parse = parse,
                   .infer = infer,
                   .value_inputs = bit(1),
                   .vjp = vjp};

}  // namespace cb::ops
