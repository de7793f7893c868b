// SMA's fused kernels over [R][P] flat buffers (contracts in runtime/ops/optimizer.cpp; element
// math in kernels/common/optimizer_math.h, shared with every backend):
//   SmaStep         every learner's optimizer step and SMA correction, and the intra-device sum
//                   of the corrections, in one pass (with --clip-grad-norm, after a pass that
//                   sums each learner's squared gradients: its step reads them scaled)
//   SmaCentralStep  the central model's update from the (all-reduced) sum
//   SmaRowSum       a scaled sum of rows (the learners' BN statistics averaged)
//   SmaRowEma       the weight average (--ema) of such a sum
// Sums over learners run in row order for every element, whatever the split over the pool, so
// results do not depend on the number of threads. With one row and alpha 0, SmaStep computes
// exactly what SgdStep / AdamWStep compute (the same functors).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "kernels/common/geometry.h"
#include "kernels/common/optimizer_math.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/kernel_util.h"
#include "runtime/ops/params.h"

namespace cb::cpu {

namespace {
// Elements per block: each learner's row of a block is streamed in turn while the block's sums
// stay in L1.
constexpr int64_t kBlock = 1024;

// One learner's n elements (pointers at the block's start). The buffers never overlap
// (__restrict) and the functors' flags are selects, so the loop vectorises while every element
// sees the same operations in the same order as SgdStep / AdamWStep (step_blocks' clones too:
// -ffp-contract=off keeps a * b + c two roundings).
// gs scales the gradient (clip_grad_norm's factor; 1 leaves every value as it is).
template <bool kPull, bool kState, class Update>
void step_row(float* __restrict w, const float* __restrict g, float* __restrict o1,
              float* __restrict o2, const float* __restrict z, float* __restrict sum, int64_t n,
              const Update& update, math::SmaPull pull, float gs) {
  const Update up = update;  // a local copy: stores through w, o1... cannot change its fields
  for (int64_t i = 0; i < n; ++i) {
    const float th = w[i];
    float nw;
    if constexpr (std::is_same_v<Update, math::SgdUpdate<float>>) {
      float v = kState ? o1[i] : 0.0f;  // no velocity without momentum
      nw = up(th, g[i] * gs, v);
      if constexpr (kState) o1[i] = v;
    } else {
      nw = up(th, g[i] * gs, o1[i], o2[i]);
    }
    if constexpr (kPull) {
      const float c = pull.correction(th, nw, z[i]);
      nw = pull.apply(nw, c);
      sum[i] = sum[i] + c;
    }
    w[i] = nw;
  }
}
// Elements per partial sum of a row's squared norm: the partials are added in order, so the norm
// does not depend on the pool's split.
constexpr int64_t kNormChunk = 16384;

// norms[r] = the L2 norm of row r of g [rows][n], summed in double.
void row_norms(const float* g, int64_t rows, int64_t n, float* norms) {
  const int64_t chunks = (n + kNormChunk - 1) / kNormChunk;
  thread_local std::vector<double> part_buf;
  std::vector<double>& part = part_buf;
  part.assign(static_cast<size_t>(rows * chunks), 0.0);
  parallel(rows * chunks, kNormChunk, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      const int64_t r = c / chunks, j0 = (c % chunks) * kNormChunk;
      const int64_t j1 = std::min(n, j0 + kNormChunk);
      const float* x = g + r * n;
      double acc[8] = {};  // eight lanes (a fixed order: vectorisable, thread-count free)
      int64_t j = j0;
      for (; j + 8 <= j1; j += 8)
        for (int l = 0; l < 8; ++l) acc[l] += static_cast<double>(x[j + l]) * x[j + l];
      for (; j < j1; ++j) acc[0] += static_cast<double>(x[j]) * x[j];
      part[static_cast<size_t>(c)] =
          ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    }
  });
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (int64_t c = 0; c < chunks; ++c) s += part[static_cast<size_t>(r * chunks + c)];
    norms[r] = static_cast<float>(std::sqrt(s));
  }
}

