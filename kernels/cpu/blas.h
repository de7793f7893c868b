// Row-major GEMM over CBLAS (OpenBLAS; f32 through oneDNN's sgemm when built with oneDNN) for the
// CPU kernels, plus the per-thread scratch buffer they share. BLAS always runs on the calling
// thread only (openblas_set_num_threads(1) on first use, oneDNN's OpenMP team at 1 per call):
// parallelism is ours, through the device's ThreadPool, never BLAS threads on top of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#ifdef CB_HAVE_DNNL
// libgomp: oneDNN's Debian build threads with OpenMP; crossbow calls it on its own threads.
extern "C" void omp_set_num_threads(int);
extern "C" int omp_get_max_threads();
#endif

namespace cb::cpu {

#ifdef CB_HAVE_DNNL
// For the duration of a oneDNN call: an OpenMP team of one on the calling thread (our pool does
// the parallelism), the caller's setting restored afterwards.
class OmpTeamOfOne {
 public:
  OmpTeamOfOne() : n_(omp_get_max_threads()) {
    if (n_ != 1) omp_set_num_threads(1);
  }
  ~OmpTeamOfOne() {
    if (n_ != 1) omp_set_num_threads(n_);
  }
  OmpTeamOfOne(const OmpTeamOfOne&) = delete;
  OmpTeamOfOne& operator=(const OmpTeamOfOne&) = delete;

 private:
  int n_;
};
#endif

// C[M,N] = alpha * op(A) op(B) + beta * C, row-major with leading dims lda/ldb/ldc;
// op(A) is [M,K] (A stored [K,M] when trans_a), op(B) is [K,N] (B stored [N,K] when trans_b).
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
          int64_t ldc);

// gemm()'s float product with op(A) and op(B) rounded to bf16 and multiplied with f32 accumulation
// (gemm_bf16.cpp, oneDNN's bf16 matmul); false, having done nothing, where it does not apply
// (alpha != 1, beta not 0 or 1, a small product, no bf16 cores or no oneDNN): gemm() then. An
// operand stored as bf16 already (a16 / b16, Value::bf16_storage; the f32 pointer then unused) is
// read as it is, with its leading dim.
bool gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const float* a, const uint16_t* a16, int64_t lda, const float* b,
               const uint16_t* b16, int64_t ldb, float beta, float* c, int64_t ldc);
// Its parts, for a product split over threads that rounds each operand once: whether the bf16
// product applies to these scalars and sizes; rows x cols of x (leading dim ld) rounded into a
// dense bf16 [rows, cols]; and the product of operands already rounded (leading dims lda and ldb
// of the bf16 copies; false, having done nothing, where oneDNN has no bf16 kernel for it).
bool bf16_product(float alpha, float beta, int64_t m, int64_t n, int64_t k);
void round_bf16(const float* x, int64_t ld, int64_t rows, int64_t cols, uint16_t* out);
bool gemm_bf16_rounded(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                       const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta,
                       float* c, int64_t ldc);

// Makes BLAS single-threaded; idempotent and cheap after the first call.
void blas_single_thread();

// A buffer of at least n elements owned by the calling thread; it grows, never shrinks, so the
// steady state allocates nothing. `slot` tells apart buffers needed at the same time.
template <typename T, int slot = 0>
T* scratch(int64_t n) {
  thread_local std::vector<T> buf;
  if (static_cast<int64_t>(buf.size()) < n) buf.resize(static_cast<size_t>(n));
  return buf.data();
}

}  // namespace cb::cpu
