// Normalization backward on the CPU (X f32/f64). Statistics are recomputed from X where the
// forward saved none, as the forwards compute them (batch_normalization.cpp,
// layer_normalization.cpp); every output present is assigned.
//
// BatchNormalizationGrad(dY [N,C,S...], X [N,C,S...], scale [C]) -> dX [N,C,S...], dscale [C],
//                                                                   dB [C]     (training mode)
//   with the params' relu, a fourth input Z (the fused forward's output): dy is 0 where Z <= 0
//   (with clip: outside clip_min < Z < clip_max; BnActivation in scalar_math.h). A fifth input
//   (save_batch_norm_statistics) holds the forward's batch statistics, f64 [4, C]: mean and
//   invstd are then taken from it, and the mask comes from the forward's pre-activation
//   x * mul + add (the same test on the same bits; bf16 storage tests it against bounds that
//   give Z's mask, bf16_mask_bounds; Z is not read).
//   per channel over M = N * S values: mean, biased var, invstd = 1/sqrt(var + eps),
//   xhat = (x - mean) * invstd, dB = sum(dy), dscale = sum(dy * xhat),
//   dX = scale * invstd / M * (M * dy - dB - xhat * dscale).
//   scale, dscale and dB may be f32 or f64 independently of X (as the forward's parameters).
//
// LayerNormalizationGrad(dY, X [outer..., norm...], scale) -> dX [like X], dscale, dB [like scale]
//   rows of m = prod(dims[axis:]) values (axis normalised if negative), scale broadcast over them:
//   per row, g = dy * scale, dX = invstd * (g - mean(g) - xhat * mean(g * xhat));
//   dscale = sum over rows of dy * xhat, dB = sum over rows of dy, each then summed over the dims
//   that scale broadcasts along.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/common/scalar_math.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/plane_sum.h"
#include "kernels/cpu/storage.h"
#include "runtime/ops/params.h"

