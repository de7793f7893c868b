// BatchNormalization on the CPU (X f32/f64; scale, B, mean, var each f32 or f64).
// X [N,C,S...] with per-channel [C] parameters; every channel reduces over N and the spatial dims.
// Inference: y = scale * (x - mean) / sqrt(var + eps) + B with the given (running) statistics.
// With the params' relu (fuse_batch_norm_relu), Y = max(y, 0); with clip too, Clip's clamp of y.
// Training (BatchNormalizationParams::training): normalise with the batch statistics (biased
// variance), and write
//   out 1, 2: running_mean = mean * momentum + batch_mean * (1 - momentum),
//             running_var  = var * momentum + batch_var * (1 - momentum), batch_var the
//             biased variance (the ONNX spec) or, with unbiased_running_var, the unbiased one
//             (PyTorch's and TensorFlow's rule, what the trainer uses),
//   out 3, 4 (opset <= 13): saved_mean = batch_mean, saved_var = batch_var (biased), as the
//             ONNX spec names them.
//   out 5 (save_batch_norm_statistics; f64 [4, C]): batch_mean, 1/sqrt(batch_var + eps), and the
//             mul, add of y = x * mul + add as applied here (rounded to T), for
//             BatchNormalizationGrad (norm_grad.cpp).
// Statistics are accumulated in f32 runs whose totals are summed in double (plane_sum.h,
// storage.h); blocked values whose blocks hold kBnSplitBytes or more (storage.h) are normalised a
// block at a time, each pass split over the samples. Outputs 1..4 may alias inputs 3/4 (each
// channel is read before it is written); Y may alias X. X and Y in oneDNN's blocked layout
// (TensorView::blocked, [N, C/16, S, 16]; both alike, assign_blocked_layouts couples them) are
// normalised a block of 16 channels at a time, the lanes side by side. With the params' residual
// (fuse_batch_norm_relu), input 5 R is added to y in f32 before the activation: Y = act(y + R),
// rounded once as stored. f32 storage: the bits of BatchNormalization, Add and the activation
// apart; bf16 storage: those ops round y first, then the sum, which the single rounding here is
// never farther from the exact sum than (under cancellation, many bf16 steps nearer). Y may alias
// R.
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/plane_sum.h"
#include "kernels/cpu/storage.h"
#include "runtime/ops/params.h"
#include "runtime/thread_pool.h"

