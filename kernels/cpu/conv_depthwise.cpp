// ConvGrad of a depthwise 3x3 convolution (MobileNet's: one filter per channel, stride 1 or 2,
// padding 1) on values in the blocked layout [N, C/16, H, W, 16] (TensorView::blocked): dX and
// dW in one pass over each (sample, block) plane, the 16 channels of a block side by side as one
// 64-byte vector. oneDNN runs the two as separate primitives, each reading dY; here dY, X and dX
// each cross memory once, and both gradients are gathered (every dX element is written once,
// never accumulated), so a plane stays in the core's caches between the rows it touches.
//   dX[ih, iw] = sum over (kh, kw) with ih = oh*s - 1 + kh, iw = ow*s - 1 + kw of
//                dY[oh, ow] * W[kh, kw],
//   dW[kh, kw] = sum over n, oh, ow of X[oh*s - 1 + kh, ow*s - 1 + kw] * dY[oh, ow].
// dW is summed per (sample, block) in f32, the samples' sums then in sample order: the same bits
// for any thread count. (A forward written the same way was no faster than oneDNN's: Conv stays
// with oneDNN.)
#include <algorithm>
#include <cstdint>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/plane_sum.h"
#include "runtime/ops/params.h"

namespace cb::cpu {

namespace {

typedef float V16 __attribute__((vector_size(64)));  // one position's 16 channels
// The same, at any float's alignment, allowed to alias floats: loads and stores through it.
typedef float V16u __attribute__((vector_size(64), aligned(4), may_alias));

CB_STAT_INLINE inline const V16u& at16(const float* p) { return *reinterpret_cast<const V16u*>(p); }
CB_STAT_INLINE inline V16u& at16(float* p) { return *reinterpret_cast<V16u*>(p); }

struct Plane {
  int64_t h, w, oh, ow, s;  // input and output sizes, the stride (1 or 2)
};

// dW's sums over dY row dyr, acc[kh * 3 + kw] += sum over o of X[ih][o*s - 1 + kw] * dY[r][o]
// with xr[kh] X's row ih = r*s - 1 + kh (null outside X: padding). Each of the nine sums runs
// over o in order in its own register (a row's total, then into acc): nine independent chains of
// adds, where three taps a pass over the row left the adds' latency exposed.
CB_STAT_INLINE inline void dw_row(const float* const xr[3], const float* dyr, const Plane& g,
                                  V16 acc[9]) {
  V16 a[9];
  for (int k = 0; k < 9; ++k) a[k] = V16{};
  auto edge = [&](int64_t o) CB_STAT_INLINE {  // any o: every tap checked
    const V16 d = at16(dyr + o * 16);
    for (int kh = 0; kh < 3; ++kh)
      for (int kw = 0; kw < 3; ++kw) {
        const int64_t iw = o * g.s - 1 + kw;
        if (xr[kh] && iw >= 0 && iw < g.w) a[kh * 3 + kw] += at16(xr[kh] + iw * 16) * d;
      }
  };
  // o in [1, o1): columns o*s - 1 .. o*s + 1 all inside X.
  const int64_t o1 = std::max<int64_t>(1, std::min(g.ow, (g.w - 2) / g.s + 1));
  if (g.ow > 0) edge(0);
  if (xr[0] && xr[1] && xr[2]) {
    for (int64_t o = 1; o < o1; ++o) {
      const V16 d = at16(dyr + o * 16);
      const int64_t c = (o * g.s - 1) * 16;
      for (int kh = 0; kh < 3; ++kh)
        for (int kw = 0; kw < 3; ++kw) a[kh * 3 + kw] += at16(xr[kh] + c + kw * 16) * d;
    }
  } else {
    for (int64_t o = 1; o < o1; ++o) edge(o);
  }
  for (int64_t o = o1; o < g.ow; ++o) edge(o);
  for (int k = 0; k < 9; ++k) acc[k] += a[k];
}

// dX row r at stride 1: dX[r][iw] = sum over kh (dY row r + 1 - kh, d[kh], null outside) and kw
// (dY column iw + 1 - kw) of dY * W[kh][kw], each element's nine products added in that order.
CB_STAT_INLINE inline void dx_row_s1(const float* const d[3], const V16 wk[9], const Plane& g,
                                     float* dxr) {
  auto edge = [&](int64_t iw) CB_STAT_INLINE {
    V16 a = {};
    for (int kh = 0; kh < 3; ++kh) {
      if (!d[kh]) continue;
      if (iw + 1 < g.ow) a += at16(d[kh] + (iw + 1) * 16) * wk[kh * 3];
      if (iw < g.ow) a += at16(d[kh] + iw * 16) * wk[kh * 3 + 1];
      if (iw >= 1 && iw - 1 < g.ow) a += at16(d[kh] + (iw - 1) * 16) * wk[kh * 3 + 2];
    }
    at16(dxr + iw * 16) = a;
  };
  // iw in [1, i1): columns iw - 1 .. iw + 1 of dY all inside, every row too.
  const int64_t i1 = d[0] && d[1] && d[2] ? std::max<int64_t>(1, std::min(g.w, g.ow - 1)) : 1;
  if (g.w > 0) edge(0);
  for (int64_t iw = 1; iw < i1; ++iw) {
    V16 a = {};
    for (int kh = 0; kh < 3; ++kh) {
      const float* q = d[kh] + (iw - 1) * 16;
      a += at16(q + 32) * wk[kh * 3];
      a += at16(q + 16) * wk[kh * 3 + 1];
      a += at16(q) * wk[kh * 3 + 2];
    }
    at16(dxr + iw * 16) = a;
  }
  for (int64_t iw = std::max<int64_t>(1, i1); iw < g.w; ++iw) edge(iw);
}

// dX row r at stride 2: dY row (r + 1 - kh) / 2 where r + 1 - kh is even (r even: kh = 1; odd:
// kh = 0, then 2), column (iw + 1 - kw) / 2 likewise (iw = 2q: kw = 1, column q; iw = 2q + 1:
// kw = 0, column q + 1, then kw = 2, column q), each element's products added in (kh, kw) order.
CB_STAT_INLINE inline void dx_row_s2(int64_t r, const float* dy, const V16 wk[9], const Plane& g,
                                     float* dxr) {
  const float* rows[2];
  int kh_of[2], nr = 0;
  for (int kh = 0; kh < 3; ++kh) {
    const int64_t t = r + 1 - kh;
    if (t < 0 || (t & 1) || t / 2 >= g.oh) continue;
    rows[nr] = dy + (t / 2) * g.ow * 16, kh_of[nr++] = kh;
  }
  for (int64_t q = 0; 2 * q < g.w; ++q) {
    V16 e = {};  // iw = 2q
    for (int i = 0; i < nr; ++i) e += at16(rows[i] + q * 16) * wk[kh_of[i] * 3 + 1];
    at16(dxr + 2 * q * 16) = e;
    if (2 * q + 1 >= g.w) break;
    V16 o = {};  // iw = 2q + 1
    for (int i = 0; i < nr; ++i) {
      if (q + 1 < g.ow) o += at16(rows[i] + (q + 1) * 16) * wk[kh_of[i] * 3];
      o += at16(rows[i] + q * 16) * wk[kh_of[i] * 3 + 2];
    }
    at16(dxr + (2 * q + 1) * 16) = o;
  }
}

// One (sample, block) plane: x [H, W, 16], dy [OH, OW, 16], w [9][16] (the block's filters);
// dx [H, W, 16] assigned (when not null), dw [9][16] assigned with this plane's sums (when not
// null). Row r of dY and row r of dX are done together, so that the rows they read (dY rows
// r - 1 .. r + 1, X rows r*s - 1 .. r*s + 1) are in cache.
CB_CPU_CLONES void depthwise_grad_plane(const float* x, const float* dy, const float* w, float* dx,
                                        float* dw, Plane g) {
  V16 wk[9], acc[9];
  for (int k = 0; k < 9; ++k) wk[k] = at16(w + k * 16), acc[k] = V16{};
  const int64_t rows = g.h > g.oh ? g.h : g.oh;
  for (int64_t r = 0; r < rows; ++r) {
    if (dw && r < g.oh) {
      const float* xr[3];
      for (int kh = 0; kh < 3; ++kh) {
        const int64_t ih = r * g.s - 1 + kh;
        xr[kh] = ih >= 0 && ih < g.h ? x + ih * g.w * 16 : nullptr;
      }
      dw_row(xr, dy + r * g.ow * 16, g, acc);
    }
    if (!dx || r >= g.h) continue;
    float* dxr = dx + r * g.w * 16;  // dX row ih = r
    if (g.s == 1) {
      const float* d[3];  // dY row r + 1 - kh, or null outside
      for (int kh = 0; kh < 3; ++kh) {
        const int64_t o = r + 1 - kh;
        d[kh] = o >= 0 && o < g.oh ? dy + o * g.ow * 16 : nullptr;
      }
      dx_row_s1(d, wk, g, dxr);
    } else {
      dx_row_s2(r, dy, wk, g, dxr);
    }
  }
  if (dw)
    for (int k = 0; k < 9; ++k) at16(dw + k * 16) = acc[k];
}

}  // namespace

bool conv_grad_depthwise(const KernelArgs& a) {
  const auto& p = a.p<ops::ConvParams>();
  const TensorView &dY = a.in[0], &X = a.in[1], &W = a.in[2];
  const TensorView* dX = a.out[0].present() ? &a.out[0] : nullptr;
  const TensorView* dW = a.out.size() > 1 && a.out[1].present() ? &a.out[1] : nullptr;
  if (X.rank() != 4 || X.dtype != DType::F32 || dY.dtype != DType::F32 || W.dtype != DType::F32)
    return false;
  const int64_t n = X.dims[0], c = X.dims[1], h = X.dims[2], w = X.dims[3];
  const int64_t oh = dY.dims[2], ow = dY.dims[3];
  const auto& win = p.window;
  const int64_t s = win.strides.size() == 2 ? win.strides[0] : 0;
  const bool shape_ok = p.group == c && c % 16 == 0 && dY.dims[1] == c && W.dims[0] == c &&
                        W.dims[1] == 1 && W.dims[2] == 3 && W.dims[3] == 3 &&
                        win.kernel_shape.size() == 2 && (s == 1 || s == 2) && win.strides[1] == s &&
                        win.dilations[0] == 1 && win.dilations[1] == 1 && win.pads.size() == 4 &&
                        win.pads[0] == 1 && win.pads[1] == 1 && win.pads[2] == 1 &&
                        win.pads[3] == 1 && oh == (h - 1) / s + 1 && ow == (w - 1) / s + 1;
  const bool layout_ok = X.blocked && dY.blocked && !X.bf16_storage && !dY.bf16_storage &&
                         (!dX || (dX->blocked && !dX->bf16_storage && dX->dtype == DType::F32)) &&
                         (!dW || dW->dtype == DType::F32);
  if (!shape_ok || !layout_ok || p.bf16 || n == 0) return false;
  const int64_t cb = c / 16;
  // The filters per block, [cb][9][16]; dW per (sample, block) [n][cb][9][16].
  float* wb = scratch<float, 0>(cb * 144);
  const float* wp = W.ptr<float>();
  for (int64_t ch = 0; ch < c; ++ch)
    for (int k = 0; k < 9; ++k) wb[(ch / 16) * 144 + k * 16 + ch % 16] = wp[ch * 9 + k];
  float* part = dW ? scratch<float, 1>(n * cb * 144) : nullptr;
  const float *xs = X.ptr<float>(), *dys = dY.ptr<float>();
  float* dxs = dX ? dX->ptr<float>() : nullptr;
  const Plane g{h, w, oh, ow, s};
  parallel(n * cb, 32 * (h * w + oh * ow), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {  // t = i * cb + b
      const int64_t b = t % cb;
      depthwise_grad_plane(xs + t * h * w * 16, dys + t * oh * ow * 16, wb + b * 144,
                           dxs ? dxs + t * h * w * 16 : nullptr, part ? part + t * 144 : nullptr,
                           g);
    }
  });
  if (dW) {
    float* out = dW->ptr<float>();
    for (int64_t b = 0; b < cb; ++b)
      for (int k = 0; k < 9; ++k)
        for (int l = 0; l < 16; ++l) {
          float sum = 0;
          for (int64_t i = 0; i < n; ++i) sum += part[(i * cb + b) * 144 + k * 16 + l];
          out[(b * 16 + l) * 9 + k] = sum;
        }
  }
  return true;
}

}  // namespace cb::cpu
