// Conv, ConvGrad, Gemm and MatMul marked bf16 (set_compute_precision: --precision bf16) over a
// library `Lib` (library_util.h): the f32 operands are rounded to bf16 (to nearest even, as the
// CPU's oneDNN reorders round) into the workspace, the library multiplies them with f32
// accumulation, and the results come back as f32:
//   - convolutions: cuDNN's bf16 tensors (X, W and Y all bf16, compute f32: the configuration
//     every cuDNN engine family has), so the library writes its result in bf16 and a conversion
//     pass makes it f32 (adding Conv's bias in f32). As PyTorch's autocast does, Y, dX and dW are
//     thereby rounded to bf16 once; dB is summed from the f32 dY in f64 as in f32 mode.
//   - GEMMs: cuBLASLt with bf16 A and B, f32 D (and C), compute 32F: D is not rounded.
//   - where the library declines (the host-run build always does), the direct / naive kernels run
//     on the same rounded operands with f64 accumulation and write f32, so the host-run build
//     checks the rounding, the shifts and the workspace layout of this path on every machine.
// A workspace smaller than the rounded operands need (never, from the executor, which gives what
// the workspace function asks) runs the op in f32, which is never less exact.
#pragma once

#include <algorithm>
#include <any>
#include <cstdint>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/library_conv.h"
#include "kernels/cuda/library_gemm.h"
#include "kernels/cuda/library_util.h"
#include "runtime/ops/params.h"

namespace cb::CB_GPU_NS::lib {

using B16 = math::BF16Bits;

// Whether the op's params (ConvParams, GemmParams, MatMulParams) mark it bf16; F32 ops only.
inline bool bf16_marked(const KernelArgs& a) {
  if (kernel_dtype(a) != DType::F32 || !a.params) return false;
  if (const auto* p = std::any_cast<ops::ConvParams>(a.params)) return p->bf16;
  if (const auto* p = std::any_cast<ops::GemmParams>(a.params)) return p->bf16;
  if (const auto* p = std::any_cast<ops::MatMulParams>(a.params)) return p->bf16;
  return false;
}

// Buffers carved from the front of a workspace, each 256-byte aligned relative to its start (the
// executor's workspace is aligned at least that much), the library's own workspace after them.
// With a null base it only counts the bytes (the workspace functions).
class Carve {
 public:
  explicit Carve(void* base = nullptr) : base_(static_cast<char*>(base)) {}
  template <class T>
  T* take(int64_t count) {
    T* p = base_ ? reinterpret_cast<T*>(base_ + off_) : nullptr;
    off_ += round_up(static_cast<size_t>(std::max<int64_t>(count, 0)) * sizeof(T), 256);
    return p;
  }
  size_t used() const { return off_; }
  void* rest() const { return base_ ? base_ + off_ : nullptr; }
  size_t left(size_t total) const { return total > off_ ? total - off_ : 0; }

