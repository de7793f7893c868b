// Data movement kernels: ops that move or convert elements without arithmetic on them.
// Convention: byte-moving kernels dispatch on the element size only, so they cover every dtype.
// Reshape-likes (Identity, Reshape, Flatten, Squeeze, Unsqueeze) copy only when the planner did
// not alias output and input. Transpose, Slice and Expand are one strided copy: out[i...] =
// in[base + sum_d i_d * stride_d] (strides may be 0 to broadcast or negative to step back).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/common/geometry.h"
#include "kernels/common/kernel_errors.h"
#include "kernels/common/scalar_math.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/storage.h"
#include "runtime/copy_bytes.h"
#include "runtime/ops/params.h"

namespace cb::cpu {

namespace {
using geom::contiguous_strides;
using geom::prod;
constexpr int kMaxRank = geom::kMaxStridedRank;

// Elements [begin, end) of the strided copy; D other than E: f32 rounded to bf16 bits as it goes
// (a Transpose whose output is stored as bf16, Value::bf16_storage).
template <class E, class D = E>
void strided_range(const geom::StridedPlan& s, const E* in, D* out, int64_t begin, int64_t end) {
  const int r = s.rank;
  int64_t idx[kMaxRank], off = s.base, rem = begin;
  for (int d = r - 1; d >= 0; --d) {
    idx[d] = rem % s.dims[d];
    rem /= s.dims[d];
  }
  for (int d = 0; d < r - 1; ++d) off += idx[d] * s.strides[d];
  const int64_t inner = s.dims[r - 1], st = s.strides[r - 1];
  for (int64_t pos = begin; pos < end;) {
    int64_t i0 = idx[r - 1], n = std::min(inner - i0, end - pos);
    const E* src = in + off + i0 * st;
    D* dst = out + pos;
    if constexpr (!std::is_same_v<E, D>) {
      static_assert(std::is_same_v<E, float> && std::is_same_v<D, uint16_t>);
      if (st == 1)
        round_bf16(src, n, 1, n, dst);
      else
        for (int64_t k = 0; k < n; ++k) store_s(dst, k, src[k * st]);
    } else if (st == 1) {
      copy_bytes(dst, src, static_cast<size_t>(n) * sizeof(E));
    } else if (st == 0) {
      std::fill(dst, dst + n, *src);
    } else {
      for (int64_t k = 0; k < n; ++k) dst[k] = src[k * st];
    }
    pos += n;
    idx[r - 1] = 0;
    for (int d = r - 2; d >= 0; --d) {
      off += s.strides[d];
      if (++idx[d] < s.dims[d]) break;
      off -= idx[d] * s.strides[d];
      idx[d] = 0;
    }
  }
}

// out (dims out.dims) from in with per-output-dim element strides `strides` and offset `base`.
void strided_copy(const KernelArgs& a, const TensorView& in, const TensorView& out,
                  const int64_t* strides, int64_t base) {
  int64_t n = out.numel();
  if (n == 0) return;
  const geom::StridedPlan s = geom::collapse_strided("data movement", out.dims, strides, base);
  if (out.bf16_storage) {  // only Transpose writes such a value (assign_bf16_operands)
    CB_CHECK(in.dtype == DType::F32 && out.dtype == DType::F32 && !in.bf16_storage && !in.blocked &&
             !out.blocked);
    const float* src = in.ptr<const float>();
    auto* dst = static_cast<uint16_t*>(out.data);
    parallel(n, 1, [&](int64_t b, int64_t e) { strided_range(s, src, dst, b, e); });
    return;
  }
  dispatch_bytes(out.dtype, [&]<class E>(Tag<E>) {
    const E* src = in.ptr<const E>();
    E* dst = out.ptr<E>();
    parallel(n, 1, [&](int64_t b, int64_t e) { strided_range(s, src, dst, b, e); });
  });
}

// Cast's element conversion: math::cast_load / cast_store (kernels/common/scalar_math.h).
using F16 = math::F16Bits;
using BF16 = math::BF16Bits;
template <class F>
void dispatch_all(DType t, F&& f) {
  if (t == DType::F16) return f(Tag<F16>{});
  if (t == DType::BF16) return f(Tag<BF16>{});
  dispatch_numeric(t, std::forward<F>(f), true);
}
}  // namespace

// ---- reshape-likes: same bytes, new dims ----
void Identity(const KernelArgs& a) { copy_if_distinct(a.in[0], a.out[0]); }
void Reshape(const KernelArgs& a) { copy_if_distinct(a.in[0], a.out[0]); }
void Flatten(const KernelArgs& a) { copy_if_distinct(a.in[0], a.out[0]); }
void Squeeze(const KernelArgs& a) { copy_if_distinct(a.in[0], a.out[0]); }
void Unsqueeze(const KernelArgs& a) { copy_if_distinct(a.in[0], a.out[0]); }

// Transpose: [d_0..d_r) -> [d_perm[0]..d_perm[r-1]]
void Transpose(const KernelArgs& a) {
  int64_t st[kMaxRank] = {};
  geom::transpose_strides("Transpose", a.p<ops::TransposeParams>(), a.in[0].dims, st);
  strided_copy(a, a.in[0], a.out[0], st, 0);
}

// LayoutReorder: plain [N, C, H, W] <-> oneDNN's nChw16c, one strided copy over the output's
// 5-D memory order.
void LayoutReorder(const KernelArgs& a) {
  const TensorView &in = a.in[0], &out0 = a.out[0];
  const bool to_blocked = a.p<ops::LayoutParams>().to_blocked;
  if (in.bf16_storage || out0.bf16_storage) {  // the blocked side stored as bf16: convert too
    CB_CHECK(to_blocked ? out0.bf16_storage && !in.bf16_storage
                        : in.bf16_storage && !out0.bf16_storage);
    const int64_t n = in.dims[0], c = in.dims[1], hw = in.dims[2] * in.dims[3], cb = c / 16;
    const float* src = static_cast<const float*>(in.data);
    float* dst = static_cast<float*>(out0.data);
    const uint16_t* bsrc = static_cast<const uint16_t*>(in.data);
    uint16_t* bdst = static_cast<uint16_t*>(out0.data);
    parallel(n * cb, 16 * hw, [&](int64_t p0, int64_t p1) {
      for (int64_t pl = p0; pl < p1; ++pl) {  // one block of 16 channels of one sample
        const int64_t plain0 = (pl / cb * c + pl % cb * 16) * hw, blocked0 = pl * hw * 16;
        for (int64_t q = 0; q < hw; ++q)
          for (int64_t l = 0; l < 16; ++l) {
            const int64_t pi = plain0 + l * hw + q, bi = blocked0 + q * 16 + l;
            if (to_blocked)
              store_s(bdst, bi, src[pi]);
            else
              dst[pi] = load_s(bsrc, bi);
          }
      }
    });
    return;
  }
  int64_t st[kMaxRank] = {};
  TensorView out = out0;
  out.dims = geom::layout_reorder_strides(in.dims, to_blocked, st);
  strided_copy(a, in, out, st, 0);
}

// Expand: [a...] -> broadcast([a...], shape) (a 1 in X repeats along the output dim).
void Expand(const KernelArgs& a) {
  const TensorView &in = a.in[0], &out = a.out[0];
  int64_t st[kMaxRank] = {};
  geom::expand_strides("Expand", in.dims, out.dims.size(), st);
  strided_copy(a, in, out, st, 0);
}

// Tile: [d...] -> [r_i * d_i...]: the output viewed as [r_0, d_0, r_1, d_1, ...] (dims with r_i = 1
// not split) is a strided copy of the input with stride 0 along each r_i.
void Tile(const KernelArgs& a) {
  const TensorView &in = a.in[0], &out = a.out[0];
  if (out.numel() == 0) return;
  int64_t st[kMaxRank] = {};
  TensorView view = out;
  geom::tile_view("Tile", in.dims, out.dims, view.dims, st);
  strided_copy(a, in, view, st, 0);
}

// Slice(data, starts, ends, axes?, steps?): infer() resolved the output dims and, per input dim,
// the first index taken and the step (params dim_start, dim_step).
void Slice(const KernelArgs& a) {
  const TensorView &in = a.in[0], &out = a.out[0];
  int64_t st[kMaxRank] = {};
  const int64_t base = geom::slice_strides("Slice", a.p<ops::SliceParams>(), in.dims, st);
  strided_copy(a, in, out, st, base);
}

// Concat: inputs [.., k_i, ..] along axis -> [.., sum k_i, ..]
void Concat(const KernelArgs& a) {
  const TensorView& out = a.out[0];
  auto axis = static_cast<size_t>(a.p<ops::ConcatParams>().axis);
  int64_t outer = prod(out.dims, 0, axis), es = static_cast<int64_t>(dtype_size(out.dtype));
  int64_t row = out.numel() / std::max<int64_t>(outer, 1) * es;  // bytes per outer index
  auto* dst = static_cast<std::byte*>(out.data);
  parallel(outer, row, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      int64_t at = o * row;
      for (const TensorView& in : a.in) {
        if (!in.present()) continue;
        int64_t chunk = in.numel() / std::max<int64_t>(outer, 1) * es;
        copy_bytes(dst + at, static_cast<const std::byte*>(in.data) + o * chunk,
                   static_cast<size_t>(chunk));  // an empty input may have null data
        at += chunk;
      }
    }
  });
}

