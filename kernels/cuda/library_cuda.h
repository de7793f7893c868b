// What the nvcc-only library files share (library.cu: cuDNN convolutions and the kernel table;
// library_lt.cu: cuBLASLt GEMM): workspace alignment, notes on stderr, and the cuBLASLt
// entry points CudaLib (library.cu) calls.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <set>
#include <string>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/library_gemm.h"

namespace cb::CB_GPU_NS::cudalib {

constexpr size_t kWorkspaceAlign = 256;  // the libraries' workspace pointers are aligned to this

// The largest power of two (at most `cap`) dividing the address; a null pointer (not known yet)
// counts as aligned.
inline int64_t ptr_align(const void* p, int64_t cap) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  if (v == 0) return cap;
  const auto low = static_cast<int64_t>(v & (~v + 1));
  return std::min(low, cap);
}

inline int64_t value_align(int64_t bytes, int64_t cap) {
  if (bytes == 0) return cap;
  const int64_t low = bytes & -bytes;
  return std::min(low, cap);
}

// `ws` moved up to kWorkspaceAlign; the bytes left after it.
inline void* align_ws(void* ws, size_t bytes, size_t* left) {
  if (!ws) {
    *left = 0;
    return nullptr;
  }
  const auto v = reinterpret_cast<uintptr_t>(ws);
  const uintptr_t up = (v + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
  const size_t skip = static_cast<size_t>(up - v);
  *left = bytes > skip ? bytes - skip : 0;
  return reinterpret_cast<void*>(up);
}

// Workspace bytes to ask for so that `need` bytes remain after align_ws.
inline size_t ws_request(size_t need) { return need == 0 ? 0 : need + kWorkspaceAlign; }

inline void note_once(std::atomic<bool>& flag, const std::string& msg) {
  if (!flag.exchange(true)) std::fprintf(stderr, "crossbow: %s\n", msg.c_str());
}

// `msg` on stderr the first time it is seen in this process (one line per problem and reason).
inline void note_each(const std::string& msg) {
  static std::mutex mu;
  static auto* seen = new std::set<std::string>;  // never destroyed (exit order)
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!seen->insert(msg).second) return;
  }
  std::fprintf(stderr, "crossbow: %s\n", msg.c_str());
}

// A library call's type: BF16 is library_bf16.h's (bf16 operands, f32 accumulation).
inline const char* dtype_str(DType t) {
  return t == DType::F64 ? "f64" : t == DType::BF16 ? "bf16 (f32 accumulation)" : "f32";
}

// cuBLASLt (library_lt.cu), as a `Lib`'s gemm_workspace and gemm (library_util.h): the workspace
// the preferred algorithm wants, and the product run (false: declined, nothing was enqueued).
size_t lt_gemm_workspace(const GpuCtx& c, const lib::LtProblem& p, DType t, const void* A,
                         const void* B, const void* D);
bool lt_gemm(const GpuCtx& c, const lib::LtProblem& p, DType t, double alpha, double beta,
             const void* A, const void* B, void* D, void* ws, size_t ws_bytes);

}  // namespace cb::CB_GPU_NS::cudalib
