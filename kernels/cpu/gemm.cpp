// Gemm and MatMul on the CPU through CBLAS (f32 through oneDNN's sgemm when built with it), plus
// the gemm wrappers of blas.h.
// Gemm:   Y [M,N] = alpha * op(A) [M,K] x op(B) [K,N] + beta * C (C broadcast to [M,N]).
// MatMul: [...,M,K] x [...,K,N] -> [broadcast(...),M,N]; 1-D operands are promoted ([K] -> [1,K]
// on the left, [K,1] on the right) and the unit dim is absent from the output view.
// Parallelism: across matrices of a batch, or across row blocks of one large product.
#include <cblas.h>

#include <algorithm>
#include <array>
#include <mutex>
#include <type_traits>

#ifdef CB_HAVE_DNNL
#include <dnnl.h>
#endif

#include "kernels/common/geometry.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/current_pool.h"
#include "kernels/cpu/matmul_plan.h"
#include "runtime/error.h"
#include "runtime/ops/params.h"
#include "runtime/thread_pool.h"

namespace cb::cpu {

void blas_single_thread() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
#ifdef CB_HAVE_DNNL
  // oneDNN's sgemm where crossbow has it: its AVX-512 kernels run the training-sized products
  // (16 x 120 x 400 ...) about twice as fast as OpenBLAS 0.3.21's on the machines we measured,
  // whose cores it does not recognise (Haswell kernels). Single-threaded on the calling thread,
  // as OpenBLAS is: its OpenMP team is set to 1 for the call (conv_dnnl.cpp does the same).
  if (m > 0 && n > 0 && k > 0) {
    dnnl_status_t st;
    {
      const OmpTeamOfOne omp_guard;
      st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    }
    if (st == dnnl_success) return;
  }
#endif
  blas_single_thread();
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
          int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  blas_single_thread();
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

namespace {

// K per slice of a bf16 product reading A transposed (gemm_rows_bf16).
constexpr int64_t kBf16KSlice = 512;

// Below this many multiply-adds a product runs on one thread.
constexpr int64_t kSplitMacs = int64_t{1} << 17;

// One product, split across the pool when it is large enough: along the rows of op(A)/C, or
// along the columns of op(B)/C when C is wider than tall (a training batch of 16 rows times a
// few hundred features: halving 16 rows leaves BLAS two slivers, halving the columns does not).
// An operand stored as bf16 (Value::bf16_storage) for a product that runs in f32 after all (too
// small for the bf16 path, or a shape oneDNN has no bf16 kernel for): widened into a dense f32
// copy in the calling thread's scratch `slot`.
// p + off where p is set: an operand stored as bf16 has no f32 pointer to offset.
template <typename P>
P* at(P* p, int64_t off) {
  return p ? p + off : nullptr;
}

template <int slot>
const float* widened(const uint16_t* x, int64_t ld, int64_t rows, int64_t cols) {
  float* out = scratch<float, slot>(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) out[r * cols + j] = math::bf16_to_f32(x[r * ld + j]);
  return out;
}

// One product on the calling thread: in bf16 where asked and it applies, else in T. a16 / b16:
// the operand stored as bf16 instead (f32 only; the T pointer is then unused).
template <typename T>
void gemm_one(bool bf16, bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
              int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc,
              const uint16_t* a16 = nullptr, const uint16_t* b16 = nullptr) {
  if constexpr (std::is_same_v<T, float>) {
    if (bf16 && gemm_bf16(ta, tb, m, n, k, alpha, a, a16, lda, b, b16, ldb, beta, c, ldc)) return;
    if (a16) {
      const int64_t rows = ta ? k : m, cols = ta ? m : k;
      a = widened<20>(a16, lda, rows, cols);
      lda = cols;
    }
    if (b16) {
      const int64_t rows = tb ? n : k, cols = tb ? k : n;
      b = widened<21>(b16, ldb, rows, cols);
      ldb = cols;
    }
  } else {
    CB_CHECK(!a16 && !b16);
  }
  gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// A bf16 product split over the pool: op(A) and op(B) rounded once, each thread rounding a share
// of their rows into buffers every thread reads (rounding per thread would round the operand the
// split does not cut once per thread), then the blocks of C as gemm_rows splits them. An operand
// stored as bf16 already (a16 / b16) is read as it is. A block oneDNN has no bf16 kernel for runs
// in f32.
void gemm_rows_bf16(ThreadPool& pool, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                    const float* a, const uint16_t* a16, int64_t lda, const float* b,
                    const uint16_t* b16, int64_t ldb, float beta, float* c, int64_t ldc,
                    bool by_cols, int64_t grain) {
  const int64_t a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
  // The bf16 operands and their leading dims: the stored ones, or dense rounded copies.
  uint16_t* own_a = a16 ? nullptr : scratch<uint16_t, 2>(m * k);
  uint16_t* own_b = b16 ? nullptr : scratch<uint16_t, 3>(k * n);
  const uint16_t* ra = a16 ? a16 : own_a;
  const uint16_t* rb = b16 ? b16 : own_b;
  const int64_t ld_ra = a16 ? lda : a_cols, ld_rb = b16 ? ldb : b_cols;
  // Rows to round: A's (none when stored as bf16), then B's.
  const int64_t round_a = a16 ? 0 : a_rows, round_b = b16 ? 0 : b_rows;
  if (round_a + round_b > 0) {
    const int64_t row_grain = std::max<int64_t>(1, 16384 / std::max(a_cols, b_cols));
    pool.parallel_for(
        round_a + round_b,
        [&](int64_t r0, int64_t r1) {
          const int64_t a1 = std::min(r1, round_a);
          if (r0 < a1) round_bf16(a + r0 * lda, lda, a1 - r0, a_cols, own_a + r0 * a_cols);
          const int64_t b0 = std::max(r0, round_a) - round_a, b1 = r1 - round_a;
          if (b0 < b1) round_bf16(b + b0 * ldb, ldb, b1 - b0, b_cols, own_b + b0 * b_cols);
        },
        row_grain);
  }
  // op(A) B with A read transposed over a long K: in K slices accumulated into C (oneDNN's bf16
  // kernels run such a product at about 85% of their rate, its slices at the full rate).
  const int64_t k_step = ta && k > 2 * kBf16KSlice ? kBf16KSlice : k;
  auto product = [&](int64_t mm, int64_t nn, const uint16_t* ap, const uint16_t* bp, float* cp) {
    for (int64_t k0 = 0; k0 < k; k0 += k_step) {
      const int64_t kk = std::min(k_step, k - k0);
      // K is the rows of the stored A^T; of B, its rows (or columns when stored transposed).
      const uint16_t* a0 = ta ? ap + k0 * ld_ra : ap + k0;
      const uint16_t* b0 = tb ? bp + k0 : bp + k0 * ld_rb;
      if (!gemm_bf16_rounded(ta, tb, mm, nn, kk, a0, ld_ra, b0, ld_rb, k0 == 0 ? beta : 1.0f, cp,
                             ldc)) {
        CB_CHECK(k0 == 0);  // the first slice settles it: the same product's primitive
        return false;
      }
    }
    return true;
  };
  pool.parallel_for(
      by_cols ? n : m,
      [&](int64_t i0, int64_t i1) {
        if (by_cols) {  // columns i0.. of op(B): rows of B^T, or columns of B
          const uint16_t* rbc = tb ? rb + i0 * ld_rb : rb + i0;
          if (!product(m, i1 - i0, ra, rbc, c + i0))
            gemm_one(false, ta, tb, m, i1 - i0, k, 1.0f, a, lda, at(b, tb ? i0 * ldb : i0), ldb,
                     beta, c + i0, ldc, a16, b16 ? rbc : nullptr);
        } else {  // rows i0.. of op(A): rows of A, or columns of A^T
          const uint16_t* rar = ta ? ra + i0 : ra + i0 * ld_ra;
          if (!product(i1 - i0, n, rar, rb, c + i0 * ldc))
            gemm_one(false, ta, tb, i1 - i0, n, k, 1.0f, at(a, ta ? i0 : i0 * lda), lda, b, ldb,
                     beta, c + i0 * ldc, ldc, a16 ? rar : nullptr, b16);
        }
      },
      grain);
}

template <typename T>
void gemm_rows(ThreadPool* pool, bool bf16, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
               T alpha, const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc,
               const uint16_t* a16 = nullptr, const uint16_t* b16 = nullptr) {
  if (m == 0 || n == 0) return;
  int64_t threads = pool ? pool->size() : 1;
  const bool by_cols = n > m;
  if (threads <= 1 || m * n * k < kSplitMacs || (by_cols ? n : m) < 2 * threads) {
    gemm_one(bf16, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, a16, b16);
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (bf16 && bf16_product(alpha, beta, m, n, k)) {
      const int64_t grain = std::max<int64_t>(8, ((by_cols ? n : m) + threads - 1) / threads);
      gemm_rows_bf16(*pool, ta, tb, m, n, k, a, a16, lda, b, b16, ldb, beta, c, ldc, by_cols,
                     grain);
      return;
    }
  }
  if (by_cols) {
    const int64_t grain = std::max<int64_t>(8, (n + threads - 1) / threads);
    pool->parallel_for(
        n,
        [&](int64_t c0, int64_t c1) {
          const int64_t off = tb ? c0 * ldb : c0;
          gemm_one(bf16, ta, tb, m, c1 - c0, k, alpha, a, lda, at(b, off), ldb, beta, c + c0, ldc,
                   a16, at(b16, off));
        },
        grain);
    return;
  }
  int64_t grain = std::max<int64_t>(8, (m + threads - 1) / threads);
  pool->parallel_for(
      m,
      [&](int64_t r0, int64_t r1) {
        const int64_t off = ta ? r0 : r0 * lda;
        gemm_one(bf16, ta, tb, r1 - r0, n, k, alpha, at(a, off), lda, b, ldb, beta, c + r0 * ldc,
                 ldc, at(a16, off), b16);
      },
      grain);
}

// ---- Gemm ---------------------------------------------------------------------------------------
template <typename T>
void gemm_typed(const KernelArgs& a) {
  const auto& p = a.p<ops::GemmParams>();
  const TensorView &A = a.in[0], &B = a.in[1], &Y = a.out[0];
  int64_t m = Y.dims[0], n = Y.dims[1];
  int64_t k = p.trans_a ? A.dims[0] : A.dims[1];
  T* y = Y.ptr<T>();
  T beta = static_cast<T>(p.beta);
  bool has_c = a.in.size() > 2 && a.in[2].present() && beta != T(0);
  if (has_c) {  // Y = beta * C broadcast to [M,N]; then the product accumulates onto it
    const T* c = a.in[2].ptr<T>();
    const geom::GemmC cs = geom::gemm_c(a.in[2].dims);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) y[i * n + j] = beta * c[i * cs.sm + j * cs.sn];
  }
  if (k == 0) {
    if (!has_c) std::fill(y, y + m * n, T(0));
    return;
  }
  gemm_rows<T>(current_pool(), p.bf16, p.trans_a, p.trans_b, m, n, k, static_cast<T>(p.alpha),
               A.ptr<T>(), A.dims[1], B.ptr<T>(), B.dims[1], has_c ? T(1) : T(0), y, n);
}

// ---- MatMul -------------------------------------------------------------------------------------
constexpr size_t kMaxBatchDims = MatMulPlan::kMaxBatchDims;
using Dims = MatMulPlan::Dims;

// An operand's or the result's dims as the product sees them, and each one's element stride in
// the row-major tensor that holds it.
struct Strided {
  std::vector<int64_t> dims, strides;
  // Row-major `dims`, as stored.
  explicit Strided(const std::vector<int64_t>& d) : dims(d), strides(d.size()) {
    geom::contiguous_strides(dims, strides.data());
  }
};
// An operand stored as `stored`, read as Transpose(stored, perm), then its last two dims swapped
// where `trans`.
Strided operand_view(const std::vector<int64_t>& stored, const DimList& perm, bool trans) {
  const Strided s(stored);
  Strided v = s;
  for (size_t i = 0; i < perm.size(); ++i) {
    v.dims[i] = s.dims[static_cast<size_t>(perm[i])];
    v.strides[i] = s.strides[static_cast<size_t>(perm[i])];
  }
  const size_t r = v.dims.size();
  if (trans) {
    std::swap(v.dims[r - 1], v.dims[r - 2]);
    std::swap(v.strides[r - 1], v.strides[r - 2]);
  }
  return v;
}
// The result Y held as Transpose(Y, perm) in `stored`.
Strided result_view(const std::vector<int64_t>& stored, const DimList& perm) {
  const Strided s(stored);
  Strided v = s;
  for (size_t j = 0; j < perm.size(); ++j) {
    v.dims[static_cast<size_t>(perm[j])] = s.dims[j];
    v.strides[static_cast<size_t>(perm[j])] = s.strides[j];
  }
  return v;
}
// How BLAS reads a [rows, cols] matrix with strides (rs, cs): row-major with leading dim ld, or
// (trans) stored [cols, rows] with leading dim ld; false where neither stride is 1. A unit dim's
// stride is free.
bool blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, bool& trans, int64_t& ld) {
  if (cols == 1) cs = 1;
  if (cs == 1) {
    trans = false;
    ld = std::max(rows == 1 ? cols : rs, cols);
    return true;
  }
  if (rows == 1) rs = 1;
  if (rs == 1) {
    trans = true;
    ld = std::max(cs, rows);
    return true;
  }
  return false;
}

// MatMul through permuted operands or result (MatMulParams::a_perm / b_perm / y_perm): one product
// per batch index of the result, each reading its matrices in place through their strides; where
// the result's rows are not contiguous, Y^T = B^T A^T instead (plan_matmul).
template <typename T>
void matmul_index(const MatMulPlan& p, const T* pa, const uint16_t* pa16, const T* pb,
                  const uint16_t* pb16, T* py) {
  if (p.swapped) {
    std::swap(pa, pb);
    std::swap(pa16, pb16);
  }
  if (p.k == 0) {
    for (int64_t r = 0; r < p.m; ++r) std::fill(py + r * p.ldc, py + r * p.ldc + p.n, T(0));
    return;
  }
  gemm_one(p.bf16, p.ta, p.tb, p.m, p.n, p.k, T(1), pa, p.lda, pb, p.ldb, T(0), py, p.ldc, pa16,
           pb16);
}

template <typename T>
void matmul_permuted(const KernelArgs& a, const ops::MatMulParams& mp, const T* pa,
                     const uint16_t* pa16, const T* pb, const uint16_t* pb16, T* py) {
  const MatMulPlan p = plan_matmul(a.in[0].dims, a.in[1].dims, a.out[0].dims, mp);
  if (p.count == 0 || p.m == 0 || p.n == 0) return;
  auto body = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const MatMulPlan::Offsets o = p.offsets(i);
      matmul_index(p, at(pa, o.a), at(pa16, o.a), at(pb, o.b), at(pb16, o.b), py + o.y);
    }
  };
  if (p.count == 1) {
    if (p.k == 0) return body(0, 1);
    const bool sw = p.swapped;
    gemm_rows<T>(current_pool(), p.bf16, p.ta, p.tb, p.m, p.n, p.k, T(1), sw ? pb : pa, p.lda,
                 sw ? pa : pb, p.ldb, T(0), py, p.ldc, sw ? pb16 : pa16, sw ? pa16 : pb16);
  } else if (current_pool() && p.m * p.n * p.k * p.count >= kSplitMacs) {
    current_pool()->parallel_for(p.count, body);
  } else {
    body(0, p.count);
  }
}

