// Softmax and LogSoftmax along `axis`. Before opset 13 the input is coerced to 2-D at `axis`
// (default 1); from 13 the op works along one axis (default -1). Shape is unchanged either way.
#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"

namespace cb::ops {


namespace {
std::any parse(ParseCtx& c) {
  bool old = c.opset() < 13;
  return SoftmaxParams{c.i("axis", old ? 1 : -1), old};
}
void infer(InferCtx& c) {
  c.expect_float(0, "input");
  auto& p = c.p_mut<SoftmaxParams>();
  int64_t r = std::max<int64_t>(c.rank(0), 1);
  p.axis = c.axis(p.axis, r, "axis");
  infer_same_as_input(c);
}
}  // namespace

const OpDef kSoftmax{OpKind::Softmax, "Softmax", 1, 1, 1, 1, parse, infer};
const OpDef kLogSoftmax{OpKind::LogSoftmax, "LogSoftmax", 1, 1, 1, 1, parse, infer};

}  // namespace cb::ops