namespace cb::cpu {

namespace {

// Batch mean and biased variance of channels [c0, c1) of x [N, C, S], two-pass (deviations from
// the mean: no cancellation), f32 lanes with totals in double (plane_sum.h).
template <typename T>
CB_CPU_CLONES void channel_stats(const T* x, int64_t n, int64_t c, int64_t s, int64_t c0,
                                 int64_t c1, double* mean, double* var) {
  const int64_t count = n * s;
  for (int64_t ch = c0; ch < c1; ++ch) {
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < n; ++i) sum += plane_sum(x + (i * c + ch) * s, s);
    const double mu = count ? sum / static_cast<double>(count) : 0;
    for (int64_t i = 0; i < n; ++i)
      sq += plane_sum_sq_dev(x + (i * c + ch) * s, s, static_cast<T>(mu));
    mean[ch] = mu;
    var[ch] = count ? sq / static_cast<double>(count) : 0;
  }
}

// The fused activation (BnActivation, scalar_math.h): none, Relu or Clip.
enum Act { kNone, kRelu, kClip };
// Applied in place to a float or double, or to 8 float lanes (F8: by reference, as a vector
// return changes the ABI where AVX is off).
template <int A, typename T>
CB_STAT_INLINE inline void activate(T& v, float lo, float hi) {
  const T zero = {};
  if constexpr (A == kRelu) v = v > zero ? v : zero;  // ReluOp's rule: NaN gives 0
  if constexpr (A == kClip) {                         // ClipOp's
    const T l = zero + lo, h = zero + hi;
    v = v < l ? l : (v > h ? h : v);
  }
}

// y = x * mul[ch] + add[ch] over planes [p0, p1) of [N*C, S], plus r where given (the fused
// residual), then the activation A.
template <int A, typename T>
CB_CPU_CLONES void scale_shift(const T* x, const T* r, T* y, int64_t p0, int64_t p1, int64_t c,
                               int64_t s, const T* mul, const T* add, float lo, float hi) {
  for (int64_t pl = p0; pl < p1; ++pl) {
    const T* xp = x + pl * s;
    T* yp = y + pl * s;
    const T m = mul[pl % c], b = add[pl % c];
    auto sweep = [&](auto residual) CB_STAT_INLINE {
      for (int64_t j = 0; j < s; ++j) {
        T v = xp[j] * m + b;
        if constexpr (decltype(residual)::value) v += r[pl * s + j];
        activate<A>(v, lo, hi);
        yp[j] = v;
      }
    };
    if (r)
      sweep(std::true_type{});
    else
      sweep(std::false_type{});
  }
}

// The same two, blocked: x [N, C/16, S, 16] stored as S (float or bf16 bits, storage.h), blocks
// [b0, b1) of 16 channels each.
template <typename St>
CB_CPU_CLONES void channel_stats_blocked(const St* x, int64_t n, int64_t cb, int64_t s, int64_t b0,
                                         int64_t b1, double* mean, double* var) {
  const int64_t count = n * s;
  for (int64_t b = b0; b < b1; ++b) {
    double sq[16];
    block_means(x, n, cb, s, b, mean + b * 16);
    block_sq_devs(x, n, cb, s, b, mean + b * 16, sq);
    for (int l = 0; l < 16; ++l) var[b * 16 + l] = count ? sq[l] / static_cast<double>(count) : 0;
  }
}

// Block b's sums over samples [i0, i1), each sample's 16 into part[i * 16 ...]: of x, or with
// `mean` (the block's 16) of (x - mean)^2.
template <typename St>
CB_CPU_CLONES void sample_partials(const St* x, int64_t cb, int64_t s, int64_t b, int64_t i0,
                                   int64_t i1, const double* mean, double* part) {
  for (int64_t i = i0; i < i1; ++i) {
    const St* xi = x + (i * cb + b) * s * 16;
    if (mean)
      block_sq_devs(xi, 1, 1, s, 0, mean, part + i * 16);
    else
      block_sums(xi, 1, 1, s, 0, part + i * 16);
  }
}

// 16 channels at a time as two 8-lane vectors in St's lane order (storage.h's load16); with r
// (the fused residual), y + r in f32, rounded once as stored.
template <int A, typename St>
CB_CPU_CLONES void scale_shift_blocked(const St* x, const St* r, St* y, int64_t p0, int64_t p1,
                                       int64_t cb, int64_t s, const float* mul, const float* add,
                                       float lo, float hi) {
  for (int64_t pl = p0; pl < p1; ++pl) {  // pl = i * cb + b: one block of one sample
    const St* xp = x + pl * s * 16;
    St* yp = y + pl * s * 16;
    F8 m0, m1, d0, d1;
    lanes16<St>(mul + (pl % cb) * 16, m0, m1);
    lanes16<St>(add + (pl % cb) * 16, d0, d1);
    auto sweep = [&](auto residual) CB_STAT_INLINE {
      for (int64_t j = 0; j < s; ++j) {
        F8 v0, v1;
        load16(xp + j * 16, v0, v1);
        v0 = v0 * m0 + d0;
        v1 = v1 * m1 + d1;
        if constexpr (decltype(residual)::value) {
          F8 w0, w1;
          load16(r + (pl * s + j) * 16, w0, w1);
          v0 += w0, v1 += w1;
        }
        activate<A>(v0, lo, hi), activate<A>(v1, lo, hi);
        store16(yp + j * 16, v0, v1);
      }
    };
    if (r)
      sweep(std::true_type{});
    else
      sweep(std::false_type{});
  }
}

// The blocked scale_shift of the params' fused activation.
template <typename St>
auto* scale_shift_blocked_for(const ops::BatchNormalizationParams& p) {
  return !p.relu  ? scale_shift_blocked<kNone, St>
         : p.clip ? scale_shift_blocked<kClip, St>
                  : scale_shift_blocked<kRelu, St>;
}

template <typename T>
void batch_norm(const KernelArgs& a) {
  const auto& p = a.p<ops::BatchNormalizationParams>();
  const TensorView &X = a.in[0], &Y = a.out[0];
  const int64_t n = X.dims[0], c = X.dims[1];
  const int64_t s = n * c != 0 ? X.numel() / (n * c) : 0, count = n * s;
  const T* x = X.ptr<T>();
  T* y = Y.ptr<T>();
  // Per channel, [C] each: batch mean and biased variance (training), then y = x * mul + add.
  double* mean = scratch<double, 0>(c);
  double* var = scratch<double, 1>(c);
  T* mul = scratch<T, 2>(c);
  T* add = scratch<T, 3>(c);
  const bool blocked = X.blocked;
  CB_CHECK(Y.blocked == blocked && (!blocked || c % 16 == 0));
  CB_CHECK(!blocked || X.bf16_storage == Y.bf16_storage);
  // The fused residual (params' residual): laid out and stored as X (assign_blocked_layouts).
  const TensorView* R = p.residual ? &a.in.at(5) : nullptr;
  CB_CHECK(!R || (R->numel() == X.numel() && R->blocked == blocked &&
                  R->bf16_storage == X.bf16_storage && R->dtype == X.dtype));
  const void* r = R ? R->data : nullptr;
  auto coefficients = [&](int64_t c0, int64_t c1) {  // mul, add of channels [c0, c1)
    for (int64_t ch = c0; ch < c1; ++ch) {
      double m = real_at(a.in[1], ch) / std::sqrt(var[ch] + static_cast<double>(p.epsilon));
      mul[ch] = static_cast<T>(m);
      add[ch] = static_cast<T>(real_at(a.in[2], ch) - mean[ch] * m);
    }
  };
  // Large blocks (kBnSplitBytes, storage.h), training: one at a time, each pass split over the
  // samples: both cores stream the same block, which stays in the shared cache between its three
  // passes (mean, squared deviations, y), and a value of one block keeps every core busy.
  // Per-sample sums in double, added in sample order: the same bits for any thread count.
  const int64_t stored_bytes = X.bf16_storage ? 2 : 4;
  const bool split = std::is_same_v<T, float> && p.training && blocked &&
                     n * s * 16 * stored_bytes >= kBnSplitBytes;
  if (split) {
    if constexpr (std::is_same_v<T, float>)
      with_storage(X.bf16_storage, [&](auto* tag) {
        using St = std::remove_pointer_t<decltype(tag)>;
        const St* xs = static_cast<const St*>(X.data);
        const int64_t cb = c / 16;
        auto* f = scale_shift_blocked_for<St>(p);
        double* part = scratch<double, 4>(n * 16);
        for (int64_t b = 0; b < cb; ++b) {
          for (double* out : {mean, var}) {  // the mean, then the squared deviations from it
            const double* mu = out == var ? mean + b * 16 : nullptr;
            parallel(n, 16 * s, [&](int64_t i0, int64_t i1) {
              sample_partials(xs, cb, s, b, i0, i1, mu, part);
            });
            for (int l = 0; l < 16; ++l) {
              double t = 0;
              for (int64_t i = 0; i < n; ++i) t += part[i * 16 + l];
              out[b * 16 + l] = t / static_cast<double>(count);  // count: n * s > 0 here
            }
          }
          coefficients(b * 16, (b + 1) * 16);
          parallel(n, 16 * s, [&](int64_t i0, int64_t i1) {
            for (int64_t i = i0; i < i1; ++i)
              f(xs, static_cast<const St*>(r), static_cast<St*>(Y.data), i * cb + b, i * cb + b + 1,
                cb, s, mul, add, p.clip_min, p.clip_max);
          });
        }
      });
  } else {
    // The statistics (blocked: a block to a thread), then y.
    if (p.training && blocked) {
      if constexpr (std::is_same_v<T, float>)
        with_storage(X.bf16_storage, [&](auto* tag) {
          using St = std::remove_pointer_t<decltype(tag)>;
          parallel(c / 16, 32 * n * s, [&](int64_t b0, int64_t b1) {
            channel_stats_blocked(static_cast<const St*>(X.data), n, c / 16, s, b0, b1, mean, var);
          });
        });
    } else if (p.training) {
      parallel(c, 2 * n * s,
               [&](int64_t c0, int64_t c1) { channel_stats(x, n, c, s, c0, c1, mean, var); });
    } else {
      for (int64_t ch = 0; ch < c; ++ch) {
        mean[ch] = real_at(a.in[3], ch);
        var[ch] = real_at(a.in[4], ch);
      }
    }
    coefficients(0, c);
    if (blocked) {
      if constexpr (std::is_same_v<T, float>)
        with_storage(X.bf16_storage, [&](auto* tag) {
          using St = std::remove_pointer_t<decltype(tag)>;
          parallel(n * c / 16, 16 * s, [&](int64_t p0, int64_t p1) {
            scale_shift_blocked_for<St>(p)(static_cast<const St*>(X.data),
                                           static_cast<const St*>(r), static_cast<St*>(Y.data), p0,
                                           p1, c / 16, s, mul, add, p.clip_min, p.clip_max);
          });
        });
    } else {
      parallel(n * c, s, [&](int64_t p0, int64_t p1) {
        auto* f = !p.relu  ? scale_shift<kNone, T>
                  : p.clip ? scale_shift<kClip, T>
                           : scale_shift<kRelu, T>;
        f(x, static_cast<const T*>(r), y, p0, p1, c, s, mul, add, p.clip_min, p.clip_max);
      });
    }
  }
  if (!p.training) return;
  const double mom = p.momentum;
  const double unbias = p.unbiased_running_var && count > 1
                            ? static_cast<double>(count) / static_cast<double>(count - 1)
                            : 1;
  for (int64_t ch = 0; ch < c; ++ch) {
    double rm = real_at(a.in[3], ch), rv = real_at(a.in[4], ch);  // read before any aliased write
    if (a.out.size() > 1 && a.out[1].present())
      put_real(a.out[1], ch, rm * mom + mean[ch] * (1 - mom));
    if (a.out.size() > 2 && a.out[2].present())
      put_real(a.out[2], ch, rv * mom + var[ch] * unbias * (1 - mom));
    if (a.out.size() > 3 && a.out[3].present()) put_real(a.out[3], ch, mean[ch]);
    if (a.out.size() > 4 && a.out[4].present()) put_real(a.out[4], ch, var[ch]);
  }
  if (a.out.size() > 5 && a.out[5].present()) {
    CB_CHECK(a.out[5].dtype == DType::F64 && a.out[5].numel() == 4 * c);
    double* st = a.out[5].ptr<double>();
    for (int64_t ch = 0; ch < c; ++ch) {
      st[ch] = mean[ch];
      st[c + ch] = 1.0 / std::sqrt(var[ch] + static_cast<double>(p.epsilon));
      st[2 * c + ch] = static_cast<double>(mul[ch]);
      st[3 * c + ch] = static_cast<double>(add[ch]);
    }
  }
}

}  // namespace

void BatchNormalization(const KernelArgs& a) {
  if (kernel_dtype(a) == DType::F64)
    batch_norm<double>(a);
  else
    batch_norm<float>(a);
}

}  // namespace cb::cpu
