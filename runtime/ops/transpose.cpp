// Transpose(data) with `perm` (default: reverse the dims).
#include <algorithm>

#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"
#include "runtime/vjp.h"

namespace cb::ops {

namespace {
std::any parse(ParseCtx& c) { return TransposeParams{c.ints("perm")}; }
void infer(InferCtx& c) {
  auto& perm = c.p_mut<TransposeParams>().perm;
  auto r = static_cast<size_t>(c.rank(0));
  if (perm.empty())
    for (size_t i = 0; i < r; ++i) perm.push_back(static_cast<int64_t>(r - 1 - i));
  if (perm.size() != r) c.fail("perm has {} entries for input of rank {}", perm.size(), r);
  std::vector<bool> seen(r, false);
  Shape out;
  for (int64_t& p : perm) {
    p = c.axis(p, static_cast<int64_t>(r), "perm entry");
    if (seen[static_cast<size_t>(p)]) c.fail("perm is not a permutation");
    seen[static_cast<size_t>(p)] = true;
    out.push_back(c.shape(0)[static_cast<size_t>(p)]);
  }
  c.set(0, c.dtype(0), out);
}
void vjp(VjpCtx& c) {
  const auto& perm = c.p<TransposeParams>().perm;
  std::vector<int64_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    inv[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
  c.set_dx(0, c.b.op("Transpose", {c.dy(0)}, {{"perm", inv}}));
}
}  // namespace

const OpDef kTranspose{.kind = OpKind::Transpose,
                       .name = "Transpose",
                       .inputs_min = 1,
                       .inputs_max = 1,
                       .outputs_min = 1,
                       .outputs_max = 1,
                       .parse = parse,
                       .infer = infer,
                       .vjp = vjp};

}  // namespace cb::ops
