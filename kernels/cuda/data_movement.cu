// Data movement kernels of the CUDA backend (mirroring kernels/cpu/data_movement.cpp,
// data_movement_grad.cpp and resize.cpp): ops that move elements, one thread per element written.
// Conventions:
//   - byte-moving kernels dispatch on the element size only (1/2/4/8-byte unsigned ints), so they
//     cover every dtype;
//   - reshape-likes (Identity, Reshape, Flatten, Squeeze, Unsqueeze) copy device to device only
//     when output and input are distinct buffers;
//   - Transpose, Slice and Expand are one strided copy out[i...] = in[base + sum_d i_d * st_d]
//     (dims of 1 dropped and contiguous runs merged first);
//   - host data (a Constant's value, Shape's dims) goes to the device with copy_from_host; small
//     inputs in device memory (Pad's pads/axes/value, Range's start/delta, Split's sizes) are read
//     by the kernel bodies, never by the host;
//   - gradients that scatter (GatherGrad with many indices, PadGrad, ResizeGrad) zero their output
//     and atomic_add; GatherGrad with few indices gathers per output (deterministic, no atomics).
// Out-of-range Gather/GatherGrad indices (an error on the CPU, which checks them on the host) are
// not checked here: Gather writes zeros for them and GatherGrad drops them.
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/common/scalar_math.h"
#include "kernels/cuda/launch.h"
#include "runtime/error.h"
#include "runtime/ops/params.h"

namespace cb::CB_GPU_NS {

namespace {

// fn<E>(args...) with E the unsigned integer type of dtype t's element size.
#define CB_DM_DISPATCH_BYTES(t, op, fn, ...)     \
  switch (dtype_size(t)) {                       \
    case 1:                                      \
      fn<uint8_t>(__VA_ARGS__);                  \
      break;                                     \
    case 2:                                      \
      fn<uint16_t>(__VA_ARGS__);                 \
      break;                                     \
    case 4:                                      \
      fn<uint32_t>(__VA_ARGS__);                 \
      break;                                     \
    case 8:                                      \
      fn<uint64_t>(__VA_ARGS__);                 \
      break;                                     \
    default:                                     \
      ::cb::CB_GPU_NS::unsupported_dtype(op, t); \
  }

void check_rank(const char* op, size_t rank) {
  if (rank > static_cast<size_t>(kMaxRank))
    fail("{}: the CUDA backend supports rank <= {}, got {}", op, kMaxRank, rank);
}

int64_t prod(const std::vector<int64_t>& dims, size_t b, size_t e) {
  int64_t p = 1;
  for (size_t i = b; i < e; ++i) p *= dims[i];
  return p;
}

// A small integer input in device memory (i32 or i64), read by kernel bodies.
struct IntsRef {
  const void* p = nullptr;
  bool i32 = false;
  CB_HOST_DEVICE int64_t operator[](int64_t i) const {
    return i32 ? static_cast<const int32_t*>(p)[i] : static_cast<const int64_t*>(p)[i];
  }
};
IntsRef ints_ref(const char* op, const TensorView& v) {
  if (v.dtype != DType::I64 && v.dtype != DType::I32)
    fail("{}: integer input must be i32 or i64, got {}", op, dtype_name(v.dtype));
  return {v.data, v.dtype == DType::I32};
}

// ---- strided copies -----------------------------------------------------------------------------
struct Strided {
  Dims dims, strides;
  int64_t base = 0;
};

// Drops dims of size 1 and merges runs whose strides are contiguous with each other.
Strided collapse(const std::vector<int64_t>& dims, const int64_t* strides, int64_t base) {
  Strided s;
  s.base = base;
  int r = 0;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 1) continue;
    if (r > 0 && s.strides.d[r - 1] == strides[d] * dims[d]) {
      s.dims.d[r - 1] *= dims[d];
      s.strides.d[r - 1] = strides[d];
      continue;
    }
    s.dims.d[r] = dims[d];
    s.strides.d[r] = strides[d];
    ++r;
  }
  if (r == 0) s.dims.d[0] = 1, s.strides.d[0] = 1, r = 1;
  s.dims.rank = s.strides.rank = r;
  return s;
}

template <class E>
void strided_copy_t(const GpuCtx& c, const void* in, void* out, int64_t n, Strided s) {
  const E* x = static_cast<const E*>(in);
  E* y = static_cast<E*>(out);
  if (s.dims.rank == 1 && s.strides.d[0] == 1) {  // one contiguous run
    copy_device(c, y, x + s.base, static_cast<size_t>(n) * sizeof(E));
    return;
  }
  const Dims d = s.dims, st = s.strides;
  const int64_t base = s.base;
  parallel_for(c, n, [=] CB_HOST_DEVICE(int64_t i) { y[i] = x[base + offset_of(i, d, st)]; });
}