// Split: [.., k, ..] -> outputs [.., k_i, ..] along axis (sizes from the outputs' dims).
void Split(const KernelArgs& a) {
  const TensorView& in = a.in[0];
  const auto& p = a.p<ops::SplitParams>();
  auto axis = static_cast<size_t>(p.axis);
  int64_t outer = prod(in.dims, 0, axis), es = static_cast<int64_t>(dtype_size(in.dtype));
  int64_t row = in.numel() / std::max<int64_t>(outer, 1) * es;
  const int64_t inner_bytes = prod(in.dims, axis + 1, in.dims.size()) * es;
  // Bytes per outer index of each output. An omitted output has no dims: its size along the axis
  // comes from the split attribute, the sizes input or the equal parts infer() resolved.
  const auto n_out = static_cast<int64_t>(a.out.size());
  std::vector<int64_t> chunk(a.out.size());
  for (int64_t k = 0; k < n_out; ++k) {
    const TensorView& out = a.out[static_cast<size_t>(k)];
    int64_t size = 0;
    if (out.present()) {
      size = out.dims[axis];
    } else if (p.split) {
      size = (*p.split)[static_cast<size_t>(k)];
    } else if (a.in.size() > 1 && a.in[1].present()) {
      size = int_at(a.in[1], k);
    } else {
      const int64_t d = in.dims[axis], part = (d + n_out - 1) / n_out;
      size = k == n_out - 1 ? d - part * (n_out - 1) : part;
    }
    chunk[static_cast<size_t>(k)] = size * inner_bytes;
  }
  const auto* src = static_cast<const std::byte*>(in.data);
  for (const TensorView& out : a.out)
    CB_CHECK(!out.bf16_storage || (in.dtype == DType::F32 && !in.bf16_storage && !in.blocked));
  parallel(outer, row, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      int64_t at = o * row;
      for (size_t k = 0; k < a.out.size(); ++k) {
        const TensorView& out = a.out[k];
        if (out.present() && out.bf16_storage) {  // only bf16 products read it: rounded
          const int64_t n = chunk[k] / static_cast<int64_t>(sizeof(float));
          round_bf16(reinterpret_cast<const float*>(src + at), n, 1, n,
                     static_cast<uint16_t*>(out.data) + o * n);
        } else if (out.present()) {
          copy_bytes(static_cast<std::byte*>(out.data) + o * chunk[k], src + at,
                     static_cast<size_t>(chunk[k]));
        }
        at += chunk[k];
      }
    }
  });
}