// SmaRowSum's and SmaRowEma's operands: rows [R,S] in, out [S].
struct RowsView {
  const float* x;
  float* y;
  int64_t rows, n;
};
RowsView rows_view(const KernelArgs& a) {
  const TensorView &rows_v = a.in.at(0), &out = a.out.at(0);
  const int64_t n = out.numel();
  CB_CHECK(n > 0 && rows_v.numel() % n == 0 && rows_v.dtype == DType::F32 &&
           out.dtype == DType::F32);
  return {rows_v.ptr<float>(), out.ptr<float>(), rows_v.numel() / n, n};
}
// out[i] = sum over r (in row order) of scale * x[r][i0 + i], for i < len.
void scaled_row_sum(const RowsView& v, float scale, int64_t i0, int64_t len, float* out) {
  for (int64_t i = 0; i < len; ++i) out[i] = scale * v.x[i0 + i];
  for (int64_t r = 1; r < v.rows; ++r)
    for (int64_t i = 0; i < len; ++i) out[i] = out[i] + scale * v.x[r * v.n + i0 + i];
}

// One launch's rows and per-row functors; step_blocks runs elements [b, e) of every row, a block
// at a time: each learner's step (and pull) in row order, then the block's weight average.
struct StepBlocks {
  geom::SmaStepPlan sp;
  const math::SgdUpdate<float>* sgd;
  const math::AdamWUpdate<float>* adam;
  const float* gscale;
  math::SmaPull pl;
  math::Ema mix;
  float ema_scale;
};

// Cloned per x86-64 level (AVX-512 rows): the file is built with -ffp-contract=off
// (CMakeLists.txt), so no clone fuses a * b + c into one rounding and every clone computes the
// bits SgdStep / AdamWStep compute.
CB_CPU_CLONES void step_blocks(const StepBlocks& c, int64_t b, int64_t e) {
  const geom::SmaStepPlan& sp = c.sp;
  const int64_t rows = sp.rows, n = sp.n;
  const bool adamw = sp.adamw, pull = sp.pull;
  float *w = sp.w, *o1 = sp.o1, *o2 = sp.o2, *sum = sp.sum, *ema = sp.ema;
  const float *g = sp.g, *z = sp.z;
  const math::SmaPull pl = c.pl;
  for (int64_t b0 = b; b0 < e; b0 += kBlock) {
    const int64_t e0 = std::min(e, b0 + kBlock);
    if (pull) std::fill(sum + b0, sum + e0, 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t o = r * n + b0;
      float* const p1 = o1 ? o1 + o : nullptr;
      float* const p2 = o2 ? o2 + o : nullptr;
      const float* const zb = pull ? z + b0 : nullptr;
      float* const sb = pull ? sum + b0 : nullptr;
      const float gs = c.gscale[r];
      if (adamw) {
        if (pull)
          step_row<true, true>(w + o, g + o, p1, p2, zb, sb, e0 - b0, c.adam[r], pl, gs);
        else
          step_row<false, true>(w + o, g + o, p1, p2, zb, sb, e0 - b0, c.adam[r], pl, gs);
      } else if (p1) {
        if (pull)
          step_row<true, true>(w + o, g + o, p1, p2, zb, sb, e0 - b0, c.sgd[r], pl, gs);
        else
          step_row<false, true>(w + o, g + o, p1, p2, zb, sb, e0 - b0, c.sgd[r], pl, gs);
      } else {
        if (pull)
          step_row<true, false>(w + o, g + o, p1, p2, zb, sb, e0 - b0, c.sgd[r], pl, gs);
        else
          step_row<false, false>(w + o, g + o, p1, p2, zb, sb, e0 - b0, c.sgd[r], pl, gs);
      }
    }
    if (ema) {  // the block's stepped rows, still in cache
      float m[kBlock];
      const RowsView v{w, nullptr, rows, n};
      scaled_row_sum(v, c.ema_scale, b0, e0 - b0, m);
      for (int64_t i = 0; i < e0 - b0; ++i) ema[b0 + i] = c.mix(ema[b0 + i], m[i]);
    }
  }
}
}  // namespace

