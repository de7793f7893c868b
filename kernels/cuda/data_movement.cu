// Data movement kernels of the CUDA backend (mirroring kernels/cpu/data_movement.cpp): ops that
// move elements, one thread per element written. Conventions:
//   - byte-moving kernels dispatch on the element size only (1/2/4/8-byte unsigned ints), so they
//     cover every dtype;
//   - reshape-likes (Identity, Reshape, Flatten, Squeeze, Unsqueeze) copy device to device only
//     when output and input are distinct buffers;
//   - Transpose, Slice, Expand and Tile are one strided copy
//     out[i...] = in[base + sum_d i_d * st_d] (geom::StridedPlan, kernels/common/geometry.h: dims
//     of 1 dropped and contiguous runs merged first);
//   - host data (a Constant's value, Shape's dims) goes to the device with copy_from_host; small
//     inputs in device memory (Pad's pads/axes/value, Range's start/delta, Split's sizes) are read
//     by the kernel bodies, never by the host.
// An out-of-range Gather index writes zeros and is reported through the stream's error flag
// (device_error.h), which the device raises as the CPU's error at its next synchronisation.
#include <cstring>

#include "kernels/common/geometry.h"
#include "kernels/common/scalar_math.h"
#include "kernels/cuda/data_movement_util.h"
#include "kernels/cuda/launch.h"
#include "runtime/error.h"
#include "runtime/ops/params.h"

