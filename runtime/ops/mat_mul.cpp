// MatMul with numpy semantics: [...,M,K] x [...,K,N] -> [broadcast(...),M,N]; a 1-D operand is
// promoted by a unit dim that is removed from the result.
#include "runtime/ops/op_util.h"

namespace cb::ops {

namespace {
void infer(InferCtx& c) {
  c.expect_same_dtype(0, 1);
  Shape a = c.shape(0), b = c.shape(1);
  if (a.empty() || b.empty()) c.fail("operands must have rank >= 1, got {} and {}",
                                     to_string(a), to_string(b));
  bool a1 = a.size() == 1, b1 = b.size() == 1;
  if (a1) a.insert(a.begin(), Dim::of(1));
  if (b1) b.push_back(Dim::of(1));
  if (a.back() != b[b.size() - 2])
    c.fail("inner dims differ: A {} vs B {}", to_string(c.shape(0)), to_string(c.shape(1)));
  auto batch = broadcast(Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
  if (!batch)
    c.fail("batch dims of A {} and B {} do not broadcast", to_string(c.shape(0)),
           to_string(c.shape(1)));
  Shape out = *batch;
  if (!a1) out.push_back(a[a.size() - 2]);
  if (!b1) out.push_back(b.back());
  c.set(0, c.dtype(0), out);
}
}  // namespace

const OpDef kMatMul{OpKind::MatMul, "MatMul", 2, 2, 1, 1, nullptr, infer};

}  // namespace cb::ops
