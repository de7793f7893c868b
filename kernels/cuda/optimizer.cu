// Optimizer and SMA kernels of the CUDA backend (mirroring kernels/cpu/optimizer.cpp and sma.cpp;
// contracts in runtime/ops/optimizer.cpp):
//   SgdStep(grad [P]) -> (param [P], velocity [P]?)            f32, f64
//   AdamWStep(grad [P]) -> (param [P], m [P], v [P])            f32, f64
//   SmaStep(grad [R,P], z [P]?) -> (param [R,P], opt1 [R,P]?, opt2 [R,P]?,
//                                   sum [P]?, steps i64 [R], norms [R]?, ema [P]?)    f32
//       Every [R,P] buffer is row-major: learner r's element j at r * P + j. With norms, first a
//       block per row sums its squares in double (not the CPU's order: the norm may differ in
//       its last bit). One kernel, one thread per parameter index j looping over the R learners
//       in row order (so sum[j] adds the corrections in the CPU's order), then a tiny launch of
//       R threads for steps[r] += 1 (the step kernel reads steps[r]).
//   SmaCentralStep(sum [P]) -> (z [P], z_prev [P], nonfinite f32 [1], ema [P]?)   f32, one kernel
//   SmaRowEma(rows [R,S]) -> ema [S]                            f32, SmaRowSum's mean folded into
//       the weight average: ema = d * ema + (1 - d) * mean
//   SmaRowSum(rows [R,S]) -> out [S]                            f32, out[i] = sum over r in row
//       order of scale * rows[r * S + i]
//
// Bit-identical to the CPU backend: the element math is the CPU's own functors
// (kernels/common/optimizer_math.h) instantiated on Rn<T> below, a float whose + - * / and sqrt
// are single IEEE round-to-nearest operations (the __f*_rn / __d*_rn intrinsics on the GPU), so
// that nvcc cannot contract a * b + c into an FMA (it does by default; the CPU build does not).
// SmaPull and SmaCentral (optimizer_math.h) run on Rn<float> too.
// Scalars PyTorch computes in doubles are prepared on the host as the CPU does, except SmaStep's
// AdamW bias corrections: steps[] lives on the device, so each block computes its rows' scalars
// (in doubles, with the device's pow) into shared memory before its elements.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/common/geometry.h"
#include "kernels/common/optimizer_math.h"
#include "kernels/common/scalar_math.h"
#include "kernels/cuda/launch.h"
#include "runtime/error.h"
#include "runtime/ops/params.h"

namespace cb::CB_GPU_NS {

namespace {

// ---- uncontracted arithmetic --------------------------------------------------------------------
template <class T>
CB_HOST_DEVICE inline T rn_add(T a, T b) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>)
    return __fadd_rn(a, b);
  else
    return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
template <class T>
CB_HOST_DEVICE inline T rn_sub(T a, T b) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>)
    return __fsub_rn(a, b);
  else
    return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
template <class T>
CB_HOST_DEVICE inline T rn_mul(T a, T b) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>)
    return __fmul_rn(a, b);
  else
    return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
template <class T>
CB_HOST_DEVICE inline T rn_div(T a, T b) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>)
    return __fdiv_rn(a, b);
  else
    return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
template <class T>
CB_HOST_DEVICE inline T rn_sqrt(T a) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>)
    return __fsqrt_rn(a);
  else
    return __dsqrt_rn(a);
#else
  return math::m_sqrt(a);
#endif
}

// A T whose every operation rounds once (never fused): the optimizer functors run on it.
template <class T>
struct Rn {
  T v;
  Rn() = default;
  template <class U>
  CB_HOST_DEVICE constexpr explicit Rn(U x) : v(static_cast<T>(x)) {}
};
template <class T>
CB_HOST_DEVICE inline Rn<T> operator+(Rn<T> a, Rn<T> b) {
  return Rn<T>(rn_add(a.v, b.v));
}
template <class T>
CB_HOST_DEVICE inline Rn<T> operator-(Rn<T> a, Rn<T> b) {
  return Rn<T>(rn_sub(a.v, b.v));
}
template <class T>
CB_HOST_DEVICE inline Rn<T> operator*(Rn<T> a, Rn<T> b) {
  return Rn<T>(rn_mul(a.v, b.v));
}
template <class T>
CB_HOST_DEVICE inline Rn<T> operator/(Rn<T> a, Rn<T> b) {
  return Rn<T>(rn_div(a.v, b.v));
}
template <class T>
CB_HOST_DEVICE inline Rn<T> operator-(Rn<T> a) {
  return Rn<T>(-a.v);
}
// Found by ADL from the functors' unqualified m_sqrt(x).
template <class T>
CB_HOST_DEVICE inline Rn<T> m_sqrt(Rn<T> a) {
  return Rn<T>(rn_sqrt(a.v));
}

