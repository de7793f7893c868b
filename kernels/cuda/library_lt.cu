// Gemm and MatMul's library calls on the CUDA backend: cuBLASLt (nvcc build only). Heuristic
// results (up to kLtAlgos) are cached per (device, dtype, TF32, transposes, m, n, k, leading dims,
// batch and strides, alignments); descriptors are created per launch; compute type 32F,
// 32F_FAST_TF32 (GpuCtx::allow_tf32) or 64F; a BF16 call (library_bf16.h) has bf16 A and B, f32 C
// and D, compute 32F. No cuBLASLt failure throws: a descriptor or
// heuristic call that fails counts as "no algorithm", a cublasLtMatmul that fails passes to the
// next algorithm; a strided batch cuBLASLt has nothing for runs matrix by matrix, and a problem
// with no working algorithm at all runs in the naive kernel (library_gemm.h). Each such fallback
// is one line on stderr, once per problem and reason.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/library_cuda.h"
#include "kernels/cuda/library_gemm.h"
#include "runtime/error.h"

namespace cb::CB_GPU_NS::cudalib {

using lib::LtProblem;

namespace {

constexpr size_t kLtWorkspaceBudget = size_t{32} << 20;
constexpr int kLtAlgos = 8;

// ---- cuBLASLt -----------------------------------------------------------------------------------
std::string lt_what(const LtProblem& p, DType t) {
  return fmt::format(
      "{} GEMM (column-major) D[{}x{}] = op{}(A, ld {}) x op{}(B, ld {}), k {}, batch {} (strides "
      "{}, {}, {})",
      dtype_str(t), p.m, p.n, p.ta ? "T" : "N", p.lda, p.tb ? "T" : "N", p.ldb, p.k, p.batch, p.sa,
      p.sb, p.sd);
}

void lt_check(cublasStatus_t st, const char* call, const LtProblem& p, DType t) {
  if (st != CUBLAS_STATUS_SUCCESS)
    fail("cuBLASLt: {} failed for {}: {} (status {})", call, lt_what(p, t),
         cublasLtGetStatusString(st), static_cast<int>(st));
}

struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  LtDescs() = default;
  LtDescs(const LtDescs&) = delete;
  LtDescs& operator=(const LtDescs&) = delete;
  ~LtDescs() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// The type of D (and C) of a call of type t: BF16 products write f32.
DType out_type(DType t) { return t == DType::BF16 ? DType::F32 : t; }

void make_lt(LtDescs& L, const LtProblem& p, DType t, bool tf32) {
  // BF16: A and B bf16, C and D f32, compute and scale 32F (library_bf16.h).
  const cudaDataType_t dt = t == DType::F64    ? CUDA_R_64F
                            : t == DType::BF16 ? CUDA_R_16BF
                                               : CUDA_R_32F;
  const cudaDataType_t dd = t == DType::F64 ? CUDA_R_64F : CUDA_R_32F;
  const cublasComputeType_t ct = t == DType::F64           ? CUBLAS_COMPUTE_64F
                                 : tf32 && t == DType::F32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                           : CUBLAS_COMPUTE_32F;
  lt_check(cublasLtMatmulDescCreate(&L.op, ct, dd), "cublasLtMatmulDescCreate", p, t);
  const int32_t ta = p.ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = p.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  lt_check(cublasLtMatmulDescSetAttribute(L.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
           "cublasLtMatmulDescSetAttribute(TRANSA)", p, t);
  lt_check(cublasLtMatmulDescSetAttribute(L.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
           "cublasLtMatmulDescSetAttribute(TRANSB)", p, t);
  // Stored (before op) A is m x k, or k x m when transposed; B k x n, or n x k.
  auto layout = [&](cublasLtMatrixLayout_t* l, cudaDataType_t type, int64_t rows, int64_t cols,
                    int64_t ld, int64_t stride) {
    lt_check(cublasLtMatrixLayoutCreate(l, type, static_cast<uint64_t>(rows),
                                        static_cast<uint64_t>(cols), ld),
             "cublasLtMatrixLayoutCreate", p, t);
    if (p.batch > 1) {
      const auto count = static_cast<int32_t>(p.batch);
      lt_check(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                sizeof count),
               "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)", p, t);
      lt_check(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                &stride, sizeof stride),
               "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)", p, t);
    }
  };
  layout(&L.a, dt, p.ta ? p.k : p.m, p.ta ? p.m : p.k, p.lda, p.sa);
  layout(&L.b, dt, p.tb ? p.n : p.k, p.tb ? p.k : p.n, p.ldb, p.sb);
  layout(&L.d, dd, p.m, p.n, p.ldd, p.sd);
}

using LtKey = std::array<int64_t, 20>;

struct PrefGuard {
  cublasLtMatmulPreference_t p;
  ~PrefGuard() { cublasLtMatmulPreferenceDestroy(p); }
};

// An operand's alignment as cuBLASLt's preference counts it: of its pointer and, in a strided
// batch, of every matrix after it.
int64_t lt_align(const void* ptr, int64_t stride, int64_t batch, DType t) {
  int64_t a = ptr_align(ptr, 256);
  if (batch > 1) a = std::min(a, value_align(stride * static_cast<int64_t>(dtype_size(t)), 256));
  return a;
}

// A heuristic result as cached: the algorithm's bytes (cublasLtMatmulAlgo_t is an unnamed
// struct, which nvcc's front end cannot destroy inside std containers) and its workspace.
struct LtAlgo {
  uint64_t data[8];
  size_t ws;
};
static_assert(sizeof(cublasLtMatmulAlgo_t) == sizeof(LtAlgo::data), "cublasLtMatmulAlgo_t size");

// The heuristic's algorithms for a problem (fastest first; empty: none), cached for the process.
std::vector<LtAlgo> lt_algos(const GpuCtx& c, const LtProblem& p, DType t, const void* A,
                             const void* B, const void* D, const LtDescs& L) {
  const int64_t aa = lt_align(A, p.sa, p.batch, t), ab = lt_align(B, p.sb, p.batch, t),
                ad = lt_align(D, p.sd, p.batch, out_type(t));
  const LtKey key{c.device,
                  static_cast<int64_t>(t),
                  c.allow_tf32 ? 1 : 0,
                  p.ta ? 1 : 0,
                  p.tb ? 1 : 0,
                  p.m,
                  p.n,
                  p.k,
                  p.lda,
                  p.ldb,
                  p.ldd,
                  p.batch,
                  p.sa,
                  p.sb,
                  p.sd,
                  aa,
                  ab,
                  ad,
                  0,
                  0};
  static std::mutex mu;
  static auto* cache = new std::map<LtKey, std::vector<LtAlgo>>;  // never destroyed
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache->find(key);
  if (it != cache->end()) return it->second;
  cublasLtMatmulPreference_t pref = nullptr;
  lt_check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate", p, t);
  const PrefGuard guard{pref};
  const uint64_t max_ws = kLtWorkspaceBudget;
  lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &max_ws, sizeof max_ws),
           "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)", p, t);
  const auto al_a = static_cast<uint32_t>(aa), al_b = static_cast<uint32_t>(ab),
             al_d = static_cast<uint32_t>(ad);
  lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                &al_a, sizeof al_a),
           "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_A_BYTES)", p, t);
  lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                &al_b, sizeof al_b),
           "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_B_BYTES)", p, t);
  lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                &al_d, sizeof al_d),
           "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_C_BYTES)", p, t);
  lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                &al_d, sizeof al_d),
           "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_D_BYTES)", p, t);
  cublasLtMatmulHeuristicResult_t res[kLtAlgos] = {};
  int got = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(c.blas_lt), L.op, L.a, L.b, L.d,
                                     L.d, pref, kLtAlgos, res, &got);
  std::vector<LtAlgo> algos;
  if (st == CUBLAS_STATUS_SUCCESS) {
    for (int i = 0; i < got && i < kLtAlgos; ++i) {
      if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
      LtAlgo a;
      std::memcpy(a.data, &res[i].algo, sizeof a.data);
      a.ws = res[i].workspaceSize;
      algos.push_back(a);
    }
  } else if (st != CUBLAS_STATUS_NOT_SUPPORTED) {  // NOT_SUPPORTED: simply no algorithm
    note_each(
        fmt::format("cuBLASLt: cublasLtMatmulAlgoGetHeuristic failed for {}: {} (status {}): "
                    "counted as no algorithm",
                    lt_what(p, t), cublasLtGetStatusString(st), static_cast<int>(st)));
  }
  (*cache)[key] = algos;
  return algos;
}