template <typename T>
void matmul_typed(const KernelArgs& a) {
  const TensorView &A = a.in[0], &B = a.in[1], &Y = a.out[0];
  const ops::MatMulParams mp =
      a.params && a.params->has_value() ? a.p<ops::MatMulParams>() : ops::MatMulParams{};
  const bool bf16 = mp.bf16, ta = mp.trans_a, tb = mp.trans_b;
  // Promote 1-D operands: [K] -> [1,K] on the left, [K] -> [K,1] on the right. Transposed
  // operands (both of rank >= 2) are stored [..., K, M] and [..., N, K].
  const size_t ra = A.dims.size(), rb = B.dims.size();
  CB_CHECK(!(ta || tb) || (ra >= 2 && rb >= 2));
  const int64_t m = ra == 1 ? 1 : A.dims[ra - (ta ? 1 : 2)], k = A.dims[ra - (ta ? 2 : 1)];
  const int64_t n = rb == 1 ? 1 : B.dims[rb - (tb ? 2 : 1)];
  const int64_t lda = ta ? m : k, ldb = tb ? k : n;
  const size_t na = ra > 2 ? ra - 2 : 0, nb = rb > 2 ? rb - 2 : 0, nbatch = std::max(na, nb);
  CB_CHECK(nbatch <= kMaxBatchDims);
  // Output batch dims, and each operand's element stride per batch dim (0 where broadcast).
  Dims out{}, sa{}, sb{};
  int64_t count = 1, a_count = 1, b_count = 1, stride_a = m * k, stride_b = k * n;
  for (size_t i = 0; i < nbatch; ++i) {  // i counts from the innermost batch dim
    size_t o = nbatch - 1 - i;
    int64_t da = i < na ? A.dims[na - 1 - i] : 1, db = i < nb ? B.dims[nb - 1 - i] : 1;
    out[o] = da == 1 ? db : da;
    sa[o] = da == 1 ? 0 : stride_a;
    sb[o] = db == 1 ? 0 : stride_b;
    stride_a *= da;
    stride_b *= db;
    count *= out[o];
    a_count *= da;
    b_count *= db;
  }
  // An operand stored as bf16 (Value::bf16_storage: only bf16 products read it) goes as its
  // bf16 bits, T's pointer unset.
  CB_CHECK(!Y.bf16_storage && (std::is_same_v<T, float> || !(A.bf16_storage || B.bf16_storage)));
  const T* pa = A.bf16_storage ? nullptr : A.ptr<T>();
  const T* pb = B.bf16_storage ? nullptr : B.ptr<T>();
  const uint16_t* pa16 = A.bf16_storage ? static_cast<const uint16_t*>(A.data) : nullptr;
  const uint16_t* pb16 = B.bf16_storage ? static_cast<const uint16_t*>(B.data) : nullptr;
  T* py = Y.ptr<T>();
  if (mp.permuted()) return matmul_permuted<T>(a, mp, pa, pa16, pb, pb16, py);
  if (count == 0 || m == 0 || n == 0) return;
  if (k == 0) {
    std::fill(py, py + count * m * n, T(0));
    return;
  }
  // One right-hand matrix for the whole batch: fold the batch into the rows,
  // [count*M, K] x [K, N] -> [count*M, N]. Also the plain single product.
  if (b_count == 1 && a_count == count && !ta) {
    gemm_rows<T>(current_pool(), bf16, false, tb, count * m, n, k, T(1), pa, k, pb, ldb, T(0), py,
                 n, pa16, pb16);
    return;
  }
  // One product (A read transposed: a weight's gradient A^T dY): split over the pool as well.
  if (count == 1) {
    gemm_rows<T>(current_pool(), bf16, ta, tb, m, n, k, T(1), pa, lda, pb, ldb, T(0), py, n, pa16,
                 pb16);
    return;
  }
  // [M, K] x [K, N] -> [M, N] per batch index, the batch across the pool.
  auto body = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      int64_t rem = i, oa = 0, ob = 0;
      for (size_t d = nbatch; d-- > 0;) {
        int64_t idx = rem % out[d];
        rem /= out[d];
        oa += idx * sa[d];
        ob += idx * sb[d];
      }
      gemm_one(bf16, ta, tb, m, n, k, T(1), at(pa, oa), lda, at(pb, ob), ldb, T(0), py + i * m * n,
               n, at(pa16, oa), at(pb16, ob));
    }
  };
  if (current_pool() && m * n * k * count >= kSplitMacs)
    current_pool()->parallel_for(count, body);
  else
    body(0, count);
}

}  // namespace

