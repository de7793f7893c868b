// Pooling: MaxPool (optional i64 Indices output), AveragePool, GlobalAveragePool.
// X [N,C,D...] -> [N,C,D'...]; the sliding-window rule is shared with Conv (op_util).
#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"

namespace cb::ops {

namespace {
std::any parse_max(ParseCtx& c) {
  PoolParams p;
  p.window = parse_window(c, c.opset() >= 10, c.opset() >= 10);
  p.storage_order = c.i("storage_order", 0);
  if (p.window.kernel_shape.empty()) c.fail("needs attribute 'kernel_shape'");
  return p;
}
std::any parse_avg(ParseCtx& c) {
  PoolParams p;
  p.window = parse_window(c, c.opset() >= 10, false);
  p.count_include_pad = c.i("count_include_pad", 0) != 0;
  if (p.window.kernel_shape.empty()) c.fail("needs attribute 'kernel_shape'");
  return p;
}

// MaxPool from opset 12 also takes int8 and uint8; everything else pools floats only.
Shape pooled(InferCtx& c, bool allow_8bit) {
  auto& p = c.p_mut<PoolParams>();
  c.expect_min_rank(0, 3, "X");
  if (!(allow_8bit && (c.dtype(0) == DType::I8 || c.dtype(0) == DType::U8))) c.expect_float(0, "X");
  const Shape& x = c.shape(0);
  if (p.window.kernel_shape.size() != x.size() - 2)
    c.fail("kernel_shape has {} dims but X {} has {} spatial dims", p.window.kernel_shape.size(),
           to_string(x), x.size() - 2);
  Shape out{x[0], x[1]};
  Shape spatial = infer_window(c, p.window, Shape(x.begin() + 2, x.end()));
  out.insert(out.end(), spatial.begin(), spatial.end());
  return out;
}
void infer_max(InferCtx& c) {
  Shape out = pooled(c, c.opset() >= 12);
  c.set(0, c.dtype(0), out);
  c.set(1, DType::I64, out);
}
void infer_avg(InferCtx& c) { c.set(0, c.dtype(0), pooled(c, false)); }

void infer_global(InferCtx& c) {
  c.expect_min_rank(0, 3, "X");
  c.expect_float(0, "X");
  Shape out = c.shape(0);
  for (size_t i = 2; i < out.size(); ++i) out[i] = Dim::of(1);
  c.set(0, c.dtype(0), out);
}
}  // namespace

const OpDef kMaxPool{OpKind::MaxPool, "MaxPool", 1, 1, 1, 2, parse_max, infer_max};
const OpDef kAveragePool{OpKind::AveragePool, "AveragePool", 1, 1, 1, 1, parse_avg, infer_avg};
const OpDef kGlobalAveragePool{
    OpKind::GlobalAveragePool, "GlobalAveragePool", 1, 1, 1, 1, nullptr, infer_global};

}  // namespace cb::ops
