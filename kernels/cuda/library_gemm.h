// Gemm and MatMul over a library `Lib` (library_util.h), and their naive fallback kernel.
//
// Gemm / MatMul (cuBLASLt is column-major):
//   - LtProblem: D [m x n] = op(A) [m x k] op(B) [k x n], column-major, with a strided batch. A
//     row-major product Y = op(A) op(B) is the column-major Y^T = op(B)^T op(A)^T: the library's
//     A is our B and its B is our A (row_major_product()).
//   - Gemm: beta * C broadcast into Y first (as the CPU does), then the product accumulates onto
//     it (beta 1), or overwrites (beta 0) when C is absent or beta is 0.
//   - MatMul: the batch dims (numpy broadcasting, 1-D operands promoted) with unit dims dropped,
//     adjacent dims merged where all three operands stay linear; the innermost becomes the
//     library's strided batch (stride 0 for a broadcast operand), the rest a host loop of calls.
//     A shared right-hand matrix folds the batch into the rows (one plain product).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/common/geometry.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/library_util.h"
#include "runtime/error.h"
#include "runtime/ops/params.h"

namespace cb::CB_GPU_NS::lib {

// ---- GEMM problems ------------------------------------------------------------------------------
// D [m x n] = op(A) [m x k] x op(B) [k x n], column-major (element (i, j) of a matrix with
// leading dimension ld at i + j * ld); `batch` of them at element strides sa, sb, sd.
struct LtProblem {
  bool ta = false, tb = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldd = 0;
  int64_t batch = 1, sa = 0, sb = 0, sd = 0;
};

// Row-major Y [M, N] (leading dim N) = op(A) x op(B), A row-major [M, K] ([K, M] when ta) with
// leading dim lda, B [K, N] ([N, K] when tb) with leading dim ldb: the column-major
// Y^T = op(B)^T op(A)^T, i.e. the library's A is our B and its B is our A.
inline LtProblem row_major_product(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda,
                                   int64_t ldb) {
  LtProblem p;
  p.ta = tb;
  p.tb = ta;
  p.m = N;
  p.n = M;
  p.k = K;
  p.lda = ldb;
  p.ldb = lda;
  p.ldd = N;
  return p;
}

// One library call of a MatMul: the problem and the element offsets of its operands (lib_a is
// the MatMul's B, lib_b its A, d its Y).
struct LtCall {
  LtProblem p;
  int64_t a_off = 0, b_off = 0, d_off = 0;
};

// The library's problem, when it cannot run it: one thread per element of D, f64 accumulation.
// beta == 0: D is not read. A and B are TI (f32, f64, or math::BF16Bits: a bf16 product's rounded
// operands, library_bf16.h), D is TD.
template <class TI, class TD = TI>
void naive_gemm(const GpuCtx& c, const LtProblem& p, double alpha, double beta, const TI* A,
                const TI* B, TD* D) {
  parallel_for(c, p.batch * p.m * p.n, [=] CB_HOST_DEVICE(int64_t t) {
    const int64_t i = t % p.m, j = (t / p.m) % p.n, b = t / (p.m * p.n);
    const TI* a = A + b * p.sa;
    const TI* bb = B + b * p.sb;
    TD* d = D + b * p.sd + i + j * p.ldd;
    double acc = 0;
    for (int64_t l = 0; l < p.k; ++l)
      acc += double(math::cast_load(p.ta ? a[l + i * p.lda] : a[i + l * p.lda])) *
             double(math::cast_load(p.tb ? bb[j + l * p.ldb] : bb[l + j * p.ldb]));
    *d = beta == 0 ? TD(alpha * acc) : TD(alpha * acc + beta * double(*d));
  });
}

// MatMul [...,M,K] x [...,K,N] (1-D operands promoted) as library calls; m, n, k and the batch
// count come back too. No calls when the output is empty.
struct MatMulPlan {
  int64_t m = 0, n = 0, k = 0, count = 1;
  std::vector<LtCall> calls;
};

constexpr int64_t kMaxLibBatch = 65535;  // a strided batch larger than this is split

// A batch dim of a MatMul: its size and the element strides of A, B and Y (0: broadcast).
struct BDim {
  int64_t size, sa, sb, sy;
};

// ta / tb: A stored [..., K, M], B [..., N, K] (MatMulParams; both of rank >= 2).
inline MatMulPlan matmul_plan(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                              bool ta = false, bool tb = false) {
  MatMulPlan r;
  const size_t ra = a.size(), rb = b.size();
  if (ra == 0 || rb == 0) fail("MatMul: operands must have rank >= 1, got {} and {}", ra, rb);
  if ((ta || tb) && (ra < 2 || rb < 2)) fail("MatMul: transposed operands need rank >= 2");
  r.m = ra == 1 ? 1 : a[ra - (ta ? 1 : 2)];
  r.k = a[ra - (ta ? 2 : 1)];
  r.n = rb == 1 ? 1 : b[rb - (tb ? 2 : 1)];
  const int64_t kb = rb == 1 ? b[0] : b[rb - (tb ? 1 : 2)];
  if (kb != r.k) fail("MatMul: inner dims differ ({} vs {})", r.k, kb);
  const size_t na = ra > 2 ? ra - 2 : 0, nb = rb > 2 ? rb - 2 : 0, nbatch = std::max(na, nb);
  std::vector<BDim> dims;  // innermost first
  int64_t st_a = r.m * r.k, st_b = r.k * r.n, st_y = r.m * r.n;
  for (size_t i = 0; i < nbatch; ++i) {
    const int64_t da = i < na ? a[na - 1 - i] : 1, db = i < nb ? b[nb - 1 - i] : 1;
    if (da != db && da != 1 && db != 1)
      fail("MatMul: batch dims {} and {} do not broadcast", da, db);
    const int64_t size = da == 1 ? db : da;
    r.count *= size;
    if (size != 1) dims.push_back({size, da == 1 ? 0 : st_a, db == 1 ? 0 : st_b, st_y});
    st_a *= da;
    st_b *= db;
    st_y *= size;
  }
  if (r.count == 0 || r.m == 0 || r.n == 0 || r.k == 0) return r;  // nothing or zeros: the caller
  // Merge an outer dim into the inner one before it where all three stay linear.
  std::vector<BDim> merged;  // innermost first
  for (const BDim& d : dims) {
    if (!merged.empty()) {
      BDim& e = merged.back();
      if (d.sa == e.sa * e.size && d.sb == e.sb * e.size && d.sy == e.sy * e.size) {
        e.size *= d.size;
        continue;
      }
    }
    merged.push_back(d);
  }
  BDim inner{1, 0, 0, r.m * r.n};
  if (!merged.empty()) {
    inner = merged.front();
    merged.erase(merged.begin());
  }
  LtProblem base;
  if (inner.size > 1 && inner.sb == 0 && inner.sa == r.m * r.k && !ta) {
    // One right-hand matrix for this batch: [size*M, K] x [K, N] -> [size*M, N].
    base = row_major_product(false, tb, inner.size * r.m, r.n, r.k, r.k, tb ? r.k : r.n);
    inner = {1, 0, 0, r.m * r.n};
  } else {
    base = row_major_product(ta, tb, r.m, r.n, r.k, ta ? r.m : r.k, tb ? r.k : r.n);
  }
  // The outer dims (innermost first in `merged`) as a host loop.
  int64_t outer = 1;
  for (const BDim& d : merged) outer *= d.size;
  for (int64_t o = 0; o < outer; ++o) {
    int64_t rem = o, oa = 0, ob = 0, oy = 0;
    for (const BDim& d : merged) {
      const int64_t idx = rem % d.size;
      rem /= d.size;
      oa += idx * d.sa;
      ob += idx * d.sb;
      oy += idx * d.sy;
    }
    for (int64_t b0 = 0; b0 < inner.size; b0 += kMaxLibBatch) {
      LtCall call;
      call.p = base;
      call.p.batch = std::min(kMaxLibBatch, inner.size - b0);
      call.p.sa = inner.sb;  // the library's A is our B
      call.p.sb = inner.sa;
      call.p.sd = inner.sy;
      call.a_off = ob + b0 * inner.sb;
      call.b_off = oa + b0 * inner.sa;
      call.d_off = oy + b0 * inner.sy;
      r.calls.push_back(call);
    }
  }
  return r;
}

// ---- the ops ----------------------------------------------------------------------------------
// Runs one problem through the library, or the naive kernel where it declines.
template <class Lib, class T>
void gemm_call(const KernelArgs& a, const GpuCtx& c, const LtProblem& p, double alpha, double beta,
               const T* A, const T* B, T* D) {
  if (!Lib::gemm(c, p, dtype_of<T>(), alpha, beta, A, B, D, a.workspace, ws_left(a, 0)))
    naive_gemm(c, p, alpha, beta, A, B, D);
}

// Y [M,N] = beta * C broadcast to [M,N], as the CPU does (the product then accumulates onto it).
template <class T>
void gemm_c_into(const GpuCtx& c, const TensorView& C, T beta, int64_t m, int64_t n, T* y) {
  const T* cp = C.ptr<T>();
  const geom::GemmC cs = geom::gemm_c(C.dims);
  parallel_for(c, m * n, [=] CB_HOST_DEVICE(int64_t i) {
    y[i] = beta * cp[(i / n) * cs.sm + (i % n) * cs.sn];
  });
}

// Gemm's product op(A) op(B) -> Y [M,N], K deep, and its library problem (set when no size is
// zero).
struct GemmProblem {
  int64_t m = 0, n = 0, k = 0;
  LtProblem lp;
  bool empty() const { return m == 0 || n == 0 || k == 0; }
};

inline GemmProblem gemm_problem(const KernelArgs& a) {
  const auto& p = a.p<ops::GemmParams>();
  const TensorView &A = a.in[0], &B = a.in[1], &Y = a.out[0];
  if (A.rank() != 2 || B.rank() != 2 || Y.rank() != 2)
    fail("Gemm: A, B and Y must be 2-D (got ranks {}, {}, {})", A.rank(), B.rank(), Y.rank());
  GemmProblem g;
  g.m = Y.dims[0];
  g.n = Y.dims[1];
  g.k = p.trans_a ? A.dims[0] : A.dims[1];
  if (!g.empty())
    g.lp = row_major_product(p.trans_a, p.trans_b, g.m, g.n, g.k, A.dims[1], B.dims[1]);
  return g;
}

// Y = beta * C (C broadcast to [M,N]) when Gemm has a C and a nonzero beta; whether it did.
template <class T>
bool gemm_c_term(const KernelArgs& a, const GpuCtx& c, const GemmProblem& g, T* y) {
  const T beta = static_cast<T>(a.p<ops::GemmParams>().beta);
  const bool has_c = a.in.size() > 2 && a.in[2].present() && beta != T(0);
  if (has_c) gemm_c_into(c, a.in[2], beta, g.m, g.n, y);
  return has_c;
}

// Gemm: Y [M,N] = alpha * op(A) op(B) + beta * C (C broadcast to [M,N]).
template <class Lib, class T>
void gemm_run(const KernelArgs& a, const GpuCtx& c) {
  const TensorView &A = a.in[0], &B = a.in[1], &Y = a.out[0];
  const GemmProblem g = gemm_problem(a);
  T* y = Y.ptr<T>();
  const bool has_c = gemm_c_term(a, c, g, y);
  if (g.m == 0 || g.n == 0) return;
  if (g.k == 0) {
    if (!has_c) fill_zero(c, y, Y.bytes());
    return;
  }
  const T alpha = static_cast<T>(a.p<ops::GemmParams>().alpha);
  gemm_call<Lib, T>(a, c, g.lp, static_cast<double>(alpha), has_c ? 1.0 : 0.0, B.ptr<T>(),
                    A.ptr<T>(), y);
}

template <class Lib>
size_t gemm_ws(const KernelArgs& a, const GpuCtx& c) {
  const GemmProblem g = gemm_problem(a);
  if (g.empty()) return 0;
  return Lib::gemm_workspace(c, g.lp, a.in[0].dtype, a.in[1].data, a.in[0].data, a.out[0].data);
}

template <class Lib, class T>
void matmul_run(const KernelArgs& a, const GpuCtx& c) {
  const TensorView &A = a.in[0], &B = a.in[1], &Y = a.out[0];
  const ops::MatMulParams mp =
      a.params && a.params->has_value() ? a.p<ops::MatMulParams>() : ops::MatMulParams{};
  // Permuted operands are the CPU's (fold_matmul_transposes folds them only for CPU devices).
  CB_CHECK(!mp.permuted());
  const MatMulPlan plan = matmul_plan(A.dims, B.dims, mp.trans_a, mp.trans_b);
  if (Y.numel() == 0) return;
  if (plan.k == 0) {
    fill_zero(c, Y.data, Y.bytes());
    return;
  }
  const T* pa = A.ptr<T>();
  const T* pb = B.ptr<T>();
  T* py = Y.ptr<T>();
  for (const LtCall& call : plan.calls)
    gemm_call<Lib, T>(a, c, call.p, 1.0, 0.0, pb + call.a_off, pa + call.b_off, py + call.d_off);
}

template <class Lib>
size_t matmul_ws(const KernelArgs& a, const GpuCtx& c) {
  const TensorView &A = a.in[0], &B = a.in[1], &Y = a.out[0];
  const ops::MatMulParams mp =
      a.params && a.params->has_value() ? a.p<ops::MatMulParams>() : ops::MatMulParams{};
  const MatMulPlan plan = matmul_plan(A.dims, B.dims, mp.trans_a, mp.trans_b);
  const size_t es = dtype_size(A.dtype);
  auto at = [&](const TensorView& v, int64_t off) -> const void* {
    return v.data ? static_cast<const char*>(v.data) + static_cast<size_t>(off) * es : nullptr;
  };
  size_t ws = 0;
  for (size_t i = 0; i < plan.calls.size(); ++i) {
    const LtCall& call = plan.calls[i];
    // Calls of one plan differ only in their offsets: one per distinct alignment suffices, and
    // the library's cache makes repeats cheap; cap the scan for huge host loops.
    if (i >= 64) break;
    ws = std::max(ws, Lib::gemm_workspace(c, call.p, A.dtype, at(B, call.a_off), at(A, call.b_off),
                                          at(Y, call.d_off)));
  }
  return ws;
}

}  // namespace cb::CB_GPU_NS::lib
