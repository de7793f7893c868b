// Transpose(data) with `perm` (default: reverse the dims).
#include <algorithm>

#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"

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
}  // namespace

const OpDef kTranspose{OpKind::Transpose, "Transpose", 1, 1, 1, 1, parse, infer};

}  // namespace cb::ops