// lt_algos, with a failure to set the problem up (descriptors, preference) counted as no
// algorithm (and noted) instead of thrown.
std::vector<LtAlgo> lt_algos_or_none(const GpuCtx& c, const LtProblem& p, DType t, const void* A,
                                     const void* B, const void* D, LtDescs& L) {
  try {
    make_lt(L, p, t, c.allow_tf32);
    return lt_algos(c, p, t, A, B, D, L);
  } catch (const Error& e) {
    note_each(std::string(e.what()) + ": counted as no algorithm");
    return {};
  }
}

// One cuBLASLt call, if an algorithm fits the workspace; false: nothing was enqueued.
bool lt_try(const GpuCtx& c, const LtProblem& p, DType t, double alpha, double beta, const void* A,
            const void* B, void* D, void* ws, size_t ws_bytes) {
  LtDescs L;
  const std::vector<LtAlgo> algos = lt_algos_or_none(c, p, t, A, B, D, L);
  size_t left = 0;
  void* w = align_ws(ws, ws_bytes, &left);
  for (const LtAlgo& r : algos) {
    if (r.ws > left) continue;
    cublasLtMatmulAlgo_t algo;
    std::memcpy(&algo, r.data, sizeof r.data);
    const float fa = static_cast<float>(alpha), fb = static_cast<float>(beta);
    const void* pa = t == DType::F64 ? static_cast<const void*>(&alpha) : &fa;
    const void* pb = t == DType::F64 ? static_cast<const void*>(&beta) : &fb;
    const cublasStatus_t st = cublasLtMatmul(
        static_cast<cublasLtHandle_t>(c.blas_lt), L.op, pa, A, L.a, B, L.b, pb, D, L.d, D, L.d,
        &algo, r.ws ? w : nullptr, r.ws, static_cast<cudaStream_t>(c.stream));
    if (st == CUBLAS_STATUS_SUCCESS) return true;
    // Nothing was enqueued for a failed call (an asynchronous fault would surface at the next
    // synchronize anyway): try the next algorithm.
    note_each(
        fmt::format("cuBLASLt: cublasLtMatmul failed for {}: {} (status {}): trying the "
                    "next algorithm",
                    lt_what(p, t), cublasLtGetStatusString(st), static_cast<int>(st)));
  }
  return false;
}

