// cuBLASLt, loaded on first use. Linking libcublasLt makes every process that merely starts
// (cb-run, cb-inspect, each test) run its static initialisation: measured 1.5 s per start on the
// development machine, 13x the whole runtime of a small cb-run. So the CUDA backend does not link
// it: this file defines the cuBLASLt functions crossbow calls, each forwarding to the library
// opened with dlopen the first time one is called (when a CUDA device makes its first stream).
// Where the library cannot be opened they return CUBLAS_STATUS_NOT_INITIALIZED, and
// cublaslt_load_error() says why.
#include <cublasLt.h>
#include <dlfcn.h>

#include <mutex>
#include <string>

namespace cb {

namespace {
std::once_flag g_once;
void* g_lib = nullptr;
std::string g_error;

void* library() {
  std::call_once(g_once, [] {
    for (const char* name : {"libcublasLt.so.13", "libcublasLt.so"}) {
      g_lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (g_lib) return;
      if (g_error.empty()) g_error = dlerror();
    }
  });
  return g_lib;
}

template <class F>
F symbol(const char* name) {
  void* lib = library();
  return lib ? reinterpret_cast<F>(dlsym(lib, name)) : nullptr;
}
}  // namespace

// Empty when cuBLASLt loaded (or was not needed yet); else dlopen's reason.
std::string cublaslt_load_error() {
  library();
  return g_lib ? std::string() : "cannot load libcublasLt.so.13: " + g_error;
}

}  // namespace cb

// Each: the library's function of the same name, looked up once.
#define CB_LT_FORWARD(name, params, args)                                          \
  cublasStatus_t CUBLASWINAPI name params {                                        \
    static const auto f = cb::symbol<cublasStatus_t(CUBLASWINAPI*) params>(#name); \
    return f ? f args : CUBLAS_STATUS_NOT_INITIALIZED;                             \
  }

extern "C" {
CB_LT_FORWARD(cublasLtCreate, (cublasLtHandle_t * h), (h))
CB_LT_FORWARD(cublasLtDestroy, (cublasLtHandle_t h), (h))
CB_LT_FORWARD(cublasLtMatmul,
              (cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
               cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
               const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
               cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
               size_t workspace_bytes, cudaStream_t stream),
              (h, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace,
               workspace_bytes, stream))
CB_LT_FORWARD(cublasLtMatmulAlgoGetHeuristic,
              (cublasLtHandle_t h, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,
               cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc,
               cublasLtMatrixLayout_t Ddesc, cublasLtMatmulPreference_t pref, int requested,
               cublasLtMatmulHeuristicResult_t results[], int* returned),
              (h, desc, Adesc, Bdesc, Cdesc, Ddesc, pref, requested, results, returned))
CB_LT_FORWARD(cublasLtMatmulDescCreate,
              (cublasLtMatmulDesc_t * d, cublasComputeType_t compute, cudaDataType_t scale),
              (d, compute, scale))
CB_LT_FORWARD(cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t d), (d))
CB_LT_FORWARD(cublasLtMatmulDescSetAttribute,
              (cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const void* buf,
               size_t bytes),
              (d, attr, buf, bytes))
CB_LT_FORWARD(cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * p), (p))
CB_LT_FORWARD(cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t p), (p))
CB_LT_FORWARD(cublasLtMatmulPreferenceSetAttribute,
              (cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr,
               const void* buf, size_t bytes),
              (p, attr, buf, bytes))
CB_LT_FORWARD(cublasLtMatrixLayoutCreate,
              (cublasLtMatrixLayout_t * l, cudaDataType type, uint64_t rows, uint64_t cols,
               int64_t ld),
              (l, type, rows, cols, ld))
CB_LT_FORWARD(cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t l), (l))
CB_LT_FORWARD(cublasLtMatrixLayoutSetAttribute,
              (cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr, const void* buf,
               size_t bytes),
              (l, attr, buf, bytes))

// 0 where the library cannot be loaded (the device's version line then says why).
size_t CUBLASWINAPI cublasLtGetVersion(void) {
  static const auto f = cb::symbol<size_t(CUBLASWINAPI*)(void)>("cublasLtGetVersion");
  return f ? f() : 0;
}

const char* CUBLASWINAPI cublasLtGetStatusString(cublasStatus_t status) {
  static const auto f =
      cb::symbol<const char*(CUBLASWINAPI*)(cublasStatus_t)>("cublasLtGetStatusString");
  return f ? f(status) : "libcublasLt.so.13 could not be loaded";
}
}  // extern "C"
