// The op harness's scalar references (tests/test_backend_ops.cpp): f64 computations for the cases
// whose ops have no f64 kernel, or whose results an f64 kernel cannot express (integer Cast,
// constants, the optimizer and SMA steps, SoftmaxCrossEntropyLoss checked apart from its kernels).
// Each RefFn gets f64 copies of the inputs and fills f64 outputs (in-place outputs hold their
// starting values). make_tensor and put are the harness's own (defined with it).
#include <algorithm>
#include <any>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/ops/params.h"
#include "runtime/tensor.h"
#include "tests/backend_ops/case.h"

namespace cb::test::bops {

TensorPtr tensor_of(DType t, std::vector<int64_t> dims, std::vector<double> v) {
  auto r = std::make_shared<Tensor>(make_tensor(t, std::move(dims)));
  for (int64_t i = 0; i < r->numel(); ++i) put(*r, i, v.at(static_cast<size_t>(i)));
  return r;
}

// Cast from an integer (or bool) source: integer targets wrap (compare() wraps the exact value),
// float targets round as the kernel does (through f32), bool is x != 0.
void ref_cast_int(const std::any& params, std::vector<Tensor>& in, std::vector<Tensor>& out) {
  const DType to = std::any_cast<const ops::CastParams&>(params).to;
  Tensor one = make_tensor(to, {});
  for (int64_t i = 0; i < in.at(0).numel(); ++i) {
    double v = in[0].data<double>()[i];
    if (dtype_is_float(to)) {
      put(one, 0, v);
      v = one.real_at(0);
    }
    out.at(0).data<double>()[i] = to == DType::Bool ? v != 0 : v;
  }
}

// Constant: its value.
void ref_constant(const std::any& params, std::vector<Tensor>&, std::vector<Tensor>& out) {
  const Tensor& v = *std::any_cast<const ops::ConstantParams&>(params).value;
  for (int64_t i = 0; i < v.numel(); ++i) out.at(0).data<double>()[i] = v.real_at(i);
}

// ConstantOfShape: its one value everywhere.
void ref_constant_of_shape(const std::any& params, std::vector<Tensor>&, std::vector<Tensor>& out) {
  const Tensor& v = *std::any_cast<const ops::ConstantParams&>(params).value;
  for (int64_t i = 0; i < out.at(0).numel(); ++i) out[0].data<double>()[i] = v.real_at(0);
}

// SmaStep (runtime/ops/optimizer.cpp): in grad [R,P], z [P]?; out param, opt1, opt2? [R,P],
// sum [P]?, steps i64 [R], norms [R]?, ema [P]? (param, opt1, opt2, steps and ema start with
// values).
void ref_sma_step(const std::any& params, std::vector<Tensor>& in, std::vector<Tensor>& out) {
  const auto& p = std::any_cast<const ops::SmaStepParams&>(params);
  const int64_t rows = out.at(4).numel();
  const int64_t n = rows ? out[0].numel() / rows : 0;
  const bool adamw = p.optimizer == ops::OptimizerKind::AdamW;
  const double* g = in[0].data<double>();
  const bool pull = in.size() > 1 && !in[1].bytes.empty() && !out[3].bytes.empty();
  const double* z = pull ? in[1].data<double>() : nullptr;
  double *w = out[0].data<double>(), *v = out[1].data<double>(),
         *v2 = adamw ? out[2].data<double>() : nullptr,
         *sum = pull ? out[3].data<double>() : nullptr, *steps = out[4].data<double>();
  const double lr = p.lr, mu = p.momentum, wd = p.weight_decay, alpha = p.alpha;
  if (pull) std::fill(sum, sum + n, 0.0);
  double* norms = out.size() > 5 && !out[5].bytes.empty() ? out[5].data<double>() : nullptr;
  for (int64_t r = 0; r < rows; ++r) {
    double gs = 1;  // clip_grad_norm's factor
    if (norms) {
      double s2 = 0;
      for (int64_t i = 0; i < n; ++i) s2 += g[r * n + i] * g[r * n + i];
      norms[r] = std::sqrt(s2);
      if (p.clip_norm > 0) gs = std::min(1.0, p.clip_norm / (norms[r] + 1e-6));
    }
    const double step = steps[r] + 1;  // AdamW's 1-based step; SGD: the first when step == 1
    const double b1 = p.beta1, b2 = p.beta2;
    const double bc1 = 1 - std::pow(b1, step), bc2 = 1 - std::pow(b2, step);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t at = r * n + i;
      const double th = w[at];
      double nw;
      if (adamw) {
        const double gi = g[at] * gs;
        v[at] = b1 * v[at] + (1 - b1) * gi;
        v2[at] = b2 * v2[at] + (1 - b2) * gi * gi;
        const double denom = std::sqrt(v2[at]) / std::sqrt(bc2) + p.eps;
        nw = th * (1 - lr * wd) - lr / bc1 * v[at] / denom;
      } else {
        double d = g[at] * gs + wd * th;
        if (mu != 0) {
          v[at] = step == 1 ? d : mu * v[at] + d;
          d = p.nesterov ? d + mu * v[at] : v[at];
        }
        nw = th - lr * d;
      }
      if (pull) {
        const double c = alpha * ((p.post ? nw : th) - z[i]);
        if (!p.post) nw -= c;
        sum[i] += c;
      }
      w[at] = nw;
    }
    steps[r] = step;
  }
  if (out.size() > 6 && !out[6].bytes.empty()) {
    double* ema = out[6].data<double>();
    const double d = p.ema_decay;
    for (int64_t i = 0; i < n; ++i) {
      double m = 0;
      for (int64_t r = 0; r < rows; ++r) m += p.ema_scale * w[r * n + i];
      ema[i] = d * ema[i] + (1 - d) * m;
    }
  }
}