void naive_any(const GpuCtx& c, const LtProblem& p, DType t, double alpha, double beta,
               const void* A, const void* B, void* D) {
  if (t == DType::F64)
    lib::naive_gemm(c, p, alpha, beta, static_cast<const double*>(A), static_cast<const double*>(B),
                    static_cast<double*>(D));
  else if (t == DType::BF16)
    lib::naive_gemm(c, p, alpha, beta, static_cast<const math::BF16Bits*>(A),
                    static_cast<const math::BF16Bits*>(B), static_cast<float*>(D));
  else
    lib::naive_gemm(c, p, alpha, beta, static_cast<const float*>(A), static_cast<const float*>(B),
                    static_cast<float*>(D));
}

}  // namespace

size_t lt_gemm_workspace(const GpuCtx& c, const LtProblem& p, DType t, const void* A, const void* B,
                         const void* D) {
  LtDescs L;
  const std::vector<LtAlgo> algos = lt_algos_or_none(c, p, t, A, B, D, L);
  return algos.empty() ? 0 : ws_request(algos.front().ws);
}

bool lt_gemm(const GpuCtx& c, const LtProblem& p, DType t, double alpha, double beta, const void* A,
             const void* B, void* D, void* ws, size_t ws_bytes) {
  if (lt_try(c, p, t, alpha, beta, A, B, D, ws, ws_bytes)) return true;
  const size_t es = dtype_size(t), ed = dtype_size(out_type(t));
  if (p.batch > 1) {  // a strided batch cuBLASLt has nothing for: matrix by matrix
    LtProblem q = p;
    q.batch = 1;
    q.sa = q.sb = q.sd = 0;
    for (int64_t i = 0; i < p.batch; ++i) {
      const void* a = static_cast<const char*>(A) + static_cast<size_t>(i * p.sa) * es;
      const void* b = static_cast<const char*>(B) + static_cast<size_t>(i * p.sb) * es;
      void* d = static_cast<char*>(D) + static_cast<size_t>(i * p.sd) * ed;
      if (!lt_try(c, q, t, alpha, beta, a, b, d, ws, ws_bytes)) {
        note_each("cuBLASLt has no working algorithm for " + lt_what(q, t) +
                  " within the workspace; a naive kernel runs it (slower)");
        naive_any(c, q, t, alpha, beta, a, b, d);
      }
    }
    return true;
  }
  note_each("cuBLASLt has no working algorithm for " + lt_what(p, t) +
            " within the workspace; a naive kernel runs it (slower)");
  return false;
}

}  // namespace cb::CB_GPU_NS::cudalib