// Gather(data [.., n, ..], indices [i...]) along axis -> [.., i..., ..]; negative indices count
// from the end; an index out of range is an error naming it.
void Gather(const KernelArgs& a) {
  const TensorView &data = a.in[0], &idx = a.in[1], &out = a.out[0];
  auto axis = static_cast<size_t>(a.p<ops::GatherParams>().axis);
  int64_t outer = prod(data.dims, 0, axis), n = data.dims[axis];
  int64_t inner_bytes =
      prod(data.dims, axis + 1, data.dims.size()) * static_cast<int64_t>(dtype_size(data.dtype));
  int64_t ni = idx.numel();
  for (int64_t k = 0; k < ni; ++k) {
    int64_t j = int_at(idx, k);
    if (j < -n || j >= n)
      throw Error(index_out_of_range("Gather", j, static_cast<int64_t>(axis), n));
  }
  const auto* src = static_cast<const std::byte*>(data.data);
  auto* dst = static_cast<std::byte*>(out.data);
  parallel(outer, ni * inner_bytes, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o)
      for (int64_t k = 0; k < ni; ++k) {
        int64_t j = int_at(idx, k);
        if (j < 0) j += n;
        copy_bytes(dst + (o * ni + k) * inner_bytes, src + (o * n + j) * inner_bytes,
                   static_cast<size_t>(inner_bytes));
      }
  });
}

// Cast: any dtype -> params.to, elementwise.
void Cast(const KernelArgs& a) {
  const TensorView &in = a.in[0], &out = a.out[0];
  if (in.dtype == out.dtype) return copy_if_distinct(in, out);
  int64_t n = in.numel();
  dispatch_all(in.dtype, [&]<class S>(Tag<S>) {
    dispatch_all(out.dtype, [&]<class D>(Tag<D>) {
      const S* s = in.ptr<const S>();
      D* d = out.ptr<D>();
      parallel(n, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) d[i] = math::cast_store<D>(math::cast_load(s[i]));
      });
    });
  });
}