// SmaCentralStep: in sum; out z, z_prev (starting values), nonfinite:
// z' = z + scale sum + mu (z - z_prev); z_prev = z; nonfinite = count of non-finite z'.
void ref_sma_central_step(const std::any& params, std::vector<Tensor>& in,
                          std::vector<Tensor>& out) {
  const auto& p = std::any_cast<const ops::SmaCentralStepParams&>(params);
  const double mu = p.momentum, d = p.ema_decay, scale = p.scale;
  const double* s = in[0].data<double>();
  double *z = out[0].data<double>(), *zp = out[1].data<double>();
  double* ema = out.size() > 3 && out[3].numel() > 0 ? out[3].data<double>() : nullptr;
  double bad = 0;
  for (int64_t i = 0; i < out[0].numel(); ++i) {
    const double nz = z[i] + scale * s[i] + mu * (z[i] - zp[i]);
    zp[i] = z[i];
    z[i] = nz;
    if (ema) ema[i] = d * ema[i] + (1 - d) * nz;
    bad += !std::isfinite(nz);
  }
  out.at(2).data<double>()[0] = bad;
}

// SmaRowSum: out[i] = sum over rows of scale * rows[r][i].
void ref_sma_row_sum(const std::any& params, std::vector<Tensor>& in, std::vector<Tensor>& out) {
  const double scale = std::any_cast<const ops::SmaRowSumParams&>(params).scale;
  const int64_t n = out.at(0).numel(), rows = in[0].numel() / n;
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t r = 0; r < rows; ++r) s += scale * in[0].data<double>()[r * n + i];
    out[0].data<double>()[i] = s;
  }
}

// SmaRowEma: ema[i] = d * ema[i] + (1 - d) * sum over rows of scale * rows[r][i].
void ref_sma_row_ema(const std::any& params, std::vector<Tensor>& in, std::vector<Tensor>& out) {
  const auto& p = std::any_cast<const ops::SmaRowEmaParams&>(params);
  const double d = p.decay;
  const int64_t n = out.at(0).numel(), rows = in[0].numel() / n;
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t r = 0; r < rows; ++r) s += p.scale * in[0].data<double>()[r * n + i];
    double& e = out[0].data<double>()[i];
    e = d * e + (1 - d) * s;
  }
}

// SoftmaxCrossEntropyLoss, the ONNX definition element by element: scores [N,C,d..], labels
// [N,d..], weights? [C]; loss = -w[l] * log_softmax(scores, axis 1)[l], 0 where l is ignored;
// mean divides by the sum of w[l] over the elements not ignored. Label smoothing e (PyTorch's
// definition, no weights): loss = (1 - e) * (-lp[l]) + e * mean_c(-lp[c]).
namespace {
struct SceRef {
  int64_t n = 0, c = 0, d = 1;
  std::vector<double> lp;       // log_softmax, like scores
  std::vector<double> w;        // per element: w[label], 0 where ignored
  std::vector<int64_t> labels;  // per element
  double divisor = 0;
};
SceRef sce_ref(const ops::SoftmaxCrossEntropyLossParams& p, const Tensor& scores,
               const Tensor& labels, const Tensor* weights) {
  SceRef r;
  r.n = scores.dims.at(0);
  r.c = scores.dims.at(1);
  for (size_t k = 2; k < scores.dims.size(); ++k) r.d *= scores.dims[k];
  r.lp.resize(static_cast<size_t>(scores.numel()));
  for (int64_t i = 0; i < r.n; ++i)
    for (int64_t j = 0; j < r.d; ++j) {
      auto at = [&](int64_t k) { return (i * r.c + k) * r.d + j; };
      double mx = -INFINITY, s = 0;
      for (int64_t k = 0; k < r.c; ++k) mx = std::max(mx, scores.real_at(at(k)));
      for (int64_t k = 0; k < r.c; ++k) s += std::exp(scores.real_at(at(k)) - mx);
      for (int64_t k = 0; k < r.c; ++k)
        r.lp[static_cast<size_t>(at(k))] = scores.real_at(at(k)) - mx - std::log(s);
    }
  for (int64_t e = 0; e < labels.numel(); ++e) {
    auto l = static_cast<int64_t>(labels.real_at(e));
    const bool ignored = p.ignore_index && l == *p.ignore_index;
    r.labels.push_back(l);
    r.w.push_back(ignored ? 0.0 : weights ? weights->real_at(l) : 1.0);
    r.divisor += ignored ? 0.0 : r.w.back();
  }
  return r;
}
const Tensor* optional_in(std::vector<Tensor>& in, size_t k) {
  return in.size() > k && !in[k].bytes.empty() ? &in[k] : nullptr;
}
}  // namespace

