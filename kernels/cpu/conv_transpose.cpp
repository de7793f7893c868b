// ConvTranspose on the CPU: X [N,C,D...], W [C,M/G,k...], B [M]? -> Y [N,M,D'...], 1-D to 3-D.
// No convolution of its own: Y is the data gradient of the Conv Y -> X with weights W, whose
// geometry conv_transpose.cpp's infer() stored in ConvParams::window, so this runs ConvGrad's
// dX path (oneDNN's backward-data for f32 where it applies, else GEMM + col2im) with X in dY's
// place, then adds the bias. That Conv's input (ConvGrad's X) is only a shape here: ConvGrad
// reads X's values for dW alone, which is not asked for.
#include <algorithm>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/kernel_util.h"
#include "runtime/ops/params.h"

namespace cb::cpu {

void ConvTranspose(const KernelArgs& a) {
  const auto& p = a.p<ops::ConvParams>();
  const TensorView &X = a.in[0], &W = a.in[1], &Y = a.out[0];
  // ConvGrad's arguments (dY, X, W) -> dX, reused across calls: no allocation in steady state.
  thread_local KernelArgs g;
  g.params = a.params;
  g.workspace = a.workspace;
  g.workspace_bytes = a.workspace_bytes;
  g.in.resize(3);
  g.out.resize(1);
  g.in[0] = X;  // the Conv's output gradient
  g.in[1] = Y;  // the Conv's input: its dims only
  g.in[2] = W;
  g.out[0] = Y;
  // oneDNN needs the Conv's own pads; negative ones (outputs no window reaches) take im2col.
  const bool pads_ok =
      std::all_of(p.window.pads.begin(), p.window.pads.end(), [](int64_t v) { return v >= 0; });
  if (!pads_ok || !conv_grad_dnnl(g)) conv_grad_im2col(g);
  if (a.in.size() < 3 || !a.in[2].present() || Y.numel() == 0) return;
  const int64_t n = Y.dims[0], m = Y.dims[1], vol = Y.numel() / (n * m);
  dispatch_float(Y.dtype, [&]<class T>(Tag<T>) {
    const T* b = a.in[2].ptr<const T>();
    T* y = Y.ptr<T>();
    parallel(n * m, vol, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        T* row = y + i * vol;
        const T v = b[i % m];
        for (int64_t j = 0; j < vol; ++j) row[j] += v;
      }
    });
  });
}

}  // namespace cb::cpu