// out (its dims) from in with per-output-dim element strides `strides` and offset `base`.
void strided_copy(const GpuCtx& c, const char* op, const TensorView& in, const TensorView& out,
                  const int64_t* strides, int64_t base) {
  const int64_t n = out.numel();
  if (n == 0) return;
  check_rank(op, out.dims.size());
  const Strided s = collapse(out.dims, strides, base);
  CB_DM_DISPATCH_BYTES(out.dtype, op, strided_copy_t, c, in.data, out.data, n, s)
}

void contiguous(const std::vector<int64_t>& dims, int64_t* st) {
  int64_t acc = 1;
  for (size_t d = dims.size(); d-- > 0;) {
    st[d] = acc;
    acc *= dims[d];
  }
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

// ---- Transpose, Expand, Slice, Tile -------------------------------------------------------------
void Transpose(const KernelArgs& a, const GpuCtx& c) {
  const auto& perm = a.p<ops::TransposeParams>().perm;
  check_rank("Transpose", a.in[0].dims.size());
  CB_CHECK(perm.size() == a.in[0].dims.size());
  int64_t in_st[kMaxRank], st[kMaxRank];
  contiguous(a.in[0].dims, in_st);
  for (size_t i = 0; i < perm.size(); ++i) st[i] = in_st[perm[i]];
  strided_copy(c, "Transpose", a.in[0], a.out[0], st, 0);
}

void Expand(const KernelArgs& a, const GpuCtx& c) {
  const TensorView &in = a.in[0], &out = a.out[0];
  check_rank("Expand", out.dims.size());
  CB_CHECK(in.rank() <= out.rank());
  int64_t in_st[kMaxRank], st[kMaxRank];
  contiguous(in.dims, in_st);
  const int64_t shift = out.rank() - in.rank();
  for (int64_t d = 0; d < out.rank(); ++d) {
    const int64_t k = d - shift;
    st[d] = (k < 0 || in.dims[static_cast<size_t>(k)] == 1) ? 0 : in_st[k];
  }
  strided_copy(c, "Expand", in, out, st, 0);
}

// Slice: params dim_start / dim_step (resolved by infer()) per input dim.
void Slice(const KernelArgs& a, const GpuCtx& c) {
  const auto& p = a.p<ops::SliceParams>();
  const TensorView &in = a.in[0], &out = a.out[0];
  const size_t r = in.dims.size();
  check_rank("Slice", r);
  CB_CHECK(p.dim_start.size() == r && p.dim_step.size() == r);
  int64_t st[kMaxRank], base = 0;
  contiguous(in.dims, st);
  for (size_t d = 0; d < r; ++d) {
    base += p.dim_start[d] * st[d];
    st[d] *= p.dim_step[d];
  }
  strided_copy(c, "Slice", in, out, st, base);
}

// Tile: out[i...] = in[i_d mod d_d ...].
template <class E>
void tile_t(const GpuCtx& c, const TensorView& in, const TensorView& out) {
  const E* x = in.ptr<const E>();
  E* y = out.ptr<E>();
  const Dims od = dims_of(out.dims), id = dims_of(in.dims), ist = contiguous_strides(id);
  parallel_for(c, out.numel(), [=] CB_HOST_DEVICE(int64_t i) {
    int64_t off = 0, rem = i;
    for (int k = od.rank - 1; k >= 0; --k) {
      const int64_t q = rem % od.d[k];
      rem /= od.d[k];
      off += (q % id.d[k]) * ist.d[k];
    }
    y[i] = x[off];
  });
}

void Tile(const KernelArgs& a, const GpuCtx& c) {
  const TensorView &in = a.in[0], &out = a.out[0];
  if (out.numel() == 0) return;
  check_rank("Tile", out.dims.size());
  CB_CHECK(in.rank() == out.rank());
  CB_DM_DISPATCH_BYTES(out.dtype, "Tile", tile_t, c, in, out)
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
// out of range give zeros.
template <class E>
void gather_t(const GpuCtx& c, const TensorView& data, IntsRef idx, const TensorView& out,
              int64_t n, int64_t ni, int64_t inner) {
  const E* x = data.ptr<const E>();
  E* y = out.ptr<E>();
  parallel_for(c, out.numel(), [=] CB_HOST_DEVICE(int64_t i) {
    const int64_t j = i % inner, t = i / inner, k = t % ni, o = t / ni;
    int64_t r = idx[k];
    if (r < 0) r += n;
    y[i] = (r >= 0 && r < n) ? x[(o * n + r) * inner + j] : E(0);
  });
}

void Gather(const KernelArgs& a, const GpuCtx& c) {
  const TensorView &data = a.in[0], &idx = a.in[1], &out = a.out[0];
  const auto axis = static_cast<size_t>(a.p<ops::GatherParams>().axis);
  CB_CHECK(axis < data.dims.size());
  if (out.numel() == 0) return;
  const int64_t n = data.dims[axis], inner = prod(data.dims, axis + 1, data.dims.size());
  CB_DM_DISPATCH_BYTES(data.dtype, "Gather", gather_t, c, data, ints_ref("Gather", idx), out, n,
                       idx.numel(), inner)
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
// Pad's source index along a dim of n elements for output index o with `begin` padding in front, or
// -1 (the constant). mode: 0 constant, 1 reflect, 2 edge (kernels/cpu/separable.h).
CB_HOST_DEVICE inline int64_t pad_source(int mode, int64_t n, int64_t begin, int64_t o) {
  const int64_t i = o - begin;
  if (i >= 0 && i < n) return i;
  if (mode == 0 || n == 0) return -1;
  if (mode == 2) return i < 0 ? 0 : n - 1;
  if (n == 1) return 0;
  const int64_t period = 2 * (n - 1), m = ((i % period) + period) % period;
  return m < n ? m : period - m;
}

int pad_mode(const ops::PadParams& p) {
  return p.mode == ops::PadParams::Mode::Reflect ? 1 : p.mode == ops::PadParams::Mode::Edge ? 2 : 0;
}

// The element bits of the float attribute `v` in dtype t (the CPU's Cast rules: f16/bf16 through
// f32, float -> int saturates, NaN -> 0).
template <class I>
int64_t saturate(float v) {
  if (std::isnan(v)) return 0;
  if (v <= static_cast<float>(std::numeric_limits<I>::lowest()))
    return std::numeric_limits<I>::lowest();
  if (v >= static_cast<float>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return static_cast<int64_t>(static_cast<I>(v));
}
template <class E>
E value_bits(DType t, float v) {
  unsigned char b[8] = {};
  auto put = [&](auto x) { std::memcpy(b, &x, sizeof(x)); };
  switch (t) {
    case DType::F32:
      put(v);
      break;
    case DType::F64:
      put(static_cast<double>(v));
      break;
    case DType::F16:
      put(math::f32_to_f16(v));
      break;
    case DType::BF16:
      put(math::f32_to_bf16(v));
      break;
    case DType::I64:
      put(saturate<int64_t>(v));
      break;
    case DType::I32:
      put(static_cast<int32_t>(saturate<int32_t>(v)));
      break;
    case DType::I8:
      put(static_cast<int8_t>(saturate<int8_t>(v)));
      break;
    case DType::U8:
      put(static_cast<uint8_t>(saturate<uint8_t>(v)));
      break;
    case DType::Bool:
      put(static_cast<uint8_t>(v != 0));
      break;
  }
  E e;
  std::memcpy(&e, b, sizeof(E));
  return e;
}

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
  const E host_value = value_bits<E>(a.in[0].dtype, p.value);
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
      const int64_t s = pad_source(g.mode, g.in.d[d], begin[d], o);
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
  g.mode = pad_mode(p);
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

// ---- gradients ----------------------------------------------------------------------------------
// GatherGrad(dY [outer, ni, inner], indices [ni], data_shape) -> dX [outer, n, inner]: dX[o,
// idx[k], j] += dY[o, k, j]. With few indices each dX element sums its own contributions in index
// order (deterministic, the CPU's order); else dX is zeroed and dY scattered with atomic adds.
constexpr int64_t kGatherGradLoopMax = 16;

template <class T>
void gather_grad_t(const KernelArgs& a, const GpuCtx& c, IntsRef idx, int64_t n, int64_t inner,
                   int64_t ni) {
  const T* g = a.in[0].ptr<const T>();
  T* dx = a.out[0].ptr<T>();
  if (ni <= kGatherGradLoopMax) {
    parallel_for(c, a.out[0].numel(), [=] CB_HOST_DEVICE(int64_t i) {
      const int64_t j = i % inner, t = i / inner, r = t % n, o = t / n;
      T acc = T(0);
      for (int64_t k = 0; k < ni; ++k) {
        int64_t q = idx[k];
        if (q < 0) q += n;
        if (q == r) acc += g[(o * ni + k) * inner + j];
      }
      dx[i] = acc;
    });
    return;
  }
  fill_zero(c, dx, a.out[0].bytes());
  parallel_for(c, a.in[0].numel(), [=] CB_HOST_DEVICE(int64_t i) {
    const int64_t j = i % inner, t = i / inner, k = t % ni, o = t / ni;
    int64_t r = idx[k];
    if (r < 0) r += n;
    if (r >= 0 && r < n) atomic_add(dx + (o * n + r) * inner + j, g[i]);
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
                        inner, ni)
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
  const auto& p = a.p<ops::SliceParams>();
  const TensorView &dy = a.in[0], &dx = a.out[0];
  const size_t r = dx.dims.size();
  check_rank("SliceGrad", r);
  CB_CHECK(dy.dims.size() == r && p.dim_start.size() == r && p.dim_step.size() == r);
  Dims st;
  st.rank = static_cast<int>(r);
  int64_t base = 0, acc = 1;
  for (size_t d = r; d-- > 0;) {
    base += p.dim_start[d] * acc;
    st.d[d] = acc * p.dim_step[d];
    acc *= dx.dims[d];
  }
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
      const int64_t s = pad_source(mode, xd.d[d], begin.d[d], o);
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
  CB_GPU_DISPATCH_FLOAT(dx.dtype, "PadGrad", pad_grad_t, c, dy, dx, begin, pad_mode(p))
}

// ---- Resize, Upsample, ResizeGrad ---------------------------------------------------------------
// Per axis, the taps of an output index (source indices and weights) computed on the device, as
// kernels/cpu/resize.cpp computes them (coordinates and rounding of runtime/ops/resize.cpp):
// nearest one tap, linear the two neighbours (clamped), cubic four (Keys).
using RP = ops::ResizeParams;

struct ResizeGeo {
  Dims src, dst;  // the forward's input (X) and output (Y) dims
  Dims src_st;    // X's contiguous strides
  double scale[kMaxRank] = {};
  double cubic_a = -0.75;
  RP::Mode mode = RP::Mode::Nearest;
  RP::Coord coord = RP::Coord::HalfPixel;
  RP::Nearest nearest = RP::Nearest::RoundPreferFloor;
  bool exclude_outside = false;
};

CB_HOST_DEVICE inline double source_coord(const ResizeGeo& g, int64_t o, int64_t in, int64_t out,
                                          double s) {
  const double x = static_cast<double>(o);
  double len = static_cast<double>(in) * s;
  if (fabs(len - static_cast<double>(out)) < 1e-9 * (len > 1 ? len : 1.0))
    len = static_cast<double>(out);  // sizes given (s = out / in): exactly out
  switch (g.coord) {
    case RP::Coord::HalfPixel:
      return (x + 0.5) / s - 0.5;
    case RP::Coord::PytorchHalfPixel:
      return len > 1 ? (x + 0.5) / s - 0.5 : 0.0;
    case RP::Coord::AlignCorners:
      return len == 1 ? 0.0 : x * static_cast<double>(in - 1) / (len - 1);
    case RP::Coord::Asymmetric:
      return x / s;
    case RP::Coord::TfHalfPixelForNN:
      return (x + 0.5) / s;
  }
  return x;
}

CB_HOST_DEVICE inline int64_t nearest_index(const ResizeGeo& g, double x, double s) {
  switch (g.nearest) {
    case RP::Nearest::RoundPreferFloor:
      return static_cast<int64_t>(ceil(x - 0.5));
    case RP::Nearest::RoundPreferCeil:
      return static_cast<int64_t>(floor(x + 0.5));
    case RP::Nearest::Floor:
      return static_cast<int64_t>(floor(x));
    case RP::Nearest::Ceil:
      return static_cast<int64_t>(ceil(x));
    case RP::Nearest::Simple:
      return static_cast<int64_t>(s < 1 ? ceil(x) : floor(x));
  }
  return 0;
}

CB_HOST_DEVICE inline int64_t clamp_index(int64_t i, int64_t lo, int64_t hi) {
  return i < lo ? lo : hi < i ? hi : i;
}
// Keys' cubic weights: |d| <= 1 and 1 < |d| < 2.
CB_HOST_DEVICE inline double cubic_near(double a, double d) {
  return ((a + 2) * d - (a + 3)) * d * d + 1;
}
CB_HOST_DEVICE inline double cubic_far(double a, double d) {
  return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a;
}

// Taps of output index o along axis d (at most 4): source indices `idx`, weights `w`; returns
// their count.
CB_HOST_DEVICE inline int resize_taps(const ResizeGeo& g, int d, int64_t o, int64_t* idx,
                                      double* w) {
  const int64_t in = g.src.d[d], out = g.dst.d[d];
  const double s = g.scale[d];
  const double x = source_coord(g, o, in, out, s);
  if (g.mode == RP::Mode::Nearest) {
    idx[0] = clamp_index(nearest_index(g, x, s), 0, in - 1);
    w[0] = 1;
    return 1;
  }
  if (g.mode == RP::Mode::Cubic) {
    // As the ONNX reference: an integer x is taken as i0 = x - 1, f = 1; indices outside the input
    // repeat the edge, or with exclude_outside get weight 0 and the others are renormalised.
    const double a = g.cubic_a;
    auto i0 = static_cast<int64_t>(floor(x));
    double f = x - static_cast<double>(i0);
    if (f == 0) {
      f = 1;
      i0 -= 1;
    }
    const double cw[4] = {cubic_far(a, f + 1), cubic_near(a, f), cubic_near(a, 1 - f),
                          cubic_far(a, 2 - f)};
    double sum = 0;
    for (int k = 0; k < 4; ++k) {
      const int64_t i = i0 - 1 + k;
      if (!g.exclude_outside || (i >= 0 && i < in)) sum += cw[k];
    }
    int n = 0;
    for (int k = 0; k < 4; ++k) {
      const int64_t i = i0 - 1 + k;
      if (g.exclude_outside && (i < 0 || i >= in)) continue;
      idx[n] = clamp_index(i, 0, in - 1);
      w[n] = g.exclude_outside ? cw[k] / sum : cw[k];
      ++n;
    }
    return n;
  }
  const double hi = static_cast<double>(in - 1);
  const double cx = x < 0.0 ? 0.0 : hi < x ? hi : x;
  const auto i0 = static_cast<int64_t>(floor(cx));
  const double f = cx - static_cast<double>(i0);
  idx[0] = i0;
  w[0] = 1 - f;
  if (!(f > 0)) return 1;
  idx[1] = i0 + 1 < in - 1 ? i0 + 1 : in - 1;
  w[1] = f;
  return 2;
}

// The taps of every axis for output element i of Y; false when an axis has none.
struct ElemTaps {
  int64_t idx[kMaxRank][4];
  double w[kMaxRank][4];
  int n[kMaxRank];
};
CB_HOST_DEVICE inline bool elem_taps(const ResizeGeo& g, int64_t i, ElemTaps& t) {
  bool any = true;
  for (int d = g.dst.rank - 1; d >= 0; --d) {
    const int64_t o = i % g.dst.d[d];
    i /= g.dst.d[d];
    t.n[d] = resize_taps(g, d, o, t.idx[d], t.w[d]);
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
  g.cubic_a = p.cubic_a;
  g.mode = p.mode;
  g.coord = p.coord;
  g.nearest = p.nearest;
  g.exclude_outside = p.exclude_outside;
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

// dX = taps^T(dY): zeroed, then each dY element scattered to its taps (atomic adds).
template <class T>
void resize_grad_t(const KernelArgs& a, const GpuCtx& c, ResizeGeo g) {
  const T* dy = a.in[0].ptr<const T>();
  T* dx = a.out[0].ptr<T>();
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
    {OpKind::Resize, &Resize, kFloat},
    {OpKind::Shape, &Shape, kAll},
    {OpKind::Slice, &Slice, kAll},
    {OpKind::Split, &Split, kAll},
    {OpKind::Squeeze, &Squeeze, kAll},
    {OpKind::Tile, &Tile, kAll},
    {OpKind::Transpose, &Transpose, kAll},
    {OpKind::Unsqueeze, &Unsqueeze, kAll},
    {OpKind::Upsample, &Resize, kFloat},
    {OpKind::GatherGrad, &GatherGrad, kFloat},
    {OpKind::PadGrad, &PadGrad, kFloat},
    {OpKind::ResizeGrad, &ResizeGrad, kFloat},
    {OpKind::SliceGrad, &SliceGrad, kFloat},
};
}  // namespace

std::span<const GpuKernel> data_movement_kernels() { return kKernels; }

}  // namespace cb::CB_GPU_NS
