// SMA's fused kernels over [R][P] flat buffers (contracts in runtime/ops/optimizer.cpp):
//   SmaStep         every learner's momentum step and SMA correction, and the intra-device sum
//                   of the corrections, in one pass
//   SmaCentralStep  the central model's update from the (all-reduced) sum
//   SmaRowSum       a scaled sum of rows (the learners' BN statistics averaged)
// Sums over learners run in row order for every element, whatever the split over the pool, so
// results do not depend on the number of threads. With one row, alpha 0 and no nesterov, SmaStep
// computes exactly what SgdStep computes (the same operations in the same order).
#include <algorithm>
#include <atomic>
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/kernel_util.h"
#include "runtime/ops/params.h"

namespace cb::cpu {

namespace {
// Elements per block: each learner's row of a block is streamed in turn while the block's sums
// stay in L1.
constexpr int64_t kBlock = 1024;

struct StepScalars {
  float lr, mu, wd, alpha;
  bool first, momentum, nesterov, decay;
};

// SmaStep's update of n elements of one learner's row (pointers at the block's start). The
// buffers never overlap (__restrict) and the flags are selects, not branches, so the loop
// vectorises; every element still sees the same operations in the same order as the scalar loop,
// so results are bit-identical to it (and to SgdStep). Not CB_CPU_CLONES: the FMA targets would
// contract a * b + c into one rounding and break that identity.
template <bool kPull, bool kMomentum>
void step_row(float* __restrict w, float* __restrict sn, const float* __restrict g,
              float* __restrict buf, const float* __restrict z, float* __restrict sum, int64_t n,
              StepScalars s) {
  const float lr = s.lr, mu = s.mu, wd = s.wd, alpha = s.alpha;
  const bool first = s.first, nesterov = s.nesterov, decay = s.decay, pull_theta = alpha != 0;
  for (int64_t i = 0; i < n; ++i) {
    const float th = w[i];
    sn[i] = th;
    float d = g[i];
    d = decay ? d + wd * th : d;  // g = grad + wd * theta
    if constexpr (kMomentum) {
      const float vm = buf[i] * mu + d;
      const float v = first ? d : vm;  // v = mu v + g (first step: v = g)
      buf[i] = v;
      d = nesterov ? d + mu * v : v;
    }
    float nw = th + (-lr) * d;  // theta - lr v
    if constexpr (kPull) {
      const float c = alpha * (th - z[i]);  // c = alpha (theta - z), pre-step theta
      nw = pull_theta ? nw - c : nw;        // (alpha 0: theta exactly as SgdStep leaves it)
      sum[i] = sum[i] + c;
    }
    w[i] = nw;
  }
}
}  // namespace

void SmaStep(const KernelArgs& a) {
  const auto& p = a.p<ops::SmaStepParams>();
  const TensorView &param = a.in.at(0), &grad = a.in.at(1), &vel = a.in.at(2), &snap = a.in.at(3);
  const TensorView* zv = a.in.size() > 4 && a.in[4].present() ? &a.in[4] : nullptr;
  const TensorView* sv = a.in.size() > 5 && a.in[5].present() ? &a.in[5] : nullptr;
  const int64_t rows = static_cast<int64_t>(p.first_step.size());
  CB_CHECK(rows >= 1 && param.numel() % rows == 0);
  const int64_t n = param.numel() / rows;
  CB_CHECK(grad.numel() == param.numel() && vel.numel() == param.numel() &&
           snap.numel() == param.numel());
  CB_CHECK(param.dtype == DType::F32 && grad.dtype == DType::F32 && vel.dtype == DType::F32 &&
           snap.dtype == DType::F32);
  const bool pull = zv && sv;
  if (pull) CB_CHECK(zv->numel() == n && sv->numel() == n);
  float* w = param.ptr<float>();
  const float* g = grad.ptr<float>();
  float* buf = vel.ptr<float>();
  float* sn = snap.ptr<float>();
  const float* z = pull ? zv->ptr<float>() : nullptr;
  float* sum = pull ? sv->ptr<float>() : nullptr;
  const float lr = p.lr, mu = p.momentum, wd = p.weight_decay, alpha = p.alpha;
  const bool momentum = p.momentum != 0, nesterov = p.nesterov, decay = p.weight_decay != 0;
  parallel(a, n, 8 * rows, [&](int64_t b, int64_t e) {
    for (int64_t b0 = b; b0 < e; b0 += kBlock) {
      const int64_t e0 = std::min(e, b0 + kBlock);
      if (pull) std::fill(sum + b0, sum + e0, 0.0f);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t o = r * n + b0;
        const StepScalars sc{
            lr,       mu,       wd,   alpha, p.first_step[static_cast<size_t>(r)] != 0,
            momentum, nesterov, decay};
        float* const v = momentum ? buf + o : nullptr;
        const float* const zb = pull ? z + b0 : nullptr;
        float* const sb = pull ? sum + b0 : nullptr;
        if (pull && momentum)
          step_row<true, true>(w + o, sn + o, g + o, v, zb, sb, e0 - b0, sc);
        else if (pull)
          step_row<true, false>(w + o, sn + o, g + o, v, zb, sb, e0 - b0, sc);
        else if (momentum)
          step_row<false, true>(w + o, sn + o, g + o, v, zb, sb, e0 - b0, sc);
        else
          step_row<false, false>(w + o, sn + o, g + o, v, zb, sb, e0 - b0, sc);
      }
    }
  });
}

void SmaCentralStep(const KernelArgs& a) {
  const auto& p = a.p<ops::SmaCentralStepParams>();
  const TensorView &zv = a.in.at(0), &pv = a.in.at(1), &sv = a.in.at(2), &out = a.out.at(0);
  const int64_t n = zv.numel();
  CB_CHECK(pv.numel() == n && sv.numel() == n && out.numel() == 1);
  CB_CHECK(zv.dtype == DType::F32 && out.dtype == DType::F32);
  float* z = zv.ptr<float>();
  float* zp = pv.ptr<float>();
  const float* s = sv.ptr<float>();
  const float mu = p.momentum;
  const bool momentum = mu != 0;
  std::atomic<int64_t> bad{0};
  parallel(a, n, 4, [&](int64_t b, int64_t e) {
    int64_t local = 0;
    for (int64_t i = b; i < e; ++i) {
      const float zi = z[i];
      float nz = zi + s[i];                       // z + sum_j c_j
      if (momentum) nz = nz + mu * (zi - zp[i]);  // + mu_z (z - z_prev)
      zp[i] = zi;
      z[i] = nz;
      local += !std::isfinite(nz);
    }
    if (local) bad += local;
  });
  out.ptr<float>()[0] = static_cast<float>(bad.load());
}

void SmaRowSum(const KernelArgs& a) {
  const auto& p = a.p<ops::SmaRowSumParams>();
  const TensorView &rows_v = a.in.at(0), &out = a.out.at(0);
  const int64_t n = out.numel();
  CB_CHECK(n > 0 && rows_v.numel() % n == 0 && rows_v.dtype == DType::F32 &&
           out.dtype == DType::F32);
  const int64_t rows = rows_v.numel() / n;
  const float* x = rows_v.ptr<float>();
  float* y = out.ptr<float>();
  const float scale = p.scale;
  parallel(a, n, rows, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = scale * x[i];
    for (int64_t r = 1; r < rows; ++r)
      for (int64_t i = b; i < e; ++i) y[i] = y[i] + scale * x[r * n + i];
  });
}

}  // namespace cb::cpu