 private:
  char* base_;
  size_t off_ = 0;
};

// For the workspace functions, which read pointers only for their alignment: an address aligned
// as the workspace's byte `off` will be (the workspace is the executor's own allocation, 256-byte
// aligned at least: Device::allocate).
inline const void* ws_address(size_t off) {
  return reinterpret_cast<const void*>((uintptr_t{1} << 20) + off);
}

// dst[i] = src[i] converted (f32 -> bf16 rounds to nearest even).
template <class S, class D>
void convert(const GpuCtx& c, int64_t n, const S* src, D* dst) {
  parallel_for(c, n, [=] CB_HOST_DEVICE(int64_t i) {
    dst[i] = math::cast_store<D>(math::cast_load(src[i]));
  });
}

// X rounded into X' of the library problem (shifted where its pads are asymmetric), or as it is
// when the library cannot express the problem.
inline void round_input(const GpuCtx& c, const LibConv& L, const ConvShape& s, const float* x,
                        B16* xb) {
  if (L.ok && L.shifted)
    shift_in(c, L, s, x, xb);
  else
    convert(c, s.n * s.c * s.in_vol, x, xb);
}

// The geometry of the rounded input: the library problem's, or the op's when it has none.
inline const ConvShape& rounded_geom(const LibConv& L, const ConvShape& s) {
  return L.ok ? L.g : s;
}

// ---- Conv ---------------------------------------------------------------------------------------
// Workspace: X' (bf16), W (bf16), Y (bf16), then the library's.
template <class Lib>
size_t conv_bf16_ws(const KernelArgs& a, const GpuCtx& c) {
  const auto [s, L, bias] = conv_fwd_args<float>(a);
  const ConvShape& g = rounded_geom(L, s);
  Carve w;
  w.take<B16>(g.n * g.c * g.in_vol);
  w.take<B16>(a.in[1].numel());
  w.take<B16>(a.out[0].numel());
  const size_t lib =
      L.ok ? Lib::conv_workspace(c, ConvDir::Fwd, L.g, DType::BF16, nullptr, nullptr, nullptr) : 0;
  return w.used() + lib;
}

template <class Lib>
void conv_bf16_run(const KernelArgs& a, const GpuCtx& c) {
  const TensorView &X = a.in[0], &W = a.in[1], &Y = a.out[0];
  const auto [s, L, bias] = conv_fwd_args<float>(a);
  if (Y.numel() == 0) return;
  const ConvShape& g = rounded_geom(L, s);
  Carve w(a.workspace);
  B16* xb = w.take<B16>(g.n * g.c * g.in_vol);
  B16* wb = w.take<B16>(W.numel());
  B16* yb = w.take<B16>(Y.numel());
  if (!a.workspace || w.used() > a.workspace_bytes) return conv_run<Lib, float>(a, c);
  round_input(c, L, s, X.ptr<float>(), xb);
  convert(c, W.numel(), W.ptr<float>(), wb);
  float* y = Y.ptr<float>();
  if (L.ok && Lib::conv(c, ConvDir::Fwd, L.g, DType::BF16, xb, wb, yb, w.rest(),
                        w.left(a.workspace_bytes))) {
    const int64_t m = s.m, vol = s.out_vol;
    const float* b = bias;
    parallel_for(c, Y.numel(), [=] CB_HOST_DEVICE(int64_t i) {
      y[i] = math::bf16_to_f32(yb[i].bits) + (b ? b[(i / vol) % m] : 0.0f);
    });
    return;
  }
  direct_fwd(c, g, xb, wb, bias, y);
}

// ---- ConvGrad -----------------------------------------------------------------------------------
// Workspace: dY (bf16); X' (bf16, for dW; then dX' for dX); W (bf16, for dX); dW (bf16, the
// library's result); then the library's.
struct ConvGradBufs {
  B16 *dy = nullptr, *x = nullptr, *w = nullptr, *dw = nullptr;
};

inline ConvGradBufs carve_conv_grad(Carve& w, const ConvShape& g, int64_t dy_n, int64_t w_n,
                                    bool dx, bool dw) {
  ConvGradBufs b;
  b.dy = w.take<B16>(dy_n);
  b.x = w.take<B16>(g.n * g.c * g.in_vol);
  if (dx) b.w = w.take<B16>(w_n);
  if (dw) b.dw = w.take<B16>(w_n);
  return b;
}

template <class Lib>
size_t conv_grad_bf16_ws(const KernelArgs& a, const GpuCtx& c) {
  const auto [dx, dw, db, s, L] = conv_grad_args<char>(a);
  if (!dx && !dw) return 0;
  Carve w;
  carve_conv_grad(w, rounded_geom(L, s), a.in[0].numel(), a.in[2].numel(), dx, dw);
  size_t lib = 0;
  if (L.ok && dw)
    lib = Lib::conv_workspace(c, ConvDir::BwdFilter, L.g, DType::BF16, nullptr, nullptr, nullptr);
  if (L.ok && dx)
    lib = std::max(
        lib, Lib::conv_workspace(c, ConvDir::BwdData, L.g, DType::BF16, nullptr, nullptr, nullptr));
  return w.used() + lib;
}

template <class Lib>
void conv_grad_bf16_run(const KernelArgs& a, const GpuCtx& c) {
  const TensorView &dY = a.in[0], &X = a.in[1], &W = a.in[2];
  const auto [dx, dw, db, s, L] = conv_grad_args<float>(a);
  if (!dx && !dw) return conv_grad_run<Lib, float>(a, c);  // dB alone: no product
  const ConvShape& g = rounded_geom(L, s);
  Carve w(a.workspace);
  const ConvGradBufs b = carve_conv_grad(w, g, dY.numel(), W.numel(), dx != nullptr, dw != nullptr);
  if (!a.workspace || w.used() > a.workspace_bytes) return conv_grad_run<Lib, float>(a, c);
  if (db) bias_grad(c, s.n, s.m, s.out_vol, dY.ptr<float>(), db);
  convert(c, dY.numel(), dY.ptr<float>(), b.dy);
  void* ws = w.rest();
  const size_t ws_bytes = w.left(a.workspace_bytes);
  if (dw) {
    round_input(c, L, s, X.ptr<float>(), b.x);
    if (L.ok && Lib::conv(c, ConvDir::BwdFilter, L.g, DType::BF16, b.x, b.dw, b.dy, ws, ws_bytes))
      convert(c, W.numel(), b.dw, dw);
    else
      direct_bwd_filter(c, g, b.x, b.dy, dw);
  }
  if (dx) {
    convert(c, W.numel(), W.ptr<float>(), b.w);
    // dX' into the X' buffer (its X' is no longer needed), then shifted back as f32.
    if (L.ok && Lib::conv(c, ConvDir::BwdData, L.g, DType::BF16, b.x, b.w, b.dy, ws, ws_bytes)) {
      if (L.shifted)
        shift_out(c, L, s, b.x, dx);
      else
        convert(c, X.numel(), b.x, dx);
    } else {
      direct_bwd_data(c, s, b.dy, b.w, dx);  // dY and W are the same in either geometry
    }
  }
}

// ---- Gemm and MatMul ----------------------------------------------------------------------------
// Workspace: A (bf16), B (bf16), then the library's.
struct RoundedOperands {
  B16 *a = nullptr, *b = nullptr;
};

inline RoundedOperands carve_operands(Carve& w, const TensorView& A, const TensorView& B) {
  RoundedOperands r;
  r.a = w.take<B16>(A.numel());
  r.b = w.take<B16>(B.numel());
  return r;
}

// One product on the rounded operands: the library, or the naive kernel where it declines.
template <class Lib>
void gemm_bf16_call(const GpuCtx& c, const LtProblem& p, double alpha, double beta, const B16* A,
                    const B16* B, float* D, void* ws, size_t ws_bytes) {
  if (!Lib::gemm(c, p, DType::BF16, alpha, beta, A, B, D, ws, ws_bytes))
    naive_gemm(c, p, alpha, beta, A, B, D);
}

template <class Lib>
size_t gemm_bf16_ws(const KernelArgs& a, const GpuCtx& c) {
  const GemmProblem g = gemm_problem(a);
  if (g.empty()) return 0;
  Carve w;
  carve_operands(w, a.in[0], a.in[1]);
  return w.used() + Lib::gemm_workspace(c, g.lp, DType::BF16, nullptr, nullptr, a.out[0].data);
}

template <class Lib>
void gemm_bf16_run(const KernelArgs& a, const GpuCtx& c) {
  const TensorView &A = a.in[0], &B = a.in[1], &Y = a.out[0];
  const GemmProblem g = gemm_problem(a);
  Carve w(a.workspace);
  const RoundedOperands r = carve_operands(w, A, B);
  if (g.empty() || !a.workspace || w.used() > a.workspace_bytes)
    return gemm_run<Lib, float>(a, c);  // no product, or no room for the rounded operands
  float* y = Y.ptr<float>();
  const bool has_c = gemm_c_term(a, c, g, y);
  convert(c, A.numel(), A.ptr<float>(), r.a);
  convert(c, B.numel(), B.ptr<float>(), r.b);
  gemm_bf16_call<Lib>(c, g.lp, static_cast<double>(a.p<ops::GemmParams>().alpha), has_c ? 1.0 : 0.0,
                      r.b, r.a, y, w.rest(), w.left(a.workspace_bytes));
}

template <class Lib>
size_t matmul_bf16_ws(const KernelArgs& a, const GpuCtx& c) {
  const TensorView &A = a.in[0], &B = a.in[1];
  const ops::MatMulParams& mp = a.p<ops::MatMulParams>();
  const MatMulPlan plan = matmul_plan(A.dims, B.dims, mp.trans_a, mp.trans_b);
  if (plan.calls.empty()) return 0;
  Carve w;
  carve_operands(w, A, B);
  const size_t b_at = round_up(static_cast<size_t>(A.numel()) * 2, 256);  // r.b's offset
  const auto* y = static_cast<const char*>(a.out[0].data);
  size_t lib = 0;
  // The calls differ only in their offsets, which set the operands' alignment (as in matmul_ws,
  // one per distinct alignment suffices): the library is asked with addresses aligned as the
  // rounded operands' will be (ws_address), and Y's own where it is known.
  for (size_t i = 0; i < plan.calls.size() && i < 64; ++i) {
    const LtCall& call = plan.calls[i];
    lib = std::max(
        lib, Lib::gemm_workspace(c, call.p, DType::BF16, ws_address(b_at + 2 * size_t(call.a_off)),
                                 ws_address(2 * size_t(call.b_off)),
                                 y ? y + 4 * size_t(call.d_off) : nullptr));
  }
  return w.used() + lib;
}

template <class Lib>
void matmul_bf16_run(const KernelArgs& a, const GpuCtx& c) {
  const TensorView &A = a.in[0], &B = a.in[1], &Y = a.out[0];
  const ops::MatMulParams& mp = a.p<ops::MatMulParams>();
  CB_CHECK(!mp.permuted());
  const MatMulPlan plan = matmul_plan(A.dims, B.dims, mp.trans_a, mp.trans_b);
  Carve w(a.workspace);
  const RoundedOperands r = carve_operands(w, A, B);
  if (plan.calls.empty() || !a.workspace || w.used() > a.workspace_bytes)
    return matmul_run<Lib, float>(a, c);  // empty, K = 0, or no room for the rounded operands
  convert(c, A.numel(), A.ptr<float>(), r.a);
  convert(c, B.numel(), B.ptr<float>(), r.b);
  float* py = Y.ptr<float>();
  for (const LtCall& call : plan.calls)
    gemm_bf16_call<Lib>(c, call.p, 1.0, 0.0, r.b + call.a_off, r.a + call.b_off, py + call.d_off,
                        w.rest(), w.left(a.workspace_bytes));
}

}  // namespace cb::CB_GPU_NS::lib
