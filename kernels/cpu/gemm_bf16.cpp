// The bf16 product of --precision bf16's Gemm and MatMul: op(A) and op(B) rounded to bf16 (nearest
// even), multiplied by oneDNN's matmul primitive in bf16 with f32 accumulation, C f32. oneDNN 2.6
// has no bf16 gemm function, so the primitive is built per shape and cached per thread (as the
// convolutions' are); the rounded operands live in per-thread scratch buffers. Only where the
// cores have AVX-512 BF16 (elsewhere oneDNN offers its reference kernel and the product stays
// f32), and only for products large enough to pay for the rounding pass.
#include "kernels/cpu/blas.h"

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

// Below this many multiply-adds the rounding and the primitive's call cost more than bf16 saves.
constexpr int64_t kBf16MinMacs = int64_t{1} << 18;

struct MatmulPrim {
  bool ok = false;
  dnnl::matmul mm;
  dnnl::memory a, b, c;
};
// transposes, m, n, k, ldc, accumulate
using MatmulKey = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, bool>;
using MatmulThread = dnnl_conv::ThreadPrims<MatmulKey, MatmulPrim>;

std::unique_ptr<MatmulPrim> build(MatmulThread& ts, bool ta, bool tb, int64_t m, int64_t n,
                                  int64_t k, int64_t ldc, bool accumulate) {
  auto p = std::make_unique<MatmulPrim>();
  using dims = dnnl::memory::dims;
  // The rounded operands are dense: op(A) [m,k] from A [m,k] (row-major) or A^T [k,m]; likewise B.
  const dnnl::memory::desc a_md(dims{m, k}, dt::bf16, ta ? dims{1, m} : dims{k, 1});
  const dnnl::memory::desc b_md(dims{k, n}, dt::bf16, tb ? dims{1, k} : dims{n, 1});
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

// rows x cols of x (leading dimension ld) into a dense bf16 [rows, cols]; cloned per x86-64
// level: at AVX-512 width the rounding costs a few percent of the product, not a fifth.
CB_CPU_CLONES void round_rows(const float* x, int64_t ld, int64_t rows, int64_t cols,
                              uint16_t* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = x + r * ld;
    uint16_t* dst = out + r * cols;
    for (int64_t j = 0; j < cols; ++j) store_s(dst, j, src[j]);
  }
}
}  // namespace

bool gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (alpha != 1 || (beta != 0 && beta != 1) || m * n * k < kBf16MinMacs) return false;
  MatmulThread& ts = MatmulThread::local();
  const OmpTeamOfOne omp_guard;
  const bool acc = beta == 1;
  auto& slot = ts.prims[MatmulKey{ta, tb, m, n, k, ldc, acc}];
  if (!slot) slot = build(ts, ta, tb, m, n, k, ldc, acc);
  MatmulPrim& p = *slot;
  if (!p.ok) return false;
  // A as stored: [m, k] rows of lda, or (transposed) [k, m] rows of lda; B likewise.
  uint16_t* ra = scratch<uint16_t, 0>(m * k);
  uint16_t* rb = scratch<uint16_t, 1>(k * n);
  round_rows(a, lda, ta ? k : m, ta ? m : k, ra);
  round_rows(b, ldb, tb ? n : k, tb ? k : n, rb);
  p.a.set_data_handle(ra);
  p.b.set_data_handle(rb);
  p.c.set_data_handle(c);
  p.mm.execute(ts.strm, {{DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.b}, {DNNL_ARG_DST, p.c}});
  ts.strm.wait();
  return true;
}
#else
bool gemm_bf16(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
               int64_t, float, float*, int64_t) {
  return false;
}
#endif

}  // namespace cb::cpu