void ref_sce(const std::any& params, std::vector<Tensor>& in, std::vector<Tensor>& out) {
  const auto& p = std::any_cast<const ops::SoftmaxCrossEntropyLossParams&>(params);
  const SceRef r = sce_ref(p, in.at(0), in.at(1), optional_in(in, 2));
  double total = 0;
  for (int64_t e = 0; e < r.n * r.d; ++e) {
    const auto ue = static_cast<size_t>(e);
    const int64_t i = e / r.d, j = e % r.d;
    double li =
        r.w[ue] == 0 ? 0 : -r.w[ue] * r.lp[static_cast<size_t>((i * r.c + r.labels[ue]) * r.d + j)];
    if (p.label_smoothing > 0 && r.w[ue] != 0) {
      double smooth = 0;
      for (int64_t k = 0; k < r.c; ++k)
        smooth -= r.lp[static_cast<size_t>((i * r.c + k) * r.d + j)];
      li = (1 - p.label_smoothing) * li + p.label_smoothing * smooth / static_cast<double>(r.c);
    }
    if (p.reduction == ops::SoftmaxCrossEntropyLossParams::Reduction::None)
      out.at(0).data<double>()[e] = li;
    total += li;
  }
  if (p.reduction != ops::SoftmaxCrossEntropyLossParams::Reduction::None)
    out.at(0).data<double>()[0] = p.reduction == ops::SoftmaxCrossEntropyLossParams::Reduction::Mean
                                      ? total / r.divisor
                                      : total;
  if (out.size() > 1 && !out[1].bytes.empty())
    for (size_t k = 0; k < r.lp.size(); ++k) out[1].data<double>()[k] = r.lp[k];
}

// SoftmaxCrossEntropyLossGrad: in dloss, scores, labels, weights?; out dscores =
// (softmax - onehot(label)) * w[label] * dloss (/ divisor for mean); with label smoothing e the
// target is (1 - e) * onehot(label) + e / C.
void ref_sce_grad(const std::any& params, std::vector<Tensor>& in, std::vector<Tensor>& out) {
  const auto& p = std::any_cast<const ops::SoftmaxCrossEntropyLossParams&>(params);
  const SceRef r = sce_ref(p, in.at(1), in.at(2), optional_in(in, 3));
  using R = ops::SoftmaxCrossEntropyLossParams::Reduction;
  for (int64_t e = 0; e < r.n * r.d; ++e) {
    const auto ue = static_cast<size_t>(e);
    const int64_t i = e / r.d, j = e % r.d;
    double g = in[0].real_at(p.reduction == R::None ? e : 0) * r.w[ue];
    if (p.reduction == R::Mean) g /= r.divisor;
    for (int64_t k = 0; k < r.c; ++k) {
      const int64_t at = (i * r.c + k) * r.d + j;
      const double e = p.label_smoothing;
      const double target = (k == r.labels[ue] ? 1.0 - e : 0.0) + e / static_cast<double>(r.c);
      out.at(0).data<double>()[at] = (std::exp(r.lp[static_cast<size_t>(at)]) - target) * g;
    }
  }
}

