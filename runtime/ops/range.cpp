// Range(start, limit, delta): a 1-D sequence whose length must be known before execution.
#include <cmath>

#include "runtime/ops/op_util.h"

namespace cb::ops {

namespace {
void infer(InferCtx& c) {
  for (size_t i = 0; i < 3; ++i) {
    if (c.rank(i) != 0) c.fail("input {} must be a scalar, got shape {}", i, to_string(c.shape(i)));
    c.expect_same_dtype(0, i);
  }
  double v[3];
  for (size_t i = 0; i < 3; ++i) {
    if (const Tensor* t = c.data(i)) {
      v[i] = t->real_at(0);
    } else {
      v[i] = static_cast<double>(c.known_ints(i, "start/limit/delta")[0]);
    }
  }
  if (v[2] == 0) c.fail("delta must not be zero");
  auto n = static_cast<int64_t>(std::max(0.0, std::ceil((v[1] - v[0]) / v[2])));
  c.set(0, c.dtype(0), {Dim::of(n)});
  if (dtype_is_int(c.dtype(0)) && n <= kKnownMaxElems) {
    std::vector<Dim> k;
    for (int64_t i = 0; i < n; ++i)
      k.push_back(Dim::of(static_cast<int64_t>(v[0]) + i * static_cast<int64_t>(v[2])));
    c.set_known(0, k);
  }
}
}  // namespace

const OpDef kRange{.kind = OpKind::Range,
                   .name = "Range",
                   .inputs_min = 3,
                   .inputs_max = 3,
                   .outputs_min = 1,
                   .outputs_max = 1,
                   .infer = infer,
                   .value_inputs = bit(0) | bit(1) | bit(2)};

}  // namespace cb::ops