MatMulPlan plan_matmul(const std::vector<int64_t>& a_dims, const std::vector<int64_t>& b_dims,
                       const std::vector<int64_t>& y_dims, const ops::MatMulParams& mp) {
  CB_CHECK(a_dims.size() >= 2 && b_dims.size() >= 2);
  Strided va = operand_view(a_dims, mp.a_perm, mp.trans_a);
  Strided vb = operand_view(b_dims, mp.b_perm, mp.trans_b);
  const Strided vy = result_view(y_dims, mp.y_perm);
  const size_t ra = va.dims.size(), rb = vb.dims.size(), ry = vy.dims.size();
  MatMulPlan p;
  p.bf16 = mp.bf16;
  int64_t m = va.dims[ra - 2], k = va.dims[ra - 1], n = vb.dims[rb - 1];
  CB_CHECK(vb.dims[rb - 2] == k && vy.dims[ry - 2] == m && vy.dims[ry - 1] == n);
  // The matrices' strides: A [m,k], B [k,n], Y [m,n].
  int64_t am = va.strides[ra - 2], ak = va.strides[ra - 1], bk = vb.strides[rb - 2],
          bn = vb.strides[rb - 1];
  const int64_t ym = vy.strides[ry - 2], yn = vy.strides[ry - 1];
  CB_CHECK(blas_layout(m, n, ym, yn, p.swapped, p.ldc));
  if (p.swapped) {  // Y^T [n,m] is row-major: Y^T = B^T A^T
    std::swap(m, n);
    // B^T [n,k] is the left operand now, A^T [k,m] the right one.
    const int64_t am2 = bn, ak2 = bk, bk2 = ak, bn2 = am;
    am = am2, ak = ak2, bk = bk2, bn = bn2;
  }
  p.m = m, p.n = n, p.k = k;
  CB_CHECK(blas_layout(m, k, am, ak, p.ta, p.lda) && blas_layout(k, n, bk, bn, p.tb, p.ldb));
  // Batch dims, right-aligned and broadcast; each operand's stride per result batch dim.
  const size_t nbatch = ry - 2, na = ra - 2, nb = rb - 2;
  CB_CHECK(nbatch <= MatMulPlan::kMaxBatchDims && na <= nbatch && nb <= nbatch);
  p.nbatch = nbatch;
  for (size_t i = 0; i < nbatch; ++i) {  // i counts from the innermost batch dim
    const size_t o = nbatch - 1 - i;
    p.out[o] = vy.dims[o];
    p.sy[o] = vy.strides[o];
    const int64_t da = i < na ? va.dims[na - 1 - i] : 1, db = i < nb ? vb.dims[nb - 1 - i] : 1;
    p.sa[o] = da == 1 ? 0 : va.strides[na - 1 - i];
    p.sb[o] = db == 1 ? 0 : vb.strides[nb - 1 - i];
    p.count *= p.out[o];
  }
  return p;
}