namespace cb::CB_GPU_NS {

namespace {

using geom::prod;

// ---- strided copies (geom::StridedPlan) ---------------------------------------------------------
template <class E>
void strided_copy_t(const GpuCtx& c, const void* in, void* out, int64_t n, geom::StridedPlan s) {
  const E* x = static_cast<const E*>(in);
  E* y = static_cast<E*>(out);
  if (s.contiguous()) {  // one contiguous run
    copy_device(c, y, x + s.base, static_cast<size_t>(n) * sizeof(E));
    return;
  }
  parallel_for(c, n, [=] CB_HOST_DEVICE(int64_t i) { y[i] = x[s.offset(i)]; });
}

// out (dims `dims`) from in with per-output-dim element strides `strides` and offset `base`.
void strided_copy(const GpuCtx& c, const char* op, const TensorView& in, const TensorView& out,
                  const std::vector<int64_t>& dims, const int64_t* strides, int64_t base) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const geom::StridedPlan s = geom::collapse_strided(op, dims, strides, base);
  CB_DM_DISPATCH_BYTES(out.dtype, op, strided_copy_t, c, in.data, out.data, n, s)
}

// LayoutReorder: the CPU backend's blocked layout and back, as one strided copy (CUDA graphs hold
// no blocked values; the kernel keeps the backends' op sets equal and runs in the harness).
void LayoutReorder(const KernelArgs& a, const GpuCtx& c) {
  int64_t st[kMaxRank] = {};
  const std::vector<int64_t> dims =
      geom::layout_reorder_strides(a.in[0].dims, a.p<ops::LayoutParams>().to_blocked, st);
  strided_copy(c, "LayoutReorder", a.in[0], a.out[0], dims, st, 0);
}

// ---- reshape-likes: same bytes, new dims --------------------------------------------------------
void copy_if_distinct(const KernelArgs& a, const GpuCtx& c) {
  copy_device(c, a.out[0].data, a.in[0].data, a.out[0].bytes());
}
void Identity(const KernelArgs& a, const GpuCtx& c) { copy_if_distinct(a, c); }
void Reshape(const KernelArgs& a, const GpuCtx& c) { copy_if_distinct(a, c); }
void Flatten(const KernelArgs& a, const GpuCtx& c) { copy_if_distinct(a, c); }
void Squeeze(const KernelArgs& a, const GpuCtx& c) { copy_if_distinct(a, c); }
void Unsqueeze(const KernelArgs& a, const GpuCtx& c) { copy_if_distinct(a, c); }

// ---- Transpose, Expand, Slice, Tile: strided copies (kernels/common/geometry.h) --------------
void Transpose(const KernelArgs& a, const GpuCtx& c) {
  int64_t st[kMaxRank] = {};
  geom::transpose_strides("Transpose", a.p<ops::TransposeParams>(), a.in[0].dims, st);
  strided_copy(c, "Transpose", a.in[0], a.out[0], a.out[0].dims, st, 0);
}

void Expand(const KernelArgs& a, const GpuCtx& c) {
  const TensorView &in = a.in[0], &out = a.out[0];
  int64_t st[kMaxRank] = {};
  geom::expand_strides("Expand", in.dims, out.dims.size(), st);
  strided_copy(c, "Expand", in, out, out.dims, st, 0);
}

// Slice: params dim_start / dim_step (resolved by infer()) per input dim.
void Slice(const KernelArgs& a, const GpuCtx& c) {
  const TensorView &in = a.in[0], &out = a.out[0];
  int64_t st[kMaxRank] = {};
  const int64_t base = geom::slice_strides("Slice", a.p<ops::SliceParams>(), in.dims, st);
  strided_copy(c, "Slice", in, out, out.dims, st, base);
}

// Tile: the output viewed as [r_0, d_0, r_1, d_1, ...], stride 0 along each r_i.
void Tile(const KernelArgs& a, const GpuCtx& c) {
  const TensorView &in = a.in[0], &out = a.out[0];
  if (out.numel() == 0) return;
  int64_t st[geom::kMaxStridedRank] = {};
  std::vector<int64_t> view;
  geom::tile_view("Tile", in.dims, out.dims, view, st);
  strided_copy(c, "Tile", in, out, view, st, 0);
}

// ---- Concat, Split ------------------------------------------------------------------------------
// One launch per input: input j's element e (outer o = e / chunk) goes to o * row + at + e % chunk.
template <class E>
void concat_part(const GpuCtx& c, const void* src, void* dst, int64_t n, int64_t chunk, int64_t row,
                 int64_t at) {
  const E* x = static_cast<const E*>(src);
  E* y = static_cast<E*>(dst);
  parallel_for(c, n, [=] CB_HOST_DEVICE(int64_t e) {
    const int64_t o = e / chunk;
    y[o * row + at + (e - o * chunk)] = x[e];
  });
}

void Concat(const KernelArgs& a, const GpuCtx& c) {
  const TensorView& out = a.out[0];
  const auto axis = static_cast<size_t>(a.p<ops::ConcatParams>().axis);
  const int64_t outer = std::max<int64_t>(prod(out.dims, 0, axis), 1);
  const int64_t row = out.numel() / outer;  // elements per outer index
  if (out.numel() == 0) return;
  int64_t at = 0;
  for (const TensorView& in : a.in) {
    if (!in.present()) continue;
    const int64_t n = in.numel(), chunk = n / outer;
    if (n > 0)
      CB_DM_DISPATCH_BYTES(out.dtype, "Concat", concat_part, c, in.data, out.data, n, chunk, row,
                           at)
    at += chunk;
  }
}

// Output k: element e (outer o = e / chunk) comes from o * row + at + e % chunk, where at is known
// on the host, or (sizes given as an input, with an omitted output before k) the sum of the
// device-resident sizes[0..k) times `inner`.
template <class E>
void split_part(const GpuCtx& c, const void* src, void* dst, int64_t n, int64_t chunk, int64_t row,
                int64_t at, IntsRef sizes, int64_t k, int64_t inner) {
  const E* x = static_cast<const E*>(src);
  E* y = static_cast<E*>(dst);
  parallel_for(c, n, [=] CB_HOST_DEVICE(int64_t e) {
    int64_t start = at;
    if (sizes.p) {
      start = 0;
      for (int64_t m = 0; m < k; ++m) start += sizes[m];
      start *= inner;
    }
    const int64_t o = e / chunk;
    y[e] = x[o * row + start + (e - o * chunk)];
  });
}

void Split(const KernelArgs& a, const GpuCtx& c) {
  const auto& p = a.p<ops::SplitParams>();
  const TensorView& in = a.in[0];
  const auto axis = static_cast<size_t>(p.axis);
  CB_CHECK(axis < in.dims.size());
  const int64_t inner = prod(in.dims, axis + 1, in.dims.size());
  const int64_t row = in.dims[axis] * inner;
  if (in.numel() == 0) return;
  // Sizes along the axis as infer() resolved them, where the host knows them (an omitted output
  // has no dims): the attribute, or equal parts; with the sizes input, the present outputs' dims.
  const auto n_out = static_cast<int64_t>(a.out.size());
  const bool sizes_input = !p.split && a.in.size() > 1 && a.in[1].present();
  auto host_size = [&](int64_t k) -> int64_t {
    if (p.split) return (*p.split)[static_cast<size_t>(k)];
    const int64_t d = in.dims[axis], chunk = (d + n_out - 1) / n_out;
    return k == n_out - 1 ? d - chunk * (n_out - 1) : chunk;
  };
  int64_t at = 0;  // elements along the axis before output k
  bool known = true;
  for (int64_t k = 0; k < n_out; ++k) {
    const TensorView& out = a.out[static_cast<size_t>(k)];
    if (out.present()) {
      const int64_t size = out.dims[axis], n = out.numel();
      const IntsRef sizes = known ? IntsRef{} : ints_ref("Split", a.in[1]);
      if (n > 0)
        CB_DM_DISPATCH_BYTES(in.dtype, "Split", split_part, c, in.data, out.data, n, size * inner,
                             row, at * inner, sizes, k, inner)
      at += size;
    } else if (sizes_input) {
      known = false;
    } else {
      at += host_size(k);
    }
  }
}

// ---- Gather -------------------------------------------------------------------------------------
// data [outer, n, inner], indices [ni] -> out [outer, ni, inner]; negative indices wrap, indices
// out of range give zeros and are reported (the first one met: in the host-run build, the CPU's
// first in index order).
template <class E>
void gather_t(const GpuCtx& c, const TensorView& data, IntsRef idx, const TensorView& out,
              int64_t n, int64_t ni, int64_t inner, int64_t axis) {
  const E* x = data.ptr<const E>();
  E* y = out.ptr<E>();
  const DeviceErrorFlag err = c.error;
  parallel_for(c, out.numel(), [=] CB_HOST_DEVICE(int64_t i) {
    const int64_t j = i % inner, t = i / inner, k = t % ni, o = t / ni;
    const int64_t q = idx[k];
    const int64_t r = q < 0 ? q + n : q;
    if (r >= 0 && r < n) {
      y[i] = x[(o * n + r) * inner + j];
    } else {
      y[i] = E(0);
      raise_device_error(err, DeviceErrorCode::GatherIndex, q, axis, n);
    }
  });
}

void Gather(const KernelArgs& a, const GpuCtx& c) {
  const TensorView &data = a.in[0], &idx = a.in[1], &out = a.out[0];
  const auto axis = static_cast<size_t>(a.p<ops::GatherParams>().axis);
  CB_CHECK(axis < data.dims.size());
  if (out.numel() == 0) return;
  const int64_t n = data.dims[axis], inner = prod(data.dims, axis + 1, data.dims.size());
  CB_DM_DISPATCH_BYTES(data.dtype, "Gather", gather_t, c, data, ints_ref("Gather", idx), out, n,
                       idx.numel(), inner, static_cast<int64_t>(axis))
}

// ---- Shape, Constant, ConstantOfShape, Range ----------------------------------------------------
void Shape(const KernelArgs& a, const GpuCtx& c) {
  const auto& p = a.p<ops::ShapeParams>();
  const int64_t r = a.in[0].rank();
  auto clamp = [r](int64_t x) { return std::clamp<int64_t>(x < 0 ? x + r : x, 0, r); };
  const int64_t b = clamp(p.start), e = clamp(p.end.value_or(r));
  if (e <= b) return;
  copy_from_host(c, a.out[0].data, a.in[0].dims.data() + b,
                 static_cast<size_t>(e - b) * sizeof(int64_t));
}

void Constant(const KernelArgs& a, const GpuCtx& c) {
  const Tensor& v = *a.p<ops::ConstantParams>().value;
  const size_t n = std::min(v.bytes.size(), a.out[0].bytes());
  if (n > 0) copy_from_host(c, a.out[0].data, v.bytes.data(), n);
}

template <class E>
void fill_t(const GpuCtx& c, void* dst, int64_t n, const void* value) {
  E x;
  std::memcpy(&x, value, sizeof(E));
  E* y = static_cast<E*>(dst);
  parallel_for(c, n, [=] CB_HOST_DEVICE(int64_t i) { y[i] = x; });
}

void ConstantOfShape(const KernelArgs& a, const GpuCtx& c) {
  const Tensor& v = *a.p<ops::ConstantParams>().value;
  const TensorView& out = a.out[0];
  if (out.numel() == 0) return;
  CB_CHECK(v.bytes.size() >= dtype_size(out.dtype));
  CB_DM_DISPATCH_BYTES(out.dtype, "ConstantOfShape", fill_t, c, out.data, out.numel(),
                       v.bytes.data())
}

// out[i] = start + i * delta, start and delta read on the device (n resolved by infer()).
template <class T>
void range_t(const KernelArgs& a, const GpuCtx& c) {
  const T* s = a.in[0].ptr<const T>();
  const T* d = a.in[2].ptr<const T>();
  T* y = a.out[0].ptr<T>();
  parallel_for(c, a.out[0].numel(), [=] CB_HOST_DEVICE(int64_t i) {
    const T start = s[0], delta = d[0];
    y[i] = static_cast<T>(start + static_cast<T>(i) * delta);
  });
}
void Range(const KernelArgs& a, const GpuCtx& c) {
  CB_CHECK(a.in[0].dtype == a.out[0].dtype && a.in[2].dtype == a.out[0].dtype);
  CB_GPU_DISPATCH_NUMERIC(a.out[0].dtype, "Range", range_t, a, c)
}

// ---- Pad ----------------------------------------------------------------------------------------
struct PadGeo {
  Dims out, in, in_st;
  Dims begin;          // begins of every dim (attribute form)
  IntsRef pads, axes;  // input form (pads.p set): begins read on the device
  int64_t n_pads = 0;  // entries of pads read (one per axis)
  int mode = 0;
};

// Begin pads of every dim: the attribute's, or those of the pads/axes inputs.
CB_HOST_DEVICE inline void pad_begins(const PadGeo& g, int64_t* begin) {
  const int r = g.in.rank;
  if (!g.pads.p) {
    for (int d = 0; d < r; ++d) begin[d] = g.begin.d[d];
    return;
  }
  for (int d = 0; d < r; ++d) begin[d] = 0;
  for (int64_t i = 0; i < g.n_pads; ++i) {
    int64_t ax = i;
    if (g.axes.p) {
      ax = g.axes[i];
      if (ax < 0) ax += r;
    }
    begin[ax] = g.pads[i];
  }
}

template <class E>
void pad_t(const KernelArgs& a, const GpuCtx& c, PadGeo g) {
  const auto& p = a.p<ops::PadParams>();
  const E* x = a.in[0].ptr<const E>();
  E* y = a.out[0].ptr<E>();
  const E host_value = geom::cast_bits<E>(a.in[0].dtype, p.value);
  const E* value_ptr =
      !p.pads && a.in.size() > 2 && a.in[2].present() ? a.in[2].ptr<const E>() : nullptr;
  parallel_for(c, a.out[0].numel(), [=] CB_HOST_DEVICE(int64_t i) {
    int64_t begin[kMaxRank];
    pad_begins(g, begin);
    int64_t off = 0, rem = i;
    bool outside = false;
    for (int d = g.out.rank - 1; d >= 0; --d) {
      const int64_t o = rem % g.out.d[d];
      rem /= g.out.d[d];
      const int64_t s = geom::pad_source(g.mode, g.in.d[d], begin[d], o);
      outside |= s < 0;
      off += s * g.in_st.d[d];
    }
    y[i] = !outside ? x[off] : value_ptr ? value_ptr[0] : host_value;
  });
}

void Pad(const KernelArgs& a, const GpuCtx& c) {
  const auto& p = a.p<ops::PadParams>();
  const TensorView &in = a.in[0], &out = a.out[0];
  const size_t r = in.dims.size();
  check_rank("Pad", r);
  if (out.numel() == 0) return;
  PadGeo g;
  g.out = dims_of(out.dims);
  g.in = dims_of(in.dims);
  g.in_st = contiguous_strides(g.in);
  g.mode = geom::pad_mode(p);
  g.begin.rank = static_cast<int>(r);
  if (p.pads) {
    CB_CHECK(p.pads->size() >= r);
    for (size_t d = 0; d < r; ++d) g.begin.d[d] = (*p.pads)[d];
  } else {
    const bool has_axes = a.in.size() > 3 && a.in[3].present();
    g.pads = ints_ref("Pad", a.in[1]);
    if (has_axes) g.axes = ints_ref("Pad", a.in[3]);
    g.n_pads = has_axes ? a.in[3].numel() : static_cast<int64_t>(r);
  }
  CB_DM_DISPATCH_BYTES(in.dtype, "Pad", pad_t, a, c, g)
}

constexpr GpuKernel kKernels[] = {
    {OpKind::Concat, &Concat, kAll},
    {OpKind::Constant, &Constant, kAll},
    {OpKind::ConstantOfShape, &ConstantOfShape, kAll},
    {OpKind::Expand, &Expand, kAll},
    {OpKind::Flatten, &Flatten, kAll},
    {OpKind::Gather, &Gather, kAll},
    {OpKind::Identity, &Identity, kAll},
    {OpKind::Pad, &Pad, kAll},
    {OpKind::Range, &Range, kNumeric},
    {OpKind::Reshape, &Reshape, kAll},
    {OpKind::Shape, &Shape, kAll},
    {OpKind::Slice, &Slice, kAll},
    {OpKind::Split, &Split, kAll},
    {OpKind::Squeeze, &Squeeze, kAll},
    {OpKind::Tile, &Tile, kAll},
    {OpKind::Transpose, &Transpose, kAll},
    {OpKind::LayoutReorder, &LayoutReorder, kFloat},
    {OpKind::Unsqueeze, &Unsqueeze, kAll},
};
}  // namespace

std::span<const GpuKernel> data_movement_kernels() { return kKernels; }

}  // namespace cb::CB_GPU_NS