using RnF = Rn<float>;

// math::AdamWScalars::make, callable on the device (same operations; pow is the device's).
CB_HOST_DEVICE inline math::AdamWScalars adamw_scalars(double lr, double beta1, double beta2,
                                                       double eps, double weight_decay,
                                                       int64_t step) {
  math::AdamWScalars s{};
  s.decay = rn_sub(1.0, rn_mul(lr, weight_decay));
  s.beta1 = beta1;
  s.beta2 = beta2;
  s.one_b1 = rn_sub(1.0, beta1);
  s.one_b2 = rn_sub(1.0, beta2);
  const double bc1 = rn_sub(1.0, pow(beta1, static_cast<double>(step)));
  const double bc2 = rn_sub(1.0, pow(beta2, static_cast<double>(step)));
  s.neg_step_size = -rn_div(lr, bc1);
  s.bc2_sqrt = rn_sqrt(bc2);
  s.eps = eps;
  s.decayed = weight_decay != 0;
  return s;
}

CB_HOST_DEVICE inline bool finite_f32(float x) {
  return (math::f32_bits(x) & 0x7f800000u) != 0x7f800000u;
}

// ---- a launch with per-row values ---------------------------------------------------------------
// rows(r): make(r), read from a per-block copy for the first n_cached rows.
template <class Make>
struct RowTable {
  const typename Make::Row* cached;
  int64_t n_cached;
  Make make;
  CB_HOST_DEVICE typename Make::Row operator()(int64_t r) const {
    return r < n_cached ? cached[r] : make(r);
  }
};

#if defined(CB_GPU_DEVICE_CODE)
template <class Make, class Body>
__global__ void rows_kernel(int64_t n, int64_t n_cached, Make make, Body body) {
  extern __shared__ __align__(16) unsigned char cb_rows_smem[];
  using Row = typename Make::Row;
  Row* rs = reinterpret_cast<Row*>(cb_rows_smem);
  for (int64_t r = threadIdx.x; r < n_cached; r += blockDim.x) rs[r] = make(r);
  __syncthreads();
  const RowTable<Make> rows{rs, n_cached, make};
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < n; j += step)
    body(j, rows);
}
#endif

// body(j, rows) for every j in [0, n) (as parallel_for), where rows(r) = make(r) for the
// n_rows rows is computed once per block (GPU: in shared memory) instead of once per element.
template <class Make, class Body>
void for_each_with_rows(const GpuCtx& c, int64_t n, int64_t n_rows, Make make, Body body) {
  if (n <= 0) return;
  using Row = typename Make::Row;
  constexpr int64_t kMaxCached = (16 * 1024) / static_cast<int64_t>(sizeof(Row));
  const int64_t cached = std::min(n_rows, kMaxCached);
#if defined(CB_GPU_DEVICE_CODE)
  constexpr int kBlock = 256;
  const int64_t blocks = std::min<int64_t>((n + kBlock - 1) / kBlock, int64_t{c.sm_count} * 32);
  rows_kernel<<<static_cast<unsigned>(blocks), kBlock, static_cast<size_t>(cached) * sizeof(Row),
                static_cast<cudaStream_t>(c.stream)>>>(n, cached, make, body);
  check_cuda(static_cast<int>(cudaGetLastError()), "SmaStep launch");
#else
  std::vector<Row> rs(static_cast<size_t>(cached));
  for (int64_t r = 0; r < cached; ++r) rs[static_cast<size_t>(r)] = make(r);
  const RowTable<Make> rows{rs.data(), cached, make};
  for (int64_t j = 0; j < n; ++j) body(j, rows);
#endif
}

