// The bf16 product of --precision bf16's Gemm and MatMul: op(A) and op(B) rounded to bf16 (nearest
// even), multiplied by oneDNN's matmul primitive in bf16 with f32 accumulation, C f32. oneDNN 2.6
// has no bf16 gemm function, so the primitive is built per shape and cached per thread (as the
// convolutions' are). gemm_bf16 rounds into the calling thread's scratch; a product split over
// the pool (gemm.cpp) rounds each operand once, shared by the threads (gemm_bf16_rounded). Only
// where the cores have AVX-512 BF16 (elsewhere oneDNN offers its reference kernel and the product
// stays f32), and only for products large enough to pay for the rounding pass.
#include "kernels/cpu/blas.h"
#include "runtime/ops/params.h"

#ifdef CB_HAVE_DNNL
#include <dnnl.hpp>
#include <map>
#include <memory>
#include <tuple>

#include "kernels/cpu/dnnl_conv_util.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/storage.h"
#endif

namespace cb::cpu {

#ifdef CB_HAVE_DNNL
namespace {
using dt = dnnl::memory::data_type;

struct MatmulPrim {
  bool ok = false;
  dnnl::matmul mm;
  dnnl::memory a, b, c;
};
// transposes, m, n, k, the rounded operands' leading dims, ldc, accumulate
using MatmulKey =
    std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool>;
using MatmulThread = dnnl_conv::ThreadPrims<MatmulKey, MatmulPrim>;

std::unique_ptr<MatmulPrim> build(MatmulThread& ts, const MatmulKey& key) {
  const auto [ta, tb, m, n, k, lda, ldb, ldc, accumulate] = key;
  auto p = std::make_unique<MatmulPrim>();
  using dims = dnnl::memory::dims;
  // op(A) [m,k] from A [m,k] (rows of lda) or A^T (A stored [k,m], rows of lda); likewise B.
  const dnnl::memory::desc a_md(dims{m, k}, dt::bf16, ta ? dims{1, lda} : dims{lda, 1});
  const dnnl::memory::desc b_md(dims{k, n}, dt::bf16, tb ? dims{1, ldb} : dims{ldb, 1});
  const dnnl::memory::desc c_md(dims{m, n}, dt::f32, dims{ldc, 1});
  dnnl::primitive_attr attr;
  if (accumulate) {
    dnnl::post_ops po;
    po.append_sum(1.0f);
    attr.set_post_ops(po);
  }
  try {
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, ts.eng);
    if (dnnl_conv::is_reference(pd.impl_info_str())) return p;  // no bf16 cores: f32 instead
    p->mm = dnnl::matmul(pd);
  } catch (const dnnl::error&) {
    return p;
  }
  p->a = dnnl::memory(a_md, ts.eng, nullptr);
  p->b = dnnl::memory(b_md, ts.eng, nullptr);
  p->c = dnnl::memory(c_md, ts.eng, nullptr);
  p->ok = true;
  return p;
}

// Whether this machine's oneDNN multiplies bf16 with a real kernel (asked once, on a small
// product): where it does not, every product stays f32.
bool bf16_cores() {
  static const bool ok = [] {
    const OmpTeamOfOne omp_guard;
    return build(MatmulThread::local(), MatmulKey{false, false, 64, 64, 64, 64, 64, 64, false})->ok;
  }();
  return ok;
}
}  // namespace

// Cloned per x86-64 level: at AVX-512 width the rounding costs a few percent of the product, not
// a fifth.
CB_CPU_CLONES void round_bf16(const float* x, int64_t ld, int64_t rows, int64_t cols,
                              uint16_t* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = x + r * ld;
    uint16_t* dst = out + r * cols;
    for (int64_t j = 0; j < cols; ++j) store_s(dst, j, src[j]);
  }
}

bool bf16_product(float alpha, float beta, int64_t m, int64_t n, int64_t k) {
  return alpha == 1 && (beta == 0 || beta == 1) && m * n * k >= ops::kBf16MinMacs && bf16_cores();
}

bool gemm_bf16_rounded(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t* a,
                       int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c,
                       int64_t ldc) {
  MatmulThread& ts = MatmulThread::local();
  const OmpTeamOfOne omp_guard;
  const MatmulKey key{ta, tb, m, n, k, lda, ldb, ldc, beta == 1};
  auto& slot = ts.prims[key];
  if (!slot) slot = build(ts, key);
  MatmulPrim& p = *slot;
  if (!p.ok) return false;
  p.a.set_data_handle(const_cast<uint16_t*>(a));
  p.b.set_data_handle(const_cast<uint16_t*>(b));
  p.c.set_data_handle(c);
  p.mm.execute(ts.strm, {{DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.b}, {DNNL_ARG_DST, p.c}});
  ts.strm.wait();
  return true;
}

bool gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               const uint16_t* a16, int64_t lda, const float* b, const uint16_t* b16, int64_t ldb,
               float beta, float* c, int64_t ldc) {
  if (!bf16_product(alpha, beta, m, n, k)) return false;
  // A as stored: [m, k] rows of lda, or (transposed) [k, m] rows of lda; B likewise. An f32
  // operand is rounded into a dense copy on this thread; a bf16 one is read as it is.
  const int64_t a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
  if (!a16) {
    uint16_t* ra = scratch<uint16_t, 0>(m * k);
    round_bf16(a, lda, a_rows, a_cols, ra);
    a16 = ra;
    lda = a_cols;
  }
  if (!b16) {
    uint16_t* rb = scratch<uint16_t, 1>(k * n);
    round_bf16(b, ldb, b_rows, b_cols, rb);
    b16 = rb;
    ldb = b_cols;
  }
  return gemm_bf16_rounded(ta, tb, m, n, k, a16, lda, b16, ldb, beta, c, ldc);
}
#else
bool bf16_product(float, float, int64_t, int64_t, int64_t) { return false; }
void round_bf16(const float*, int64_t, int64_t, int64_t, uint16_t*) {}
bool gemm_bf16_rounded(bool, bool, int64_t, int64_t, int64_t, const uint16_t*, int64_t,
                       const uint16_t*, int64_t, float, float*, int64_t) {
  return false;
}
bool gemm_bf16(bool, bool, int64_t, int64_t, int64_t, float, const float*, const uint16_t*, int64_t,
               const float*, const uint16_t*, int64_t, float, float*, int64_t) {
  return false;
}
#endif

}  // namespace cb::cpu
