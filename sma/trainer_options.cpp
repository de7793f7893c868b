// The trainer's options and the central rules' defaults (sma/trainer_options.h).
#include "sma/trainer_options.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "runtime/error.h"

namespace cb {

const char* lr_scaling_name(LrScaling s) {
  switch (s) {
    case LrScaling::Auto:
      return "auto";
    case LrScaling::None:
      return "none";
    case LrScaling::Sqrt:
      return "sqrt";
    case LrScaling::Quarter:
      return "quarter";
    case LrScaling::Linear:
      return "linear";
  }
  return "?";
}

LrScaling parse_lr_scaling(const std::string& s) {
  for (LrScaling v :
       {LrScaling::Auto, LrScaling::None, LrScaling::Sqrt, LrScaling::Quarter, LrScaling::Linear})
    if (s == lr_scaling_name(v)) return v;
  fail("--lr-scaling '{}': expected auto, none, sqrt, quarter or linear", s);
}

LrScaling resolve_lr_scaling(LrScaling s, SmaRule rule, OptimizerKind opt) {
  if (s != LrScaling::Auto) return s;
  // Adam's step does not grow with the gradient: a mean of K learners is a K-times batch, and
  // Adam's rate follows the batch's square root (Malladi et al., 2022), under every rule.
  if (opt == OptimizerKind::AdamW) return LrScaling::Sqrt;
  // slowmo's outer momentum already doubles its step (1 / (1 - mu_z) at its 0.5).
  return rule == SmaRule::PostLocal ? LrScaling::Quarter : LrScaling::Sqrt;
}

const char* lr_scaling_formula(LrScaling s) {
  switch (s) {
    case LrScaling::Auto:
    case LrScaling::Sqrt:
      return "min(sqrt(K), 64/sqrt(K))";
    case LrScaling::None:
      return "1";
    case LrScaling::Quarter:
      return "min(K/4, 1024/K), at least 1";
    case LrScaling::Linear:
      return "K";
  }
  return "?";
}

const char* optimizer_name(OptimizerKind k) { return k == OptimizerKind::AdamW ? "adamw" : "sgd"; }

OptimizerKind parse_optimizer(const std::string& s) {
  for (OptimizerKind k : {OptimizerKind::Sgd, OptimizerKind::AdamW})
    if (s == optimizer_name(k)) return k;
  fail("unknown --optimizer '{}' (choices: sgd, adamw)", s);
}

double lr_scale(LrScaling s, int K, SmaRule rule, OptimizerKind opt) {
  switch (resolve_lr_scaling(s, rule, opt)) {
    case LrScaling::Auto:  // resolved above
    case LrScaling::None:
      return 1;
    case LrScaling::Sqrt: {  // at most 8x (K = 64): each learner still trains at batch 16
      const double r = std::sqrt(static_cast<double>(K));
      return std::min(r, 64 / r);
    }
    case LrScaling::Quarter:  // the reset rules' mean is large-batch SGD (docs/sma.md: "Central
                              // rules")
      return std::max(1.0, std::min(K / 4.0, 1024.0 / K));
    case LrScaling::Linear:
      return K;
  }
  return 1;
}

const char* sma_rule_name(SmaRule r) {
  switch (r) {
    case SmaRule::Paper:
      return "paper";
    case SmaRule::Elastic:
      return "elastic";
    case SmaRule::SlowMo:
      return "slowmo";
    case SmaRule::PostLocal:
      return "post-local";
  }
  return "paper";
}

SmaRule parse_sma_rule(const std::string& s) {
  for (SmaRule r : {SmaRule::Paper, SmaRule::Elastic, SmaRule::SlowMo, SmaRule::PostLocal})
    if (s == sma_rule_name(r)) return r;
  fail("unknown --sma-rule '{}' (choices: paper, elastic, slowmo, post-local)", s);
}

double default_alpha(int K, SmaRule rule) {
  if (K == 1) return 0.0;
  switch (rule) {
    case SmaRule::Paper:
      return std::min(2.0 / K, 0.5);
    case SmaRule::Elastic:
      return 0.25;
    case SmaRule::SlowMo:
    case SmaRule::PostLocal:
      return 1.0 / K;  // the corrections' sum is mean - z
  }
  return 0.0;
}

double default_central_momentum(SmaRule rule) {
  switch (rule) {
    case SmaRule::Paper:
    case SmaRule::Elastic:
      return 0.9;
    case SmaRule::SlowMo:
      return 0.5;
    case SmaRule::PostLocal:
      return 0.0;
  }
  return 0.9;
}

double default_outer_lr(SmaRule) { return 1.0; }

std::string sma_rule_text(const TrainerOptions& o, int K) {
  const SmaRule r = o.rule(K);
  const char* name = sma_rule_name(r);
  if (K == 1) return fmt::format("{} (one learner: no central model)", name);
  switch (r) {
    case SmaRule::Paper:
      return name;
    case SmaRule::Elastic:
      return fmt::format("elastic (z moves by eta {:g} x (mean - z))", o.eta(K));
    case SmaRule::SlowMo:
      return fmt::format(
          "slowmo (z moves by eta {:g} x (mean - z) every {} step{}, learners reset to z)",
          o.eta(K), o.sync_every, o.sync_every == 1 ? "" : "s");
    case SmaRule::PostLocal: {
      const std::string why =
          o.sma_rule ? ""
                     : fmt::format(": the default from K = {}", TrainerOptions::kPostLocalFrom);
      if (o.sync_every == 1)
        return fmt::format("post-local (learners averaged every step, reset to z{})", why);
      return fmt::format(
          "post-local (learners averaged every step for {} steps, then every {}, reset to z{})",
          o.local_after, o.sync_every, why);
    }
  }
  return name;
}

std::string sma_alpha_text(const TrainerOptions& o, int K) {
  if (o.alpha) return "--alpha";
  if (K == 1)
    return o.optimizer == OptimizerKind::AdamW ? "one learner: plain AdamW"
                                               : "one learner: plain SGD";
  switch (o.rule(K)) {
    case SmaRule::Paper:
      return fmt::format("min(2/K, 1/2) at K = {}", K);
    case SmaRule::Elastic:
      return "the elastic rule's default";
    case SmaRule::SlowMo:
    case SmaRule::PostLocal:
      return fmt::format("1/K: the learners' mean at K = {}", K);
  }
  return "";
}

void TrainerOptions::validate() const {
  if (batch <= 0) fail("--batch-size must be positive, got {}", batch);
  if (eval_batch < 0) fail("--eval-batch-size must not be negative, got {}", eval_batch);
  if (!(momentum >= 0 && momentum < 1)) fail("--momentum must be in [0, 1), got {}", momentum);
  if (nesterov && (optimizer != OptimizerKind::Sgd || momentum == 0))
    fail("--nesterov needs --optimizer sgd with a --momentum above 0");
  if (!(weight_decay >= 0 && std::isfinite(weight_decay)))
    fail("--weight-decay must not be negative, got {}", weight_decay);
  if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1))
    fail("--betas must be two values in [0, 1), such as 0.9,0.999, got {},{}", beta1, beta2);
  if (!(eps > 0 && std::isfinite(eps))) fail("--eps must be positive, such as 1e-8, got {}", eps);
  if (!(clip_grad_norm >= 0 && std::isfinite(clip_grad_norm)))
    fail("--clip-grad-norm must be a positive norm, such as 1.0, got {}", clip_grad_norm);
  if (alpha && !(*alpha >= 0 && *alpha <= 1)) fail("--alpha must be in [0, 1], got {}", *alpha);
  if (alpha && sma_rule && resets_learners(*sma_rule))
    fail(
        "--alpha is the pull of the paper and elastic rules; --sma-rule {} resets every learner "
        "to z (use --outer-lr for its step)",
        sma_rule_name(*sma_rule));
  if (central_momentum && !(*central_momentum >= 0 && *central_momentum < 1))
    fail("--central-momentum must be in [0, 1), got {}", *central_momentum);
  if (outer_lr && (!sma_rule || *sma_rule == SmaRule::Paper || *sma_rule == SmaRule::PostLocal))
    fail("--outer-lr is the central step of --sma-rule elastic and slowmo, not of {}",
         sma_rule ? sma_rule_name(*sma_rule) : "the default rules (paper, post-local)");
  if (outer_lr && !(*outer_lr > 0 && *outer_lr <= 4))
    fail("--outer-lr must be in (0, 4], got {}", *outer_lr);
  if (sync_every < 1) fail("--sync-every must be at least 1, got {}", sync_every);
  if (local_after < 0) fail("--local-after must not be negative, got {}", local_after);
  if (local_after > 0 && sma_rule && *sma_rule != SmaRule::PostLocal)
    fail("--local-after is the switch of --sma-rule post-local, not of {}",
         sma_rule_name(*sma_rule));
  if (learners < 1) fail("--learners must be at least 1, got {}", learners);
  if (memory_budget < 0) fail("--memory-budget must not be negative, got {}", memory_budget);
  if (ema && !(*ema > 0 && *ema < 1))
    fail("--ema must be a decay in (0, 1), such as 0.999, got {}", *ema);
  if (ema_start < 0) fail("--ema-start must not be negative, got {}", ema_start);
  if (!ema && ema_start > 0) fail("--ema-start needs --ema DECAY");
}

}  // namespace cb