// ---- SgdStep, AdamWStep -------------------------------------------------------------------------
template <class T>
void sgd_step(const KernelArgs& a, const GpuCtx& c) {
  const auto& p = a.p<ops::SgdParams>();
  const TensorView &grad = a.in.at(0), &param = a.out.at(0);
  const TensorView vel = a.out.size() > 1 ? a.out[1] : TensorView{};
  if (grad.numel() != param.numel() || grad.dtype != param.dtype)
    fail("SgdStep: grad ({} elements) and param ({} elements) differ", grad.numel(), param.numel());
  if (p.momentum != 0 && (vel.numel() != param.numel() || vel.dtype != param.dtype))
    fail("SgdStep: momentum needs a velocity buffer like param");
  T* w = param.ptr<T>();
  const T* g = grad.ptr<T>();
  T* buf = vel.ptr<T>();
  using R = Rn<T>;
  const math::SgdUpdate<R> up{R(static_cast<T>(p.lr)),
                              R(static_cast<T>(p.momentum)),
                              R(static_cast<T>(p.weight_decay)),
                              R(static_cast<T>(1) - static_cast<T>(p.dampening)),
                              p.momentum != 0,
                              p.nesterov,
                              p.weight_decay != 0,
                              p.first_step};
  parallel_for(c, param.numel(), [=] CB_HOST_DEVICE(int64_t i) {
    R v(buf ? buf[i] : T(0));
    w[i] = up(R(w[i]), R(g[i]), v).v;
    if (buf) buf[i] = v.v;
  });
}

template <class T>
void adamw_step(const KernelArgs& a, const GpuCtx& c) {
  const auto& p = a.p<ops::AdamWParams>();
  const TensorView &grad = a.in.at(0), &param = a.out.at(0), &mv = a.out.at(1), &vv = a.out.at(2);
  const int64_t n = param.numel();
  if (grad.numel() != n || mv.numel() != n || vv.numel() != n || grad.dtype != param.dtype ||
      mv.dtype != param.dtype || vv.dtype != param.dtype)
    fail("AdamWStep: grad, param, m and v must be alike");
  if (p.step < 1) fail("AdamWStep: step must be >= 1, got {}", p.step);
  const auto sc = math::AdamWScalars::make(p.lr, p.beta1, p.beta2, p.eps, p.weight_decay, p.step);
  using R = Rn<T>;
  const auto up = math::AdamWUpdate<R>::from(sc);
  T* w = param.ptr<T>();
  const T* g = grad.ptr<T>();
  T* m = mv.ptr<T>();
  T* v = vv.ptr<T>();
  parallel_for(c, n, [=] CB_HOST_DEVICE(int64_t i) {
    R mi(m[i]), vi(v[i]);
    w[i] = up(R(w[i]), R(g[i]), mi, vi).v;
    m[i] = mi.v;
    v[i] = vi.v;
  });
}

void SgdStep(const KernelArgs& a, const GpuCtx& c) {
  CB_GPU_DISPATCH_FLOAT(a.out.at(0).dtype, "SgdStep", sgd_step, a, c)
}
void AdamWStep(const KernelArgs& a, const GpuCtx& c) {
  CB_GPU_DISPATCH_FLOAT(a.out.at(0).dtype, "AdamWStep", adamw_step, a, c)
}

// ---- SmaStep ------------------------------------------------------------------------------------
// Learner r's functor: SGD's first step when steps[r] == 0; AdamW's bias correction at
// steps[r] + 1 (as the CPU's per-row functors).
struct SgdRow {
  using Row = math::SgdUpdate<RnF>;
  float lr, momentum, weight_decay;
  bool nesterov;
  const int64_t* steps;
  CB_HOST_DEVICE Row operator()(int64_t r) const {
    return {RnF(lr),       RnF(momentum), RnF(weight_decay), RnF(1.0f),
            momentum != 0, nesterov,      weight_decay != 0, steps[r] == 0};
  }
};
struct AdamWRow {
  using Row = math::AdamWUpdate<RnF>;
  double lr, beta1, beta2, eps, weight_decay;
  const int64_t* steps;
  CB_HOST_DEVICE Row operator()(int64_t r) const {
    return Row::from(adamw_scalars(lr, beta1, beta2, eps, weight_decay, steps[r] + 1));
  }
};

// The optimizer state a learner's step carries.
enum class State { None, Velocity, Adam };

// SmaStep's buffers (geom::SmaStepPlan: learner r's element j at r * n + j; absent ones null),
// the pull toward z and the weight average's mix (with s.ema).
struct SmaBuffers {
  geom::SmaStepPlan s;
  math::SmaPull pull;
  math::Ema mix;
  float ema_scale;
};

