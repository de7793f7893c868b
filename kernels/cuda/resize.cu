// Resize, Upsample and ResizeGrad on the CUDA backend (mirroring kernels/cpu/resize.cpp): per
// axis the taps of an output index (geom::resize_taps, kernels/common/geometry.h) are computed in
// the kernel body; Y sums its taps per element. ResizeGrad by default zeroes dX and scatters each
// dY element to its taps with atomic_add (the order of the adds, and so the float sums, change
// from run to run); with GpuCtx::deterministic each dX element gathers the dY elements that read
// it, in the CPU's order (separable.h). Not the default: the tables cost a host computation and a
// copy per launch, and the gather walks every combination of taps per dX element.
#include "kernels/common/geometry.h"
#include "kernels/cuda/data_movement_util.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/separable.h"
#include "runtime/error.h"
#include "runtime/ops/params.h"

namespace cb::CB_GPU_NS {

namespace {

// ---- Resize, Upsample, ResizeGrad ---------------------------------------------------------------
using RP = ops::ResizeParams;

struct ResizeGeo {
  Dims src, dst;  // the forward's input (X) and output (Y) dims
  Dims src_st;    // X's contiguous strides
  double scale[kMaxRank] = {};
  geom::ResizeRule rule;
};

// The taps of every axis for output element i of Y; false when an axis has none.
struct ElemTaps {
  int64_t idx[kMaxRank][geom::kMaxResizeTaps];
  double w[kMaxRank][geom::kMaxResizeTaps];
  int n[kMaxRank];
};
CB_HOST_DEVICE inline bool elem_taps(const ResizeGeo& g, int64_t i, ElemTaps& t) {
  bool any = true;
  for (int d = g.dst.rank - 1; d >= 0; --d) {
    const int64_t o = i % g.dst.d[d];
    i /= g.dst.d[d];
    t.n[d] = geom::resize_taps(g.rule, g.src.d[d], g.dst.d[d], g.scale[d], o, t.idx[d], t.w[d]);
    any &= t.n[d] > 0;
  }
  return any;
}

// Calls f(offset in X, weight) for every combination of the axes' taps.
template <class F>
CB_HOST_DEVICE inline void for_each_tap(const ResizeGeo& g, const ElemTaps& t, F f) {
  const int r = g.dst.rank;
  int k[kMaxRank] = {};
  for (;;) {
    double coef = 1;
    int64_t off = 0;
    for (int d = 0; d < r; ++d) {
      coef *= t.w[d][k[d]];
      off += t.idx[d][k[d]] * g.src_st.d[d];
    }
    f(off, coef);
    int d = r - 1;
    for (; d >= 0; --d) {
      if (++k[d] < t.n[d]) break;
      k[d] = 0;
    }
    if (d < 0) return;
  }
}

ResizeGeo resize_geo(const char* op, const RP& p, const std::vector<int64_t>& x_dims,
                     const std::vector<int64_t>& y_dims) {
  check_rank(op, x_dims.size());
  CB_CHECK(x_dims.size() == y_dims.size() && p.scales.size() == x_dims.size());
  ResizeGeo g;
  g.src = dims_of(x_dims);
  g.dst = dims_of(y_dims);
  g.src_st = contiguous_strides(g.src);
  for (size_t d = 0; d < x_dims.size(); ++d) g.scale[d] = p.scales[d];
  g.rule = geom::resize_rule(p);
  return g;
}

// A functor rather than a lambda: the tap loop takes a callable, nested in the element body.
template <class T>
struct GatherTap {
  const T* x;
  double* acc;
  CB_HOST_DEVICE void operator()(int64_t off, double w) const {
    *acc += w * static_cast<double>(x[off]);
  }
};
template <class T>
struct ScatterTap {
  T* dx;
  double g;
  CB_HOST_DEVICE void operator()(int64_t off, double w) const {
    atomic_add(dx + off, static_cast<T>(w * g));
  }
};

// Y = taps(X): each Y element sums its taps.
template <class T>
void resize_t(const KernelArgs& a, const GpuCtx& c, ResizeGeo g) {
  const T* x = a.in[0].ptr<const T>();
  T* y = a.out[0].ptr<T>();
  parallel_for(c, a.out[0].numel(), [=] CB_HOST_DEVICE(int64_t i) {
    ElemTaps t;
    double acc = 0;
    if (elem_taps(g, i, t)) for_each_tap(g, t, GatherTap<T>{x, &acc});
    y[i] = static_cast<T>(acc);
  });
}

void Resize(const KernelArgs& a, const GpuCtx& c) {
  const TensorView &X = a.in[0], &Y = a.out[0];
  if (Y.numel() == 0) return;
  const ResizeGeo g = resize_geo("Resize", a.p<RP>(), X.dims, Y.dims);
  CB_GPU_DISPATCH_FLOAT(Y.dtype, "Resize", resize_t, a, c, g)
}

// The adjoint tables of ResizeGrad (deterministic only): the forward taps of every axis
// (destination: dY's dims, source: dX's), transposed.
size_t resize_grad_tables(const KernelArgs& a, AdjointBytes& b) {
  const RP& p = a.p<RP>();
  const std::vector<int64_t>&dx = a.out[0].dims, &dy = a.in[0].dims;
  CB_CHECK(dx.size() == dy.size() && p.scales.size() == dx.size());
  const geom::ResizeRule rule = geom::resize_rule(p);
  adjoint_tables<geom::kMaxResizeTaps>(
      dx, dy,
      [&](int d, int64_t o, int64_t* idx, double* w) {
        const auto k = static_cast<size_t>(d);
        return geom::resize_taps(rule, dx[k], dy[k], p.scales[k], o, idx, w);
      },
      b);
  return b.bytes.size();
}

size_t resize_grad_workspace(const KernelArgs& a, const GpuCtx& c) {
  if (!c.deterministic || a.out[0].numel() == 0) return 0;
  AdjointBytes b;
  return resize_grad_tables(a, b);
}

// dX = taps^T(dY): gathered per dX element (deterministic), or zeroed and each dY element
// scattered to its taps (atomic adds).
template <class T>
void resize_grad_t(const KernelArgs& a, const GpuCtx& c, ResizeGeo g) {
  const T* dy = a.in[0].ptr<const T>();
  T* dx = a.out[0].ptr<T>();
  if (c.deterministic) {
    void* ws = workspace_of<void>(a, c, &resize_grad_workspace, "ResizeGrad");
    thread_local AdjointBytes b;
    resize_grad_tables(a, b);
    apply_adjoint<T>(c, upload_tables(c, b, ws, a.out[0].dims.size()), dy, g.dst, dx, g.src);
    return;
  }
  fill_zero(c, dx, a.out[0].bytes());
  parallel_for(c, a.in[0].numel(), [=] CB_HOST_DEVICE(int64_t i) {
    ElemTaps t;
    if (elem_taps(g, i, t)) for_each_tap(g, t, ScatterTap<T>{dx, static_cast<double>(dy[i])});
  });
}

void ResizeGrad(const KernelArgs& a, const GpuCtx& c) {
  const TensorView &dY = a.in[0], &dX = a.out[0];
  if (dX.numel() == 0) return;
  const ResizeGeo g = resize_geo("ResizeGrad", a.p<RP>(), dX.dims, dY.dims);
  CB_GPU_DISPATCH_FLOAT(dX.dtype, "ResizeGrad", resize_grad_t, a, c, g)
}

constexpr GpuKernel kKernels[] = {
    {OpKind::Resize, &Resize, kFloat},
    {OpKind::Upsample, &Resize, kFloat},
    {OpKind::ResizeGrad, &ResizeGrad, kFloat, &resize_grad_workspace},
};
}  // namespace

std::span<const GpuKernel> resize_kernels() { return kKernels; }

}  // namespace cb::CB_GPU_NS