std::vector<int64_t> matmul_result_dims(const std::vector<int64_t>& a_dims,
                                        const std::vector<int64_t>& b_dims,
                                        const ops::MatMulParams& mp) {
  CB_CHECK(a_dims.size() >= 2 && b_dims.size() >= 2);
  const Strided va = operand_view(a_dims, mp.a_perm, mp.trans_a);
  const Strided vb = operand_view(b_dims, mp.b_perm, mp.trans_b);
  const size_t na = va.dims.size() - 2, nb = vb.dims.size() - 2, nbatch = std::max(na, nb);
  std::vector<int64_t> y(nbatch + 2);
  for (size_t i = 0; i < nbatch; ++i) {  // from the innermost batch dim
    const int64_t da = i < na ? va.dims[na - 1 - i] : 1, db = i < nb ? vb.dims[nb - 1 - i] : 1;
    y[nbatch - 1 - i] = da == 1 ? db : da;
  }
  y[nbatch] = va.dims[na];
  y[nbatch + 1] = vb.dims[nb + 1];
  return y;
}

void matmul_one(const MatMulPlan& p, const float* a, const uint16_t* a16, const float* b,
                const uint16_t* b16, float* y) {
  matmul_index<float>(p, a, a16, b, b16, y);
}

void Gemm(const KernelArgs& a) {
  if (kernel_dtype(a) == DType::F64)
    gemm_typed<double>(a);
  else
    gemm_typed<float>(a);
}

void MatMul(const KernelArgs& a) {
  if (kernel_dtype(a) == DType::F64)
    matmul_typed<double>(a);
  else
    matmul_typed<float>(a);
}

}  // namespace cb::cpu