// Shape: [d...] -> i64 [end - start] (the input's dims; only the input's dims are read).
void Shape(const KernelArgs& a) {
  const auto& p = a.p<ops::ShapeParams>();
  int64_t r = a.in[0].rank();
  auto clamp = [r](int64_t x) { return std::clamp<int64_t>(x < 0 ? x + r : x, 0, r); };
  int64_t b = clamp(p.start), e = clamp(p.end.value_or(r));
  for (int64_t i = b; i < e; ++i)
    a.out[0].ptr<int64_t>()[i - b] = a.in[0].dims[static_cast<size_t>(i)];
}

// Constant: the params' tensor. ConstantOfShape: [shape] filled with the params' one value.
void Constant(const KernelArgs& a) {
  const Tensor& v = *a.p<ops::ConstantParams>().value;
  const size_t n = std::min(v.bytes.size(), a.out[0].bytes());
  copy_bytes(a.out[0].data, v.bytes.data(), n);
}
void ConstantOfShape(const KernelArgs& a) {
  const Tensor& v = *a.p<ops::ConstantParams>().value;
  dispatch_bytes(a.out[0].dtype, [&]<class E>(Tag<E>) {
    E x;
    std::memcpy(&x, v.bytes.data(), sizeof(E));
    std::fill(a.out[0].ptr<E>(), a.out[0].ptr<E>() + a.out[0].numel(), x);
  });
}

// Range(start, limit, delta) -> [n]: out[i] = start + i * delta (n resolved by infer()).
void Range(const KernelArgs& a) {
  dispatch_numeric(a.out[0].dtype, [&]<class T>(Tag<T>) {
    T start = read_scalar<T>(a.in[0]), delta = read_scalar<T>(a.in[2]);
    T* o = a.out[0].ptr<T>();
    for (int64_t i = 0; i < a.out[0].numel(); ++i)
      o[i] = static_cast<T>(start + static_cast<T>(i) * delta);
  });
}

// Pad(data, pads, value?, axes?) -> [d_i + begin_i + end_i]; modes constant, reflect (mirror
// without repeating the edge), edge (repeat the edge). Negative pads crop.
void Pad(const KernelArgs& a) {
  const auto& p = a.p<ops::PadParams>();
  const TensorView &in = a.in[0], &out = a.out[0];
  const int64_t r = in.rank();
  CB_CHECK(r <= kMaxRank);
  int64_t begin[kMaxRank] = {};
  if (p.pads) {
    for (int64_t d = 0; d < r; ++d) begin[d] = (*p.pads)[static_cast<size_t>(d)];
  } else {
    bool has_axes = a.in.size() > 3 && a.in[3].present();
    int64_t na = has_axes ? a.in[3].numel() : r;
    for (int64_t i = 0; i < na; ++i)
      begin[has_axes ? norm_axis(int_at(a.in[3], i), r) : i] = int_at(a.in[1], i);
  }
  const int mode = geom::pad_mode(p);
  // Input coordinate of output coordinate o along d, or -1 (constant padding).
  auto src = [&](int64_t d, int64_t o) -> int64_t {
    return geom::pad_source(mode, in.dims[static_cast<size_t>(d)], begin[d], o);
  };
  int64_t in_st[kMaxRank];
  contiguous_strides(in.dims, in_st);
  const int64_t inner = r > 0 ? out.dims.back() : 1,
                rows = out.numel() / std::max<int64_t>(inner, 1);
  if (out.numel() == 0) return;
  dispatch_all(in.dtype, [&]<class T>(Tag<T>) {
    T value{};
    if (!p.pads && a.in.size() > 2 && a.in[2].present())
      std::memcpy(&value, a.in[2].data, sizeof(T));
    else
      value = math::cast_store<T>(p.value);
    const T* x = in.ptr<const T>();
    T* y = out.ptr<T>();
    parallel(rows, inner, [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        int64_t off = 0, rem = row;
        bool outside = false;
        for (int64_t d = r - 2; d >= 0; --d) {
          int64_t o = rem % out.dims[static_cast<size_t>(d)];
          rem /= out.dims[static_cast<size_t>(d)];
          int64_t s = src(d, o);
          outside |= s < 0;
          off += s * in_st[d];
        }
        T* dst = y + row * inner;
        if (outside) {
          std::fill(dst, dst + inner, value);
          continue;
        }
        for (int64_t o = 0; o < inner; ++o) {
          int64_t s = r > 0 ? src(r - 1, o) : 0;
          dst[o] = s < 0 ? value : x[off + s];
        }
      }
    });
  });
}

}  // namespace cb::cpu
