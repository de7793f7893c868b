// A MatMul (MatMulParams: transposed, permuted operands and result) planned as one product per
// batch index of its result, for kernels that run a product one batch index at a time
// (attention_heads.cpp); the MatMul kernel runs its permuted products through the same plan, so
// each index's product is the same call, and gives the same bits, in either.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "runtime/ops/params.h"

namespace cb::cpu {

struct MatMulPlan {
  static constexpr size_t kMaxBatchDims = 16;
  using Dims = std::array<int64_t, kMaxBatchDims>;
  bool bf16 = false;
  // The product BLAS runs: op(A) [m,k] x op(B) [k,n] into C (ldc); `swapped`: it computes
  // Y^T = B^T A^T, B the left operand (the result's rows were not contiguous).
  bool ta = false, tb = false, swapped = false;
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  size_t nbatch = 0;
  int64_t count = 1;  // batch indices
  Dims out{}, sa{}, sb{}, sy{};
  // Element offsets of batch index i's matrices in A, B and Y as stored.
  struct Offsets {
    int64_t a = 0, b = 0, y = 0;
  };
  Offsets offsets(int64_t i) const {
    Offsets o;
    for (size_t d = nbatch; d-- > 0;) {
      const int64_t idx = i % out[d];
      i /= out[d];
      o.a += idx * sa[d];
      o.b += idx * sb[d];
      o.y += idx * sy[d];
    }
    return o;
  }
};
// The dims of MatMul(A, B)'s result as computed (before any y_perm): the operands' broadcast
// batch dims (through their permutations), then [m, n].
std::vector<int64_t> matmul_result_dims(const std::vector<int64_t>& a_dims,
                                        const std::vector<int64_t>& b_dims,
                                        const ops::MatMulParams& mp);
// The plan of MatMul(A, B) -> Y with these stored dims (ranks >= 2).
MatMulPlan plan_matmul(const std::vector<int64_t>& a_dims, const std::vector<int64_t>& b_dims,
                       const std::vector<int64_t>& y_dims, const ops::MatMulParams& mp);
// Batch index i's product, on the calling thread: a / a16 (the operand stored as bf16) and b / b16
// point at its matrices of A and B (offsets(i)), y at its matrix of Y.
void matmul_one(const MatMulPlan& p, const float* a, const uint16_t* a16, const float* b,
                const uint16_t* b16, float* y);

}  // namespace cb::cpu