// Element j of every learner, in row order: step, pull, and the sum of corrections; with b.ema,
// the weight average of the stepped rows' mean (SmaRowEma's arithmetic).
template <State kState, bool kPull>
struct SmaStepBody {
  geom::SmaStepPlan b;
  math::SmaPull pull;
  math::Ema mix;
  float ema_scale;

  // Learner r's gradient element o, scaled by clip_grad_norm's factor where clipping.
  CB_HOST_DEVICE RnF grad(int64_t r, int64_t o) const {
    const RnF g(b.g[o]);
    return b.clip > 0 ? g * RnF(math::clip_coef(b.clip, b.norms[r])) : g;
  }

  template <class Rows>
  CB_HOST_DEVICE void operator()(int64_t j, const Rows& update_of) const {
    RnF s(0.0f);
    RnF zj(0.0f);
    RnF mean(0.0f);
    const RnF scale(ema_scale);
    if constexpr (kPull) zj = RnF(b.z[j]);
    for (int64_t r = 0; r < b.rows; ++r) {
      const int64_t o = r * b.n + j;
      const auto up = update_of(r);
      const RnF th(b.w[o]);
      RnF nw;
      if constexpr (kState == State::Adam) {
        RnF m(b.o1[o]), v(b.o2[o]);
        nw = up(th, grad(r, o), m, v);
        b.o1[o] = m.v;
        b.o2[o] = v.v;
      } else if constexpr (kState == State::Velocity) {
        RnF v(b.o1[o]);
        nw = up(th, grad(r, o), v);
        b.o1[o] = v.v;
      } else {
        RnF v(0.0f);  // no velocity without momentum
        nw = up(th, grad(r, o), v);
      }
      if constexpr (kPull) {
        const RnF cr = pull.correction(th, nw, zj);
        nw = pull.apply(nw, cr);
        s = s + cr;
      }
      b.w[o] = nw.v;
      if (b.ema) mean = r == 0 ? scale * nw : mean + scale * nw;
    }
    if constexpr (kPull) b.sum[j] = s.v;
    if (b.ema) b.ema[j] = mix(RnF(b.ema[j]), mean).v;
  }
};

template <State kState, class Make>
void sma_launch(const GpuCtx& c, const SmaBuffers& b, Make make, bool pull) {
  if (pull)
    for_each_with_rows(c, b.s.n, b.s.rows, make,
                       SmaStepBody<kState, true>{b.s, b.pull, b.mix, b.ema_scale});
  else
    for_each_with_rows(c, b.s.n, b.s.rows, make,
                       SmaStepBody<kState, false>{b.s, b.pull, b.mix, b.ema_scale});
}

void SmaStep(const KernelArgs& a, const GpuCtx& c) {
  const auto& p = a.p<ops::SmaStepParams>();
  const geom::SmaStepPlan sp = geom::sma_step_plan(a);
  const bool adamw = sp.adamw, momentum = sp.momentum, pull = sp.pull;
  int64_t* row_steps = sp.steps;
  const int64_t rows = sp.rows;
  const SmaBuffers b{sp, math::SmaPull{p.alpha, p.post}, math::Ema::make(p.ema_decay), p.ema_scale};
  if (sp.norms) {
    const float* g = sp.g;
    float* norms = sp.norms;
    const int64_t n = sp.n;
    segmented_reduce(
        c, rows, n, 0.0,
        [=] CB_HOST_DEVICE(int64_t r, int64_t j) {
          const double x = g[r * n + j];
          return x * x;
        },
        AddD{},
        [=] CB_HOST_DEVICE(int64_t r, double s2) { norms[r] = static_cast<float>(sqrt(s2)); });
  }
  const SgdRow sgd{p.lr, p.momentum, p.weight_decay, p.nesterov, row_steps};
  if (adamw)
    sma_launch<State::Adam>(
        c, b, AdamWRow{p.lr, p.beta1, p.beta2, p.eps, p.weight_decay, row_steps}, pull);
  else if (momentum)
    sma_launch<State::Velocity>(c, b, sgd, pull);
  else
    sma_launch<State::None>(c, b, sgd, pull);
  // After the step kernel (same stream), which read steps[r].
  parallel_for(c, rows, [=] CB_HOST_DEVICE(int64_t r) { row_steps[r] += 1; });
}

