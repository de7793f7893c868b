// Op harness cases of the optimizer and SMA steps (kernels/cpu/optimizer.cpp, sma.cpp) and of
// Dropout and its gradient (kernels/cpu/dropout.cpp): the ops kernels/cuda/optimizer.cu holds.
#pragma once

#include "tests/backend_ops/case.h"

namespace cb::test::bops {

// ---- dropout ------------------------------------------------------------------------------------
inline std::vector<Case> dropout(OpKind, DType) {
  auto ratio = [](double r) { return fixed(DType::F32, {}, list({r})); };
  auto mode = [](double m) { return fixed(DType::Bool, {}, list({m})); };
  return {
      {.name = "training", .in = {x({13, 7}), ratio(0.3), mode(1)}, .outputs = 2, .seed = 42},
      {.name = "training, no mask", .in = {x({5, 3}), ratio(0.5), mode(1)}, .seed = 7},
      {.name = "training, seed attribute",
       .in = {x({4, 9}), ratio(0.2), mode(1)},
       .attrs = {{"seed", int64_t{5}}},
       .outputs = 2,
       .seed = 3},
      {.name = "training large",
       .in = {x({3, 4099}), ratio(0.6), mode(1)},
       .outputs = 2,
       .seed = 11},
      {.name = "inference", .in = {x({13, 7}), ratio(0.3), mode(0)}, .outputs = 2, .seed = 42},
      {.name = "default: inference", .in = {x({6})}, .outputs = 2},
      {.name = "zero-size", .in = {x({0, 4}), ratio(0.3), mode(1)}, .outputs = 2, .seed = 1},
  };
}

inline std::vector<Case> dropout_grad(OpKind, DType) {
  auto c = [](std::vector<int64_t> d, double ratio) {
    return Case{
        .name = "mask",
        .in = {fwd_out(0), fixed(DType::Bool, d, ints(0, 1))},
        .fwd = Fwd{"Dropout",
                   {x(d), fixed(DType::F32, {}, list({ratio})), fixed(DType::Bool, {}, list({1}))},
                   {},
                   2}};
  };
  return {c({13, 7}, 0.3), c({3, 4099}, 0.6), c({0, 2}, 0.5)};
}

// ---- optimizer and SMA steps --------------------------------------------------------------------
// Inputs are read only; every buffer a step updates is an output that starts with drawn values
// (`inout`). No parse/infer: explicit params and outputs, launched without a graph; once the ops
// have infer(), the harness builds their graphs itself (params through emit_with).
void ref_sma_step(const std::any& params, std::vector<Tensor>& in, std::vector<Tensor>& out);
void ref_sma_central_step(const std::any& params, std::vector<Tensor>& in,
                          std::vector<Tensor>& out);
void ref_sma_row_sum(const std::any& params, std::vector<Tensor>& in, std::vector<Tensor>& out);
void ref_sma_row_ema(const std::any& params, std::vector<Tensor>& in, std::vector<Tensor>& out);

inline std::vector<Case> sgd_step(OpKind, DType) {
  std::vector<Case> cs;
  auto c = [&](std::string name, int64_t n, ops::SgdParams p) {
    cs.push_back({.name = std::move(name),
                  .in = {x({n})},
                  .params = p,
                  .outs = {inout(x({n})), p.momentum != 0 ? inout(x({n})) : absent()}});
  };
  c("plain", 13, {.lr = 0.1f});
  c("momentum, first step", 1000, {.lr = 0.05f, .momentum = 0.9f, .first_step = true});
  c("momentum, dampening, weight decay", 1000,
    {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-2f, .dampening = 0.1f, .first_step = false});
  c("nesterov, large", 20011,
    {.lr = 0.01f, .momentum = 0.8f, .nesterov = true, .first_step = false});
  c("empty", 0, {.lr = 0.1f, .momentum = 0.9f, .first_step = false});
  return cs;
}

inline std::vector<Case> adamw_step(OpKind, DType) {
  std::vector<Case> cs;
  auto c = [&](std::string name, int64_t n, ops::AdamWParams p) {
    cs.push_back({.name = std::move(name),
                  .in = {x({n})},
                  .params = p,
                  .outs = {inout(x({n})), inout(x({n}, uniform(-0.1, 0.1))),
                           inout(x({n}, uniform(0, 0.05)))}});
  };
  c("step 1", 13, {.lr = 1e-3f});
  c("step 7, no decay", 1000, {.lr = 1e-2f, .weight_decay = 0, .step = 7});
  c("large", 20011,
    {.lr = 1e-3f, .beta1 = 0.8f, .beta2 = 0.99f, .eps = 1e-6f, .weight_decay = 0.1f, .step = 3});
  return cs;
}

// SmaStep(grad [R,P], z [P]?) -> (param, opt1, opt2? [R,P], sum [P]?, steps i64 [R], norms [R]?,
// ema [P]?).
inline std::vector<Case> sma_step(OpKind, DType) {
  std::vector<Case> cs;
  auto c = [&](std::string name, int64_t rows, int64_t n, ops::SmaStepParams p, bool pull,
               std::vector<double> steps, bool norms = false, bool ema = false) {
    const bool adamw = p.optimizer == ops::OptimizerKind::AdamW;
    Case k{.name = std::move(name),
           .in = {x({rows, n})},
           .params = p,
           .outs = {inout(x({rows, n})),
                    inout(adamw ? x({rows, n}, uniform(-0.1, 0.1)) : x({rows, n})),
                    adamw ? inout(x({rows, n}, uniform(0, 0.05))) : absent(),
                    pull ? x({n}) : absent(), inout(fixed(DType::I64, {rows}, list(steps)))},
           .ref = ref_sma_step};
    if (pull) k.in.push_back(x({n}));
    if (norms || p.clip_norm > 0) k.outs.push_back(x({rows}));
    if (ema) {
      if (k.outs.size() < 6) k.outs.push_back(absent());
      k.outs.push_back(inout(x({n})));
    }
    cs.push_back(k);
  };
  c("pull, momentum", 3, 1000,
    {.lr = 0.05f, .weight_decay = 1e-3f, .momentum = 0.9f, .alpha = 0.3f}, true, {0, 1, 5});
  c("pull, nesterov, large", 2, 5003,
    {.lr = 0.05f, .momentum = 0.9f, .nesterov = true, .alpha = 0.5f}, true, {2, 3});
  c("no pull (local SGD)", 2, 13, {.lr = 0.1f, .momentum = 0.9f}, false, {1, 1});
  c("alpha 0, no momentum", 1, 77, {.lr = 0.1f, .alpha = 0}, true, {0});
  c("AdamW, pull", 2, 1000,
    {.optimizer = ops::OptimizerKind::AdamW, .lr = 1e-2f, .weight_decay = 1e-2f, .alpha = 0.2f},
    true, {0, 6});
  c("post-step correction, kept step (reset rules)", 3, 1000,
    {.lr = 0.05f, .weight_decay = 1e-3f, .momentum = 0.9f, .alpha = 1.0f / 3, .post = true}, true,
    {0, 2, 4});
  c("AdamW, post-step correction", 2, 1000,
    {.optimizer = ops::OptimizerKind::AdamW, .lr = 1e-2f, .alpha = 0.5f, .post = true}, true,
    {3, 0});
  // Uniform gradients in [-1, 1]: a row of 1000 has a norm near 18, of 5003 near 41.
  c("AdamW, clipped gradients, pull", 2, 1000,
    {.optimizer = ops::OptimizerKind::AdamW, .lr = 1e-2f, .alpha = 0.2f, .clip_norm = 5}, true,
    {0, 6});
  c("momentum, clipped gradients, large", 3, 5003, {.lr = 0.05f, .momentum = 0.9f, .clip_norm = 2},
    false, {1, 0, 2});
  c("norms only, above the clip (unclipped)", 2, 1000,
    {.lr = 0.05f, .momentum = 0.9f, .clip_norm = 1000}, true, {0, 1});
  c("norms without clipping", 2, 77, {.lr = 0.1f}, false, {0, 0}, true);
  // The weight average of the stepped rows' mean, in the step's pass (alpha 0, --ema).
  c("weight average, momentum", 3, 2500,
    {.lr = 0.05f, .momentum = 0.9f, .ema_decay = 0.9f, .ema_scale = 1.0f / 3}, false, {0, 1, 2},
    false, true);
  c("weight average, AdamW, clipped", 2, 1000,
    {.optimizer = ops::OptimizerKind::AdamW,
     .lr = 1e-2f,
     .clip_norm = 5,
     .ema_decay = 0.5f,
     .ema_scale = 0.5f},
    false, {0, 3}, false, true);
  c("weight average, one row", 1, 77, {.lr = 0.1f, .ema_decay = 0.99f}, false, {4}, false, true);
  return cs;
}

// SmaCentralStep(sum [P]) -> (z [P], z_prev [P], nonfinite f32 [1], ema [P]?).
inline std::vector<Case> sma_central_step(OpKind, DType) {
  auto c = [](std::string name, int64_t n, float mu, std::optional<float> ema = {},
              float scale = 1) {
    Case k{.name = std::move(name),
           .in = {x({n})},
           .params = ops::SmaCentralStepParams{mu, ema.value_or(0.0f), scale},
           .outs = {inout(x({n})), inout(x({n})), x({1})},
           .ref = ref_sma_central_step};
    if (ema) k.outs.push_back(inout(x({n})));
    return k;
  };
  return {c("momentum", 1000, 0.9f),
          c("no momentum", 13, 0),
          c("large", 20011, 0.5f),
          c("with the weight average", 1000, 0.9f, 0.99f),
          c("weight average before its start (decay 0)", 77, 0.9f, 0.0f),
          c("weight average, large", 20011, 0, 0.9f),
          c("outer step (scaled sum), momentum", 1000, 0.9f, {}, 0.7f),
          c("outer step, no momentum, weight average", 5003, 0, 0.99f, 2.5f)};
}

// SmaRowEma(rows [R,S]) -> ema [S].
inline std::vector<Case> sma_row_ema(OpKind, DType) {
  auto c = [](std::string name, int64_t rows, int64_t n, float decay, float scale) {
    return Case{.name = std::move(name),
                .in = {x({rows, n})},
                .params = ops::SmaRowEmaParams{decay, scale},
                .outs = {inout(x({n}))},
                .ref = ref_sma_row_ema};
  };
  return {c("3 rows", 3, 17, 0.9f, 1.0f / 3), c("one row", 1, 5, 0.999f, 1),
          c("decay 0 (a copy of the mean)", 2, 33, 0, 0.5f), c("large", 4, 10007, 0.99f, 0.25f)};
}

inline std::vector<Case> sma_row_sum(OpKind, DType) {
  auto c = [](std::string name, int64_t rows, int64_t n, float scale) {
    return Case{.name = std::move(name),
                .in = {x({rows, n})},
                .params = ops::SmaRowSumParams{scale},
                .outs = {x({n})},
                .ref = ref_sma_row_sum};
  };
  return {c("3 rows", 3, 17, 1.0f / 3), c("one row", 1, 5, 1), c("large", 4, 10007, 0.25f)};
}

}  // namespace cb::test::bops
