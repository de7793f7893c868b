// LayerNormalization (opset 17): normalises over dims [axis, rank); Scale and B broadcast to
// those dims. Optional outputs Mean and InvStdDev have X's leading dims and 1s after.
#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"

namespace cb::ops {


namespace {
std::any parse(ParseCtx& c) {
  LayerNormalizationParams p;
  p.axis = c.i("axis", -1);
  p.epsilon = c.f("epsilon", 1e-5f);
  auto stash = c.i("stash_type", 1);
  if (stash != 1) c.fail("stash_type={} is not supported (only 1: float32 statistics)", stash);
  return p;
}
void infer(InferCtx& c) {
  c.expect_float(0, "X");
  int64_t r = c.rank(0);
  int64_t axis = c.axis(c.p<LayerNormalizationParams>().axis, r, "axis");
  Shape norm(c.shape(0).begin() + axis, c.shape(0).end());
  for (size_t i = 1; i < 3; ++i) {
    if (!c.has_input(i)) continue;
    auto b = broadcast(norm, c.shape(i));
    if (!b || *b != norm)
      c.fail("{} {} must broadcast to the normalised dims {}", i == 1 ? "Scale" : "B",
             to_string(c.shape(i)), to_string(norm));
  }
  c.set(0, c.dtype(0), c.shape(0));
  Shape stat = c.shape(0);
  for (int64_t i = axis; i < r; ++i) stat[static_cast<size_t>(i)] = Dim::of(1);
  c.set(1, DType::F32, stat);
  c.set(2, DType::F32, stat);
}
}  // namespace

const OpDef kLayerNormalization{OpKind::LayerNormalization,
                                "LayerNormalization",
                                2,
                                3,
                                1,
                                3,
                                parse,
                                infer};

}  // namespace cb::ops