namespace cb::cpu {

namespace {

const TensorView* out_at(const KernelArgs& a, size_t i) {
  return a.out.size() > i && a.out[i].present() ? &a.out[i] : nullptr;
}

// ---- BatchNormalizationGrad ---------------------------------------------------------------------
// The forward's batch statistics where it saved them (input 4, BatchNormalization's output 5,
// f64 [4, C]: mean, invstd, mul, add); nullptr: recomputed from X.
struct SavedStats {
  const double* p = nullptr;
  int64_t c = 0;
  double mean(int64_t ch) const { return p[ch]; }
  double invstd(int64_t ch) const { return p[c + ch]; }
  double mul(int64_t ch) const { return p[2 * c + ch]; }
  double add(int64_t ch) const { return p[3 * c + ch]; }
};

// Channels [c0, c1) of x, dy, dx [N, C, S]: the statistics (or the saved ones), the sums
// (plane_sum.h) and dx (which may be dy's buffer); writes dB and dscale per channel into sdy_out /
// sdyx_out (double [C]). A fused activation masks dy by z, or with saved statistics by the
// forward's x * mul + add (the same bits as its output's mask, without reading z).
template <typename T>
CB_CPU_CLONES void bn_grad_channels(const T* x, const T* dy, const T* z, T* dx,
                                    const TensorView* scale, SavedStats st, int64_t n, int64_t c,
                                    int64_t s, int64_t c0, int64_t c1, double eps, double* sdy_out,
                                    double* sdyx_out, float z_lo, float z_hi) {
  const T lo = static_cast<T>(z_lo), hi = static_cast<T>(z_hi);
  const int64_t count = n * s;
  for (int64_t ch = c0; ch < c1; ++ch) {
    double sum = 0, sq = 0, sdy = 0, sdyx = 0;
    double mean = 0;
    if (st.p) {
      mean = st.mean(ch);
    } else {
      for (int64_t i = 0; i < n; ++i) sum += plane_sum(x + (i * c + ch) * s, s);
      mean = count ? sum / static_cast<double>(count) : 0;
    }
    const T affine[2] = {static_cast<T>(st.p ? st.mul(ch) : 0),
                         static_cast<T>(st.p ? st.add(ch) : 0)};
    const bool by_x = z && st.p;     // the mask from x * mul + add
    for (int64_t i = 0; i < n; ++i)  // two-pass variance and the two gradient sums
      plane_sums(x + (i * c + ch) * s, dy + (i * c + ch) * s,
                 z && !by_x ? z + (i * c + ch) * s : nullptr, s, static_cast<T>(mean), sq, sdy,
                 sdyx, lo, hi, by_x ? affine : nullptr);
    const double var = count ? sq / static_cast<double>(count) : 0;
    const double invstd = st.p ? st.invstd(ch) : 1.0 / std::sqrt(var + eps);
    sdyx *= invstd;  // sum(dy * xhat)
    sdy_out[ch] = sdy;
    sdyx_out[ch] = sdyx;
    if (!dx || count == 0) continue;
    // dx = k * (dy - sdy/M - (x - mean) * invstd * sdyx/M), k = scale * invstd (sdyx has xhat)
    const double inv_m = 1.0 / static_cast<double>(count);
    const T k = static_cast<T>(real_at(*scale, ch) * invstd);
    const T b = static_cast<T>(sdy * inv_m), q = static_cast<T>(invstd * sdyx * inv_m);
    const T mu = static_cast<T>(mean);
    for (int64_t i = 0; i < n; ++i) {
      const T *xp = x + (i * c + ch) * s, *dyp = dy + (i * c + ch) * s;
      T* dxp = dx + (i * c + ch) * s;
      if (by_x) {
        for (int64_t j = 0; j < s; ++j) {
          const T v = xp[j] * affine[0] + affine[1];
          dxp[j] = k * ((v > lo && !(v >= hi) ? dyp[j] : T(0)) - b - (xp[j] - mu) * q);
        }
      } else if (z) {
        const T* zp = z + (i * c + ch) * s;
        for (int64_t j = 0; j < s; ++j)
          dxp[j] = k * ((zp[j] > lo && !(zp[j] >= hi) ? dyp[j] : T(0)) - b - (xp[j] - mu) * q);
      } else {
        for (int64_t j = 0; j < s; ++j) dxp[j] = k * (dyp[j] - b - (xp[j] - mu) * q);
      }
    }
  }
}

// The same for blocks [b0, b1) of 16 channels of x, dy, dx in the blocked layout [N, C/16, S, 16]
// (TensorView::blocked) stored as St (float or bf16 bits, storage.h), the 16 lanes side by side.
// Mask (BnMask, storage.h): none, by z, or by x * mul + add (saved statistics; with bf16
// storage, against the bounds that value's stored output passes, bf16_mask_bounds).
template <int Mask, typename St>
CB_CPU_CLONES void bn_grad_blocked(const St* x, const St* dy, const St* z, St* dx,
                                   const TensorView* scale, SavedStats st, int64_t n, int64_t cb,
                                   int64_t s, int64_t b0, int64_t b1, double eps, double* sdy_out,
                                   double* sdyx_out, float lo, float hi) {
  const int64_t count = n * s;
  for (int64_t b = b0; b < b1; ++b) {
    double mean[16], sq[16], sdy[16], sdyx[16], invstd[16];
    float mul[16] = {}, add[16] = {};  // the affine mask's (saved statistics)
    if (st.p) {
      for (int l = 0; l < 16; ++l) {
        mean[l] = st.mean(b * 16 + l);
        mul[l] = static_cast<float>(st.mul(b * 16 + l));
        add[l] = static_cast<float>(st.add(b * 16 + l));
      }
    } else {
      block_means(x, n, cb, s, b, mean);
    }
    block_grad_sums<Mask>(x, dy, z, n, cb, s, b, mean, sq, sdy, sdyx, lo, hi, mul, add);
    float k[16], bb[16], q[16], mu[16];
    const double inv_m = count ? 1.0 / static_cast<double>(count) : 0;
    for (int l = 0; l < 16; ++l) {
      const int64_t ch = b * 16 + l;
      invstd[l] = st.p ? st.invstd(ch)
                       : 1.0 / std::sqrt((count ? sq[l] / static_cast<double>(count) : 0) + eps);
      sdyx[l] *= invstd[l];  // sum(dy * xhat)
      sdy_out[ch] = sdy[l];
      sdyx_out[ch] = sdyx[l];
      k[l] = static_cast<float>(real_at(*scale, ch) * invstd[l]);
      bb[l] = static_cast<float>(sdy[l] * inv_m);
      q[l] = static_cast<float>(invstd[l] * sdyx[l] * inv_m);
      mu[l] = static_cast<float>(mean[l]);
    }
    if (!dx || count == 0) continue;
    // dx = k (dy - bb - (x - mu) q) per lane, in St's lane order (storage.h's load16).
    F8 k0, k1, b0, b1, q0, q1, u0, u1, w0, w1, a0, a1;
    lanes16<St>(k, k0, k1), lanes16<St>(bb, b0, b1), lanes16<St>(q, q0, q1);
    lanes16<St>(mu, u0, u1), lanes16<St>(mul, w0, w1), lanes16<St>(add, a0, a1);
    const F8 zero = {}, lo8 = zero + lo, hi8 = zero + hi;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t at = (i * cb + b) * s * 16;
      const St *xp = x + at, *dyp = dy + at, *zp = Mask == kMaskZ ? z + at : nullptr;
      St* dxp = dx + at;
      for (int64_t j = 0; j < s; ++j) {
        F8 g0, g1, x0, x1;
        load16(dyp + j * 16, g0, g1);
        load16(xp + j * 16, x0, x1);
        if constexpr (Mask != kMaskNone) {
          F8 v0, v1;
          if constexpr (Mask == kMaskZ)
            load16(zp + j * 16, v0, v1);
          else
            v0 = x0 * w0 + a0, v1 = x1 * w1 + a1;
          g0 = (v0 > lo8) & ~(v0 >= hi8) ? g0 : zero;
          g1 = (v1 > lo8) & ~(v1 >= hi8) ? g1 : zero;
        }
        store16(dxp + j * 16, k0 * (g0 - b0 - (x0 - u0) * q0), k1 * (g1 - b1 - (x1 - u1) * q1));
      }
    }
  }
}

// The mask of a fused activation on bf16-stored output z = bf16(act(v)) (store16's rounding) as
// bounds on the pre-activation v itself: z > lo && !(z >= hi) exactly where v > lo' && !(v >= hi')
// (v not NaN; z is monotone in v). lo' is the largest float whose z fails z > lo (+inf where
// every z does; -inf where none does, which only v = -inf itself then gets wrong), hi' the
// smallest whose z passes z >= hi (NaN where none does: Relu's NaN bound). So BatchNorm's
// gradient masks bf16 activations from X, as f32 ones, without reading the activation.
std::pair<float, float> bf16_mask_bounds(const math::BnActivation& act) {
  auto z_of = [&](float v) {  // act, then rounded to bf16 (nearest even) and widened
    uint32_t u = 0;
    const float y = act.y(v);
    std::memcpy(&u, &y, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;  // y is never NaN for a finite bound
    float r = 0;
    std::memcpy(&r, &u, 4);
    return r;
  };
  // Floats in order as unsigned keys, and back.
  auto key = [](float v) {
    uint32_t u = 0;
    std::memcpy(&u, &v, 4);
    return u & 0x80000000u ? ~u : u | 0x80000000u;
  };
  auto value = [](uint32_t k) {
    const uint32_t u = k & 0x80000000u ? k & 0x7fffffffu : ~k;
    float v = 0;
    std::memcpy(&v, &u, 4);
    return v;
  };
  const float inf = std::numeric_limits<float>::infinity();
  // The smallest key in [key(-inf), key(inf)] whose value passes `pass`; key(inf) + 1 if none.
  auto first = [&](auto pass) {
    uint32_t lo = key(-inf), hi = key(inf) + 1;
    while (lo < hi) {
      const uint32_t mid = lo + (hi - lo) / 2;
      if (pass(value(mid)))
        hi = mid;
      else
        lo = mid + 1;
    }
    return lo;
  };
  const uint32_t in = first([&](float v) { return z_of(v) > act.lo; });
  const uint32_t top = first([&](float v) { return z_of(v) >= act.hi; });
  const float lo = in > key(inf) ? inf : in == key(-inf) ? -inf : value(in - 1);
  const float hi = top > key(inf) ? std::numeric_limits<float>::quiet_NaN() : value(top);
  return {lo, hi};
}

template <typename T>
void batch_norm_grad(const KernelArgs& a) {
  const auto& p = a.p<ops::BatchNormalizationParams>();
  const TensorView &dY = a.in[0], &X = a.in[1], &scale = a.in[2];
  const TensorView *dX = out_at(a, 0), *dS = out_at(a, 1), *dB = out_at(a, 2);
  const int64_t n = X.dims[0], c = X.dims[1];
  const int64_t s = n * c != 0 ? X.numel() / (n * c) : 0;
  const T *x = X.ptr<T>(), *dy = dY.ptr<T>();
  T* dx = dX ? dX->ptr<T>() : nullptr;
  // A fused activation's output (fuse_batch_norm_relu): dY counts where act.counts(it). Laid
  // out as X.
  const TensorView* Z = p.relu ? &a.in.at(3) : nullptr;
  const math::BnActivation act = math::BnActivation::of(p);
  CB_CHECK(!Z || (Z->blocked == X.blocked && Z->bf16_storage == X.bf16_storage));
  const T* z = Z ? Z->ptr<T>() : nullptr;
  // The forward's statistics (save_batch_norm_statistics).
  SavedStats st;
  if (a.in.size() > 4 && a.in[4].present()) {
    CB_CHECK(a.in[4].dtype == DType::F64 && a.in[4].numel() == 4 * c);
    st = {a.in[4].ptr<double>(), c};
  }
  double* sdy = scratch<double, 0>(c);
  double* sdyx = scratch<double, 1>(c);
  const double eps = static_cast<double>(p.epsilon);
  if (X.blocked) {  // dY and dX alike (assign_blocked_layouts couples them)
    CB_CHECK(dY.blocked && (!dX || dX->blocked) && c % 16 == 0);
    CB_CHECK(X.bf16_storage == dY.bf16_storage && (!dX || dX->bf16_storage == X.bf16_storage));
    if constexpr (std::is_same_v<T, float>)
      with_storage(X.bf16_storage, [&](auto* tag) {
        using St = std::remove_pointer_t<decltype(tag)>;
        const bool by_x = Z && st.p;  // masked from X
        auto* f = by_x ? bn_grad_blocked<kMaskAffine, St>
                  : Z  ? bn_grad_blocked<kMaskZ, St>
                       : bn_grad_blocked<kMaskNone, St>;
        const auto [lo, hi] = by_x && std::is_same_v<St, uint16_t> ? bf16_mask_bounds(act)
                                                                   : std::pair{act.lo, act.hi};
        parallel(c / 16, 64 * n * s, [&](int64_t b0, int64_t b1) {
          f(static_cast<const St*>(X.data), static_cast<const St*>(dY.data),
            Z ? static_cast<const St*>(Z->data) : nullptr,
            dX ? static_cast<St*>(dX->data) : nullptr, &scale, st, n, c / 16, s, b0, b1, eps, sdy,
            sdyx, lo, hi);
        });
      });
  } else {
    // One channel is N strided planes of S values; channels run across the pool.
    parallel(c, 4 * n * s, [&](int64_t c0, int64_t c1) {
      bn_grad_channels(x, dy, z, dx, &scale, st, n, c, s, c0, c1, eps, sdy, sdyx, act.lo, act.hi);
    });
  }
  for (int64_t ch = 0; ch < c; ++ch) {
    if (dB) put_real(*dB, ch, sdy[ch]);
    if (dS) put_real(*dS, ch, sdyx[ch]);
  }
}

// ---- LayerNormalizationGrad ---------------------------------------------------------------------
// Index into `v` (rank <= nr, right-aligned, broadcast) of flat index k over the dims `norm`.
int64_t bcast_index(const TensorView& v, const int64_t* norm, int64_t nr, int64_t k) {
  int64_t idx = 0, st = 1;
  for (int64_t d = nr - 1, j = v.rank() - 1; d >= 0; --d, --j) {
    int64_t ck = k % norm[d];
    k /= norm[d];
    if (j < 0) continue;
    int64_t vd = v.dims[static_cast<size_t>(j)];
    if (vd != 1) idx += ck * st;
    st *= vd;
  }
  return idx;
}

// Rows of LayerNormalizationGrad in blocks of kLnBlock: the column sums over rows (dscale, dB)
// are summed per block, then the blocks in order, so that the bits do not depend on how the
// blocks are split over threads.
constexpr int64_t kLnBlock = 32;

// Blocks [b0, b1): per row its mean and invstd (double) and, with dx,
// dx = inv (g - mean(g) - xhat mean(g xhat)), g = dy scale; with ds / db (m doubles per block),
// each block's sums of dy xhat and dy per position, while the row is in cache.
template <typename T>
CB_CPU_CLONES void layer_norm_grad_blocks(const T* x, const T* dy, const T* s_full, T* dx,
                                          int64_t outer, int64_t m, int64_t b0, int64_t b1,
                                          double eps, double* ds, double* db) {
  const double inv_m = m > 0 ? 1.0 / static_cast<double>(m) : 0.0;
  for (int64_t blk = b0; blk < b1; ++blk) {
    double* dsb = ds ? ds + blk * m : nullptr;
    double* dbb = db ? db + blk * m : nullptr;
    if (dsb) std::fill(dsb, dsb + m, 0.0), std::fill(dbb, dbb + m, 0.0);
    for (int64_t row = blk * kLnBlock; row < std::min(outer, (blk + 1) * kLnBlock); ++row) {
      const T *xr = x + row * m, *dyr = dy + row * m;
      const double mu = lane_sum(xr, m) * inv_m;
      const double iv = 1.0 / std::sqrt(lane_sq_dev(xr, m, mu) * inv_m + eps);
      if (dsb)
        for (int64_t k = 0; k < m; ++k) {
          dbb[k] += dyr[k];
          dsb[k] += dyr[k] * (xr[k] - mu) * iv;
        }
      if (!dx) continue;
      double sg[8] = {}, sgx[8] = {};  // sum(g), sum(g * xhat), in 8 lanes
      int64_t k = 0;
      for (; k + 8 <= m; k += 8)
        for (int j = 0; j < 8; ++j) {
          const double gk = static_cast<double>(dyr[k + j]) * s_full[k + j];
          sg[j] += gk;
          sgx[j] += gk * (xr[k + j] - mu) * iv;
        }
      double tg = 0, tgx = 0;
      for (; k < m; ++k) {
        const double gk = static_cast<double>(dyr[k]) * s_full[k];
        tg += gk;
        tgx += gk * (xr[k] - mu) * iv;
      }
      for (int j = 0; j < 8; ++j) tg += sg[j], tgx += sgx[j];
      const T ti = static_cast<T>(iv), tmu = static_cast<T>(mu);
      const T b = static_cast<T>(tg * inv_m), q = static_cast<T>(tgx * inv_m * iv);
      T* dxr = dx + row * m;
      for (k = 0; k < m; ++k) dxr[k] = ti * (dyr[k] * s_full[k] - b - (xr[k] - tmu) * q);
    }
  }
}

template <typename T>
void layer_norm_grad(const KernelArgs& a) {
  const auto& p = a.p<ops::LayerNormalizationParams>();
  const TensorView &dY = a.in[0], &X = a.in[1], &scale = a.in[2];
  const TensorView *dX = out_at(a, 0), *dS = out_at(a, 1), *dB = out_at(a, 2);
  const int64_t r = X.rank(), axis = norm_axis(p.axis, r);
  int64_t outer = 1, m = 1;
  for (int64_t d = 0; d < r; ++d) (d < axis ? outer : m) *= X.dims[static_cast<size_t>(d)];
  const int64_t* norm = X.dims.data() + axis;
  const int64_t nr = r - axis;
  const T *x = X.ptr<T>(), *dy = dY.ptr<T>(), *sc = scale.ptr<T>();
  const bool scale_full = scale.numel() == m;
  const T* s_full = sc;  // scale over the m positions of a row
  if (!scale_full) {
    T* buf = scratch<T, 2>(m);
    for (int64_t k = 0; k < m; ++k) buf[k] = sc[bcast_index(scale, norm, nr, k)];
    s_full = buf;
  }
  T* dx = dX ? dX->ptr<T>() : nullptr;
  const bool sums = dS || dB;
  const int64_t blocks = (outer + kLnBlock - 1) / kLnBlock;
  double* ds_blk = sums ? scratch<double, 3>(blocks * m) : nullptr;
  double* db_blk = sums ? scratch<double, 4>(blocks * m) : nullptr;
  parallel(blocks, 7 * m * kLnBlock, [&](int64_t b0, int64_t b1) {
    layer_norm_grad_blocks<T>(x, dy, s_full, dx, outer, m, b0, b1, p.epsilon, ds_blk, db_blk);
  });
  if (!sums) return;
  // The blocks' sums in block order, per position k (into block 0's rows).
  parallel(m, 2 * blocks, [&](int64_t k0, int64_t k1) {
    for (int64_t blk = 1; blk < blocks; ++blk)
      for (int64_t k = k0; k < k1; ++k) {
        ds_blk[k] += ds_blk[blk * m + k];
        db_blk[k] += db_blk[blk * m + k];
      }
  });
  // Reduced to scale's shape where it broadcasts over the m positions.
  for (const auto& [out, full] : {std::pair{dS, ds_blk}, std::pair{dB, db_blk}}) {
    if (!out) continue;
    T* o = out->template ptr<T>();
    if (out->numel() == m) {
      for (int64_t k = 0; k < m; ++k) o[k] = static_cast<T>(full[k]);
      continue;
    }
    std::vector<double> acc(static_cast<size_t>(out->numel()), 0.0);
    for (int64_t k = 0; k < m; ++k)
      acc[static_cast<size_t>(bcast_index(*out, norm, nr, k))] += full[k];
    for (size_t i = 0; i < acc.size(); ++i) o[i] = static_cast<T>(acc[i]);
  }
}

}  // namespace

void BatchNormalizationGrad(const KernelArgs& a) {
  dispatch_float(a.in[1].dtype, [&]<class T>(Tag<T>) { batch_norm_grad<T>(a); });
}

void LayerNormalizationGrad(const KernelArgs& a) {
  dispatch_float(a.in[1].dtype, [&]<class T>(Tag<T>) { layer_norm_grad<T>(a); });
}

}  // namespace cb::cpu