// AttentionHeads' chains (tests/backend_ops/attention.h) as attention, per example n and head h,
// [N,T,H,d] inputs: forward P = softmax(masked(scale Q K^T)), O = P V; backward dP = dO V^T,
// dV = P^T dO, dS = scale P (dP - rowsum(dP P)) (0 where masked), dQ = dS K, dK = dS^T Q.
void ref_attention(const std::any& params, std::vector<Tensor>& in, std::vector<Tensor>& out) {
  const auto& hp = std::any_cast<const ops::AttentionHeadsParams&>(params);
  const bool forward = hp.steps.size() == 3;
  const auto& sp = hp.steps[forward ? 1 : 2].softmax;
  using K = ops::MaskedSoftmaxParams::Mask;
  const Tensor& x0 = in.at(0);
  const int64_t N = x0.dims[0], T = x0.dims[1], H = x0.dims[2], D = x0.dims[3];
  // The mask: forward Q, K, mask?, V; backward dO, V, P, Q, K, mask?.
  const Tensor* mask =
      forward ? (in.size() == 4 ? &in[2] : nullptr) : (in.size() == 6 ? &in[5] : nullptr);
  // Whether (i, j) is masked out (a Where mask, [T,T]), and the additive mask of example n.
  auto masked = [&](int64_t i, int64_t j) {
    if (!mask || sp.mask == K::Add) return false;
    const bool m = mask->real_at(i * T + j) != 0;  // the [T,T] causal mask
    return m == (sp.mask == K::FillWhereTrue);
  };
  auto add = [&](int64_t n, int64_t j) {
    return mask && sp.mask == K::Add ? mask->data<double>()[n * T + j] : 0.0;
  };
  auto at = [&](const Tensor& t, int64_t n, int64_t i, int64_t h, int64_t c) {
    return t.data<double>()[((n * T + i) * H + h) * D + c];
  };
  auto put4 = [&](Tensor& t, int64_t n, int64_t i, int64_t h, int64_t c, double v) {
    t.data<double>()[((n * T + i) * H + h) * D + c] = v;
  };
  std::vector<double> p(static_cast<size_t>(T * T)), g(static_cast<size_t>(T * T));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h) {
      double* ph = p.data();
      if (forward) {
        const Tensor &q = in[0], &k = in[1], &v = in[mask ? 3 : 2];
        for (int64_t i = 0; i < T; ++i) {
          double mx = -std::numeric_limits<double>::infinity();
          for (int64_t j = 0; j < T; ++j) {
            double s = 0;
            for (int64_t c = 0; c < D; ++c) s += at(q, n, i, h, c) * at(k, n, j, h, c);
            ph[i * T + j] =
                masked(i, j) ? -std::numeric_limits<double>::infinity() : s * sp.scale + add(n, j);
            mx = std::max(mx, ph[i * T + j]);
          }
          double sum = 0;
          for (int64_t j = 0; j < T; ++j) sum += ph[i * T + j] = std::exp(ph[i * T + j] - mx);
          for (int64_t j = 0; j < T; ++j) {
            ph[i * T + j] /= sum;
            out[0].data<double>()[((n * H + h) * T + i) * T + j] = ph[i * T + j];
          }
        }
        for (int64_t i = 0; i < T; ++i)
          for (int64_t c = 0; c < D; ++c) {
            double o = 0;
            for (int64_t j = 0; j < T; ++j) o += ph[i * T + j] * at(v, n, j, h, c);
            put4(out[1], n, i, h, c, o);
          }
        continue;
      }
      const Tensor &dO = in[0], &v = in[1], &pt = in[2], &q = in[3], &k = in[4];
      for (int64_t i = 0; i < T * T; ++i) ph[i] = pt.data<double>()[(n * H + h) * T * T + i];
      for (int64_t i = 0; i < T; ++i) {
        double dot = 0;
        for (int64_t j = 0; j < T; ++j) {
          double s = 0;
          for (int64_t c = 0; c < D; ++c) s += at(dO, n, i, h, c) * at(v, n, j, h, c);
          g[static_cast<size_t>(i * T + j)] = s;
          dot += s * ph[i * T + j];
        }
        for (int64_t j = 0; j < T; ++j) {
          double& gs = g[static_cast<size_t>(i * T + j)];
          gs = masked(i, j) ? 0.0 : sp.scale * ph[i * T + j] * (gs - dot);
        }
      }
      for (int64_t j = 0; j < T; ++j)
        for (int64_t c = 0; c < D; ++c) {
          double dv = 0, dq = 0, dk = 0;
          for (int64_t i = 0; i < T; ++i) {
            dv += ph[i * T + j] * at(dO, n, i, h, c);
            dq += g[static_cast<size_t>(j * T + i)] * at(k, n, i, h, c);
            dk += g[static_cast<size_t>(i * T + j)] * at(q, n, i, h, c);
          }
          put4(out[0], n, j, h, c, dv);
          put4(out[1], n, j, h, c, dq);
          put4(out[2], n, j, h, c, dk);
        }
    }
}

}  // namespace cb::test::bops
