// MaskedSoftmax(X, mask?) and MaskedSoftmaxGrad(dY, Y, mask?) of the CUDA backend (the CPU's
// kernels/cpu/softmax.cpp, same arithmetic in the same order): rows of the last axis; the masked
// logit of element (r, k) is recomputed where it is read (scale * x, then the Where or the Add)
// rather than stored; per row its max and 1/sum of exp (forward) or sum(dy y) (backward) go to the
// workspace as doubles, then one thread per element writes the result.
#include <limits>

#include "kernels/common/geometry.h"
#include "kernels/common/scalar_math.h"
#include "kernels/cuda/launch.h"
#include "runtime/error.h"
#include "runtime/ops/params.h"

namespace cb::CB_GPU_NS {

namespace {
using MaskKind = ops::MaskedSoftmaxParams::Mask;

bool mask_is_bool(MaskKind k) {
  return k == MaskKind::FillWhereTrue || k == MaskKind::FillWhereFalse;
}

geom::MaskPlan plan_of(const KernelArgs& a, size_t x_in, size_t mask_in) {
  const bool has = a.in.size() > mask_in && a.in[mask_in].present();
  return geom::mask_plan(a.in[x_in].dims, has ? a.in[mask_in].dims : std::vector<int64_t>{}, has);
}

size_t fwd_ws(const KernelArgs& a, const GpuCtx&) {
  if (a.in[0].numel() == 0) return 0;
  return static_cast<size_t>(plan_of(a, 0, 1).rows) * 2 * sizeof(double);
}
size_t bwd_ws(const KernelArgs& a, const GpuCtx&) {
  if (a.in[1].numel() == 0) return 0;
  return static_cast<size_t>(plan_of(a, 1, 2).rows) * sizeof(double);
}
void need(const KernelArgs& a, size_t bytes, const char* op) {
  if (a.workspace_bytes < bytes || (bytes > 0 && !a.workspace))
    fail("{}: workspace of {} bytes given, {} needed", op, a.workspace_bytes, bytes);
}

// The masked logit of element k of row r (T arithmetic, as the unfused Mul then Where/Add).
template <class T, class M>
struct Logit {
  const T* x;
  const M* m;
  geom::MaskPlan pl;
  T scale, fill;
  MaskKind kind;
  CB_HOST_DEVICE T operator()(int64_t r, int64_t k) const {
    const T v = static_cast<T>(x[r * pl.n + k] * scale);
    if (kind == MaskKind::None) return v;
    const M mk = m[pl.row_offset(r) + k * pl.col_stride];
    if (kind == MaskKind::FillWhereTrue) return mk ? fill : v;
    if (kind == MaskKind::FillWhereFalse) return mk ? v : fill;
    return static_cast<T>(v + static_cast<T>(mk));
  }
};

template <class M>
struct Fwd {
  template <class T>
  static void run(const KernelArgs& a, const GpuCtx& c, const geom::MaskPlan& pl) {
    const auto& p = a.p<ops::MaskedSoftmaxParams>();
    const Logit<T, M> z{a.in[0].ptr<const T>(),
                        a.in.size() > 1 && a.in[1].present() ? a.in[1].ptr<const M>() : nullptr,
                        pl,
                        static_cast<T>(p.scale),
                        static_cast<T>(p.fill),
                        p.mask};
    T* y = a.out[0].ptr<T>();
    const int64_t rows = pl.rows, n = pl.n;
    double* mx = static_cast<double*>(a.workspace);
    double* inv = mx + rows;
    segmented_reduce(
        c, rows, n, -std::numeric_limits<T>::infinity(),
        [=] CB_HOST_DEVICE(int64_t r, int64_t k) -> T { return z(r, k); },
        [=] CB_HOST_DEVICE(T u, T w) -> T { return u < w ? w : u; },
        [=] CB_HOST_DEVICE(int64_t r, T m) { mx[r] = double(m); });
    segmented_reduce(
        c, rows, n, 0.0,
        [=] CB_HOST_DEVICE(int64_t r, int64_t k) -> double {
          return double(math::m_exp(static_cast<T>(z(r, k) - T(mx[r]))));
        },
        [=] CB_HOST_DEVICE(double u, double w) -> double { return u + w; },
        [=] CB_HOST_DEVICE(int64_t r, double s) { inv[r] = 1.0 / s; });
    parallel_for(c, rows * n, [=] CB_HOST_DEVICE(int64_t i) {
      const int64_t r = i / n;
      const T e = math::m_exp(static_cast<T>(z(r, i % n) - T(mx[r])));
      y[i] = static_cast<T>(e * static_cast<T>(inv[r]));
    });
  }
};

template <class M>
struct Bwd {
  template <class T>
  static void run(const KernelArgs& a, const GpuCtx& c, const geom::MaskPlan& pl) {
    const auto& p = a.p<ops::MaskedSoftmaxParams>();
    const T* dy = a.in[0].ptr<const T>();
    const T* y = a.in[1].ptr<const T>();
    const M* m = a.in.size() > 2 && a.in[2].present() ? a.in[2].ptr<const M>() : nullptr;
    T* dx = a.out[0].ptr<T>();
    const T scale = static_cast<T>(p.scale);
    const bool where = mask_is_bool(p.mask), fill_on = p.mask == MaskKind::FillWhereTrue;
    const int64_t rows = pl.rows, n = pl.n;
    double* sum = static_cast<double*>(a.workspace);
    segmented_reduce(
        c, rows, n, 0.0,
        [=] CB_HOST_DEVICE(int64_t r, int64_t k) -> double {
          return double(dy[r * n + k]) * double(y[r * n + k]);
        },
        [=] CB_HOST_DEVICE(double u, double w) -> double { return u + w; },
        [=] CB_HOST_DEVICE(int64_t r, double s) { sum[r] = s; });
    parallel_for(c, rows * n, [=] CB_HOST_DEVICE(int64_t i) {
      const int64_t r = i / n;
      if (where && (m[pl.row_offset(r) + (i % n) * pl.col_stride] != 0) == fill_on) {
        dx[i] = T(0);
        return;
      }
      dx[i] = static_cast<T>(static_cast<T>(double(y[i]) * (double(dy[i]) - sum[r])) * scale);
    });
  }
};

// A float mask (Add) has X's type.
struct FwdSame {
  template <class T>
  static void run(const KernelArgs& a, const GpuCtx& c, const geom::MaskPlan& pl) {
    Fwd<T>::template run<T>(a, c, pl);
  }
};
struct BwdSame {
  template <class T>
  static void run(const KernelArgs& a, const GpuCtx& c, const geom::MaskPlan& pl) {
    Bwd<T>::template run<T>(a, c, pl);
  }
};

void MaskedSoftmax(const KernelArgs& a, const GpuCtx& c) {
  if (a.in[0].numel() == 0) return;
  need(a, fwd_ws(a, c), "MaskedSoftmax");
  const geom::MaskPlan pl = plan_of(a, 0, 1);
  if (mask_is_bool(a.p<ops::MaskedSoftmaxParams>().mask)) {
    CB_GPU_DISPATCH_FLOAT(a.in[0].dtype, "MaskedSoftmax", Fwd<bool>::template run, a, c, pl)
  } else {
    CB_GPU_DISPATCH_FLOAT(a.in[0].dtype, "MaskedSoftmax", FwdSame::template run, a, c, pl)
  }
}

void MaskedSoftmaxGrad(const KernelArgs& a, const GpuCtx& c) {
  if (a.in[1].numel() == 0) return;
  need(a, bwd_ws(a, c), "MaskedSoftmaxGrad");
  const geom::MaskPlan pl = plan_of(a, 1, 2);
  if (mask_is_bool(a.p<ops::MaskedSoftmaxParams>().mask)) {
    CB_GPU_DISPATCH_FLOAT(a.in[1].dtype, "MaskedSoftmaxGrad", Bwd<bool>::template run, a, c, pl)
  } else {
    CB_GPU_DISPATCH_FLOAT(a.in[1].dtype, "MaskedSoftmaxGrad", BwdSame::template run, a, c, pl)
  }
}

constexpr GpuKernel kKernels[] = {
    {OpKind::MaskedSoftmax, &MaskedSoftmax, kFloat, &fwd_ws},
    {OpKind::MaskedSoftmaxGrad, &MaskedSoftmaxGrad, kFloat, &bwd_ws},
};
}  // namespace

std::span<const GpuKernel> masked_softmax_kernels() { return kKernels; }

}  // namespace cb::CB_GPU_NS