void SmaStep(const KernelArgs& a) {
  const auto& p = a.p<ops::SmaStepParams>();
  const geom::SmaStepPlan sp = geom::sma_step_plan(a);
  const int64_t rows = sp.rows, n = sp.n;
  const bool adamw = sp.adamw;
  const float* g = sp.g;
  int64_t* row_steps = sp.steps;
  // Per-row functors (the first SGD step, AdamW's bias correction), prepared once per launch.
  // (Reused per thread: no allocation in the steady state.)
  // The pool's threads must see this thread's vectors: local references, not the thread_locals.
  thread_local std::vector<math::SgdUpdate<float>> sgd_rows;
  thread_local std::vector<math::AdamWUpdate<float>> adam_rows;
  std::vector<math::SgdUpdate<float>>& sgd = sgd_rows;
  std::vector<math::AdamWUpdate<float>>& adam = adam_rows;
  thread_local std::vector<float> scale_rows;
  std::vector<float>& gscale = scale_rows;
  sgd.clear();
  adam.clear();
  gscale.assign(static_cast<size_t>(rows), 1.0f);
  if (sp.norms) row_norms(g, rows, n, sp.norms);
  if (sp.clip > 0)
    for (int64_t r = 0; r < rows; ++r)
      gscale[static_cast<size_t>(r)] = math::clip_coef(sp.clip, sp.norms[r]);
  for (int64_t r = 0; r < rows; ++r) {
    if (adamw)
      adam.push_back(math::AdamWUpdate<float>::from(math::AdamWScalars::make(
          p.lr, p.beta1, p.beta2, p.eps, p.weight_decay, row_steps[r] + 1)));
    else
      sgd.push_back({p.lr, p.momentum, p.weight_decay, 1.0f, p.momentum != 0, p.nesterov,
                     p.weight_decay != 0, row_steps[r] == 0});
  }
  const StepBlocks sb{sp,
                      sgd.data(),
                      adam.data(),
                      gscale.data(),
                      math::SmaPull{p.alpha, p.post},
                      math::Ema::make(p.ema_decay),
                      p.ema_scale};
  parallel(n, 8 * rows, [&](int64_t b, int64_t e) { step_blocks(sb, b, e); });
  for (int64_t r = 0; r < rows; ++r) ++row_steps[r];
}

void SmaCentralStep(const KernelArgs& a) {
  const auto& p = a.p<ops::SmaCentralStepParams>();
  const TensorView &sv = a.in.at(0), &zv = a.out.at(0), &pv = a.out.at(1), &out = a.out.at(2);
  const int64_t n = zv.numel();
  CB_CHECK(pv.numel() == n && sv.numel() == n && out.numel() == 1);
  CB_CHECK(zv.dtype == DType::F32 && out.dtype == DType::F32);
  const bool with_ema = a.out.size() > 3 && a.out[3].present();
  CB_CHECK(!with_ema || (a.out[3].numel() == n && a.out[3].dtype == DType::F32));
  float* z = zv.ptr<float>();
  float* zp = pv.ptr<float>();
  float* ema = with_ema ? a.out[3].ptr<float>() : nullptr;
  const float* s = sv.ptr<float>();
  const math::SmaCentral central{p.momentum, p.scale};
  const math::Ema mix = math::Ema::make(p.ema_decay);
  std::atomic<int64_t> bad{0};
  parallel(n, 4, [&](int64_t b, int64_t e) {
    int64_t local = 0;
    for (int64_t i = b; i < e; ++i) {
      const float zi = z[i];
      const float nz = central(zi, zp[i], s[i]);
      zp[i] = zi;
      z[i] = nz;
      local += !std::isfinite(nz);
    }
    if (ema)  // the same block, still in cache
      for (int64_t i = b; i < e; ++i) ema[i] = mix(ema[i], z[i]);
    if (local) bad += local;
  });
  out.ptr<float>()[0] = static_cast<float>(bad.load());
}

void SmaRowSum(const KernelArgs& a) {
  const float scale = a.p<ops::SmaRowSumParams>().scale;
  const RowsView v = rows_view(a);
  parallel(v.n, v.rows, [&](int64_t b, int64_t e) { scaled_row_sum(v, scale, b, e - b, v.y + b); });
}

void SmaRowEma(const KernelArgs& a) {
  const auto& p = a.p<ops::SmaRowEmaParams>();
  const RowsView v = rows_view(a);
  const math::Ema mix = math::Ema::make(p.decay);
  parallel(v.n, v.rows + 1, [&](int64_t b, int64_t e) {
    float m[kBlock];  // the mean, a block at a time
    for (int64_t b0 = b; b0 < e; b0 += kBlock) {
      const int64_t len = std::min(e, b0 + kBlock) - b0;
      scaled_row_sum(v, p.scale, b0, len, m);
      for (int64_t i = 0; i < len; ++i) v.y[b0 + i] = mix(v.y[b0 + i], m[i]);
    }
  });
}

}  // namespace cb::cpu