// ---- SmaCentralStep, SmaRowSum ------------------------------------------------------------------
void SmaCentralStep(const KernelArgs& a, const GpuCtx& c) {
  const auto& p = a.p<ops::SmaCentralStepParams>();
  const TensorView &sv = a.in.at(0), &zv = a.out.at(0), &pv = a.out.at(1), &out = a.out.at(2);
  const int64_t n = zv.numel();
  if (pv.numel() != n || sv.numel() != n || out.numel() != 1)
    fail("SmaCentralStep: sum, z and z_prev must have the same size, nonfinite 1 element");
  if (zv.dtype != DType::F32 || pv.dtype != DType::F32 || sv.dtype != DType::F32 ||
      out.dtype != DType::F32)
    fail("SmaCentralStep: f32 buffers only");
  float* z = zv.ptr<float>();
  float* zp = pv.ptr<float>();
  const float* s = sv.ptr<float>();
  float* bad = out.ptr<float>();
  const bool with_ema = a.out.size() > 3 && a.out[3].present();
  if (with_ema && (a.out[3].numel() != n || a.out[3].dtype != DType::F32))
    fail("SmaCentralStep: ema must be f32 with z's {} elements", n);
  float* ema = with_ema ? a.out[3].ptr<float>() : nullptr;
  const math::Ema mix = math::Ema::make(p.ema_decay);
  const math::SmaCentral central{p.momentum, p.scale};
  // The count: float adds of 1 (exact up to 2^24 non-finite values), only where there are any.
  fill_zero(c, bad, sizeof(float));
  parallel_for(c, n, [=] CB_HOST_DEVICE(int64_t i) {
    const RnF zi(z[i]);
    const RnF nz = central(zi, RnF(zp[i]), RnF(s[i]));
    zp[i] = zi.v;
    z[i] = nz.v;
    if (ema) ema[i] = mix(RnF(ema[i]), nz).v;
    if (!finite_f32(nz.v)) atomic_add(bad, 1.0f);
  });
}

// SmaRowSum's and SmaRowEma's operands: rows [R,S] in, out [S]; `what` names the op's contract.
struct RowsView {
  const float* x;
  float* y;
  int64_t rows, n;
};
RowsView rows_view(const KernelArgs& a, const char* what) {
  const TensorView &rows_v = a.in.at(0), &out = a.out.at(0);
  const int64_t n = out.numel();
  if (n <= 0 || rows_v.numel() % n != 0 || rows_v.dtype != DType::F32 || out.dtype != DType::F32)
    fail("{}", what);
  return {rows_v.ptr<float>(), out.ptr<float>(), rows_v.numel() / n, n};
}
// Element i of the sum over rows (in row order) of scale * x[r].
CB_HOST_DEVICE inline RnF scaled_row_sum(const RowsView& v, RnF scale, int64_t i) {
  RnF acc = scale * RnF(v.x[i]);
  for (int64_t r = 1; r < v.rows; ++r) acc = acc + scale * RnF(v.x[r * v.n + i]);
  return acc;
}

void SmaRowSum(const KernelArgs& a, const GpuCtx& c) {
  const RowsView v = rows_view(a, "SmaRowSum: f32 rows [R,S] and out [S] with S > 0");
  const RnF scale(a.p<ops::SmaRowSumParams>().scale);
  parallel_for(c, v.n, [=] CB_HOST_DEVICE(int64_t i) { v.y[i] = scaled_row_sum(v, scale, i).v; });
}

void SmaRowEma(const KernelArgs& a, const GpuCtx& c) {
  const auto& p = a.p<ops::SmaRowEmaParams>();
  const RowsView v = rows_view(a, "SmaRowEma: f32 rows [R,S] and ema [S] with S > 0");
  const RnF scale(p.scale);
  const math::Ema mix = math::Ema::make(p.decay);
  parallel_for(c, v.n, [=] CB_HOST_DEVICE(int64_t i) {
    v.y[i] = mix(RnF(v.y[i]), scaled_row_sum(v, scale, i)).v;
  });
}

constexpr GpuKernel kKernels[] = {
    {OpKind::AdamWStep, &AdamWStep, kFloat},         {OpKind::SgdStep, &SgdStep, kFloat},
    {OpKind::SmaCentralStep, &SmaCentralStep, kF32}, {OpKind::SmaRowEma, &SmaRowEma, kF32},
    {OpKind::SmaRowSum, &SmaRowSum, kF32},           {OpKind::SmaStep, &SmaStep, kF32},
};

}  // namespace

std::span<const GpuKernel> optimizer_kernels() { return kKernels; }

}  // namespace cb::CB_GPU_NS
