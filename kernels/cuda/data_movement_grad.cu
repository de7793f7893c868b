// Gradient kernels of the CUDA data movement ops that select elements (mirroring
// kernels/cpu/data_movement_grad.cpp): the gradient goes back to the selected positions of a
// zeroed tensor shaped like the forward's input. GatherGrad with few indices gathers per output
// (deterministic, no atomics); with many, and PadGrad (reflect and edge copy one element many
// times), dX is zeroed and dY scattered with atomic_add. An out-of-range GatherGrad index adds
// nothing and is reported through the stream's error flag (device_error.h), raised as the CPU's
// error at the device's next synchronisation.
#include "kernels/common/geometry.h"
#include "kernels/common/scalar_math.h"
#include "kernels/cuda/data_movement_util.h"
#include "kernels/cuda/launch.h"
#include "runtime/error.h"
#include "runtime/ops/params.h"

namespace cb::CB_GPU_NS {

namespace {

using geom::prod;

// ---- gradients ----------------------------------------------------------------------------------
// GatherGrad(dY [outer, ni, inner], indices [ni], data_shape) -> dX [outer, n, inner]: dX[o,
// idx[k], j] += dY[o, k, j]. With few indices each dX element sums its own contributions in index
// order (deterministic, the CPU's order); else dX is zeroed and dY scattered with atomic adds.
// An index outside [-n, n) contributes nothing and is reported (device_error.h).
constexpr int64_t kGatherGradLoopMax = 16;

template <class T>
void gather_grad_t(const KernelArgs& a, const GpuCtx& c, IntsRef idx, int64_t n, int64_t inner,
                   int64_t ni, int64_t axis) {
  const T* g = a.in[0].ptr<const T>();
  T* dx = a.out[0].ptr<T>();
  const DeviceErrorFlag err = c.error;
  if (ni <= kGatherGradLoopMax) {
    parallel_for(c, a.out[0].numel(), [=] CB_HOST_DEVICE(int64_t i) {
      const int64_t j = i % inner, t = i / inner, r = t % n, o = t / n;
      T acc = T(0);
      for (int64_t k = 0; k < ni; ++k) {
        const int64_t q = idx[k];
        if (q < -n || q >= n) {
          raise_device_error(err, DeviceErrorCode::GatherGradIndex, q, axis, n);
          continue;
        }
        if ((q < 0 ? q + n : q) == r) acc += g[(o * ni + k) * inner + j];
      }
      dx[i] = acc;
    });
    return;
  }
  fill_zero(c, dx, a.out[0].bytes());
  parallel_for(c, a.in[0].numel(), [=] CB_HOST_DEVICE(int64_t i) {
    const int64_t j = i % inner, t = i / inner, k = t % ni, o = t / ni;
    const int64_t q = idx[k];
    if (q < -n || q >= n) {
      raise_device_error(err, DeviceErrorCode::GatherGradIndex, q, axis, n);
      return;
    }
    atomic_add(dx + (o * n + (q < 0 ? q + n : q)) * inner + j, g[i]);
  });
}

void GatherGrad(const KernelArgs& a, const GpuCtx& c) {
  const TensorView &dy = a.in[0], &idx = a.in[1], &dx = a.out[0];
  CB_CHECK(dx.rank() >= 1);
  int64_t axis = a.p<ops::GatherParams>().axis;
  if (axis < 0) axis += dx.rank();
  const auto ax = static_cast<size_t>(axis);
  const int64_t outer = prod(dx.dims, 0, ax), n = dx.dims[ax],
                inner = prod(dx.dims, ax + 1, dx.dims.size()), ni = idx.numel();
  CB_CHECK(dy.numel() == outer * ni * inner);
  if (dx.numel() == 0) return;
  CB_GPU_DISPATCH_FLOAT(dx.dtype, "GatherGrad", gather_grad_t, a, c, ints_ref("GatherGrad", idx), n,
                        inner, ni, axis)
}

// SliceGrad(dY, x_shape) -> dX: zeros, dY written at the positions the forward read.
template <class E>
void slice_grad_t(const GpuCtx& c, const TensorView& dy, const TensorView& dx, Dims st,
                  int64_t base) {
  const E* g = dy.ptr<const E>();
  E* y = dx.ptr<E>();
  fill_zero(c, y, dx.bytes());
  const Dims d = dims_of(dy.dims);
  parallel_for(c, dy.numel(),
               [=] CB_HOST_DEVICE(int64_t i) { y[base + offset_of(i, d, st)] = g[i]; });
}

void SliceGrad(const KernelArgs& a, const GpuCtx& c) {
  const TensorView &dy = a.in[0], &dx = a.out[0];
  CB_CHECK(dy.dims.size() == dx.dims.size());
  Dims st;
  st.rank = static_cast<int>(dx.dims.size());
  const int64_t base = geom::slice_strides("SliceGrad", a.p<ops::SliceParams>(), dx.dims, st.d);
  if (dx.numel() == 0) return;
  CB_DM_DISPATCH_BYTES(dx.dtype, "SliceGrad", slice_grad_t, c, dy, dx, st, base)
}

// PadGrad(dY) -> dX (PadParams::pads: begins then ends of every dim): every dY element the forward
// copied from a dX element is added to it (zeroed first; atomic adds: reflect and edge copy one
// element many times).
template <class T>
void pad_grad_t(const GpuCtx& c, const TensorView& dy, const TensorView& dx, Dims begin, int mode) {
  const T* g = dy.ptr<const T>();
  T* y = dx.ptr<T>();
  fill_zero(c, y, dx.bytes());
  const Dims gd = dims_of(dy.dims), xd = dims_of(dx.dims), xst = contiguous_strides(xd);
  parallel_for(c, dy.numel(), [=] CB_HOST_DEVICE(int64_t i) {
    int64_t off = 0, rem = i;
    for (int d = gd.rank - 1; d >= 0; --d) {
      const int64_t o = rem % gd.d[d];
      rem /= gd.d[d];
      const int64_t s = geom::pad_source(mode, xd.d[d], begin.d[d], o);
      if (s < 0) return;
      off += s * xst.d[d];
    }
    atomic_add(y + off, g[i]);
  });
}

void PadGrad(const KernelArgs& a, const GpuCtx& c) {
  const auto& p = a.p<ops::PadParams>();
  const TensorView &dy = a.in[0], &dx = a.out[0];
  const size_t r = dx.dims.size();
  check_rank("PadGrad", r);
  CB_CHECK(p.pads && p.pads->size() == 2 * r && dy.dims.size() == r);
  Dims begin;
  begin.rank = static_cast<int>(r);
  for (size_t d = 0; d < r; ++d) begin.d[d] = (*p.pads)[d];
  if (dx.numel() == 0) return;
  CB_GPU_DISPATCH_FLOAT(dx.dtype, "PadGrad", pad_grad_t, c, dy, dx, begin, geom::pad_mode(p))
}

constexpr GpuKernel kKernels[] = {
    {OpKind::GatherGrad, &GatherGrad, kFloat},
    {OpKind::PadGrad, &PadGrad, kFloat},
    {OpKind::SliceGrad, &SliceGrad, kFloat},
};
}  // namespace

std::span<const GpuKernel> data_movement_grad_kernels() { return kKernels; }

}  // namespace cb::CB_GPU_NS
