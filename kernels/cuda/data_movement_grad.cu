// Gradient kernels of the CUDA data movement ops that select elements (mirroring
// kernels/cpu/data_movement_grad.cpp): the gradient goes back to the selected positions of a
// zeroed tensor shaped like the forward's input. GatherGrad and PadGrad sum several dY elements
// into one dX element: in the CPU's order where that is free or GpuCtx::deterministic asks for
// it, else scattered with atomic adds (their order, and so the float sums, vary from run to run);
// each op's comment says which path runs when. An out-of-range GatherGrad index adds nothing and
// is reported through the stream's error flag (device_error.h), raised as the CPU's error at the
// device's next synchronisation.
#include "kernels/common/geometry.h"
#include "kernels/common/scalar_math.h"
#include "kernels/cuda/data_movement_util.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/separable.h"
#include "runtime/error.h"
#include "runtime/ops/params.h"

namespace cb::CB_GPU_NS {

namespace {

using geom::prod;

// ---- gradients ----------------------------------------------------------------------------------
// GatherGrad(dY [outer, ni, inner], indices [ni], data_shape) -> dX [outer, n, inner]: dX[o,
// idx[k], j] += dY[o, k, j]. The CPU sums each dX element's contributions from zero in index order
// k. Three ways here, the first two in the CPU's order (no atomics; equal to the CPU bit for bit):
//   - few indices (ni <= kGatherGradLoopMax): a thread per dX element loops over all indices;
//   - columns: a thread per (o, j) walks k in order and adds dY[o, k, j] into its own column of row
//     idx[k] (the CPU's split: no two threads share a dX element). With deterministic set; and by
//     default when there are enough columns to fill the GPU with coalesced reads (inner >=
//     kGatherGradColumnsInner and outer * inner >= kGatherGradColumnsMin): it then does the
//     scatter's work without its atomics, so determinism should cost nothing there and is the
//     default (an estimate, not yet measured on a GPU);
//   - otherwise (many indices over few or narrow columns, where one thread per column would walk
//     every index alone) dX is zeroed and each dY element scattered with an atomic add, whose
//     order, and so the float sums, change from run to run.
// An index outside [-n, n) contributes nothing and is reported (device_error.h).
constexpr int64_t kGatherGradLoopMax = 16;
constexpr int64_t kGatherGradColumnsInner = 32;
constexpr int64_t kGatherGradColumnsMin = int64_t{1} << 14;

template <class T>
void gather_grad_t(const KernelArgs& a, const GpuCtx& c, IntsRef idx, int64_t n, int64_t inner,
                   int64_t ni, int64_t axis) {
  const T* g = a.in[0].ptr<const T>();
  T* dx = a.out[0].ptr<T>();
  const DeviceErrorFlag err = c.error;
  const int64_t outer = a.out[0].numel() / (n * inner);
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
  const bool columns = c.deterministic ||
                       (inner >= kGatherGradColumnsInner && outer * inner >= kGatherGradColumnsMin);
  if (columns) {
    parallel_for(c, outer * inner, [=] CB_HOST_DEVICE(int64_t col) {
      const int64_t o = col / inner, j = col % inner;
      for (int64_t k = 0; k < ni; ++k) {
        const int64_t q = idx[k];
        if (q < -n || q >= n) {
          raise_device_error(err, DeviceErrorCode::GatherGradIndex, q, axis, n);
          continue;
        }
        dx[(o * n + (q < 0 ? q + n : q)) * inner + j] += g[(o * ni + k) * inner + j];
      }
    });
    return;
  }
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
// copied from a dX element is added to it. By default dX is zeroed and each dY element added with
// an atomic add (reflect and edge copy one element many times), whose order changes the float
// sums from run to run; with deterministic set, each dX element gathers its dY elements in the
// CPU's order (separable.h: the transposed taps, uploaded into the workspace). Not the default:
// the tables cost a host computation and a host->device copy per launch, and with the usual
// narrow pads a dX element sums only a few dY elements (edge: pad + 1 per padded axis at a border).
size_t pad_grad_tables(const KernelArgs& a, AdjointBytes& b) {
  const auto& p = a.p<ops::PadParams>();
  const TensorView &dy = a.in[0], &dx = a.out[0];
  CB_CHECK(p.pads && p.pads->size() == 2 * dx.dims.size() && dy.dims.size() == dx.dims.size());
  const int mode = geom::pad_mode(p);
  const PadList& pads = *p.pads;
  adjoint_tables<1>(
      dx.dims, dy.dims,
      [&](int d, int64_t o, int64_t* idx, double* w) {
        idx[0] = geom::pad_source(mode, dx.dims[static_cast<size_t>(d)],
                                  pads[static_cast<size_t>(d)], o);
        w[0] = 1;
        return idx[0] >= 0 ? 1 : 0;
      },
      b);
  return b.bytes.size();
}

size_t pad_grad_workspace(const KernelArgs& a, const GpuCtx& c) {
  if (!c.deterministic || a.out[0].numel() == 0) return 0;
  AdjointBytes b;
  return pad_grad_tables(a, b);
}

template <class T>
void pad_grad_t(const KernelArgs& a, const GpuCtx& c, Dims begin, int mode) {
  const TensorView &dy = a.in[0], &dx = a.out[0];
  const T* g = dy.ptr<const T>();
  T* y = dx.ptr<T>();
  const Dims gd = dims_of(dy.dims), xd = dims_of(dx.dims), xst = contiguous_strides(xd);
  if (c.deterministic) {
    void* ws = workspace_of<void>(a, c, &pad_grad_workspace, "PadGrad");
    thread_local AdjointBytes b;
    pad_grad_tables(a, b);
    apply_adjoint<T>(c, upload_tables(c, b, ws, dx.dims.size()), g, gd, y, xd);
    return;
  }
  fill_zero(c, y, dx.bytes());
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
  if (r == 0) {  // a scalar: dX = dY
    copy_device(c, dx.data, dy.data, dx.bytes());
    return;
  }
  CB_GPU_DISPATCH_FLOAT(dx.dtype, "PadGrad", pad_grad_t, a, c, begin, geom::pad_mode(p))
}

constexpr GpuKernel kKernels[] = {
    {OpKind::GatherGrad, &GatherGrad, kFloat},
    {OpKind::PadGrad, &PadGrad, kFloat, &pad_grad_workspace},
    {OpKind::SliceGrad, &SliceGrad, kFloat},
};
}  // namespace

std::span<const GpuKernel> data_movement_grad_kernels() { return kKernels; }

}  // namespace cb::CB_GPU_NS
