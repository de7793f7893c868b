// What a user sets of the trainer (TrainerOptions, each setting named by its cb-train flag) and the
// central rules' defaults they resolve to with K learners in all: the rule in force, alpha, the
// learners' rate scaling, mu_z, eta, the sync period and the reset rules' warm-up. The maths of
// each rule is in sma/trainer.h; the evidence for each default in docs/sma.md ("Many learners",
// "Central rules").
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "runtime/ops/params.h"
#include "runtime/passes.h"

namespace cb {

using ops::OptimizerKind;

// How the learning rate a user gives for one learner becomes the learners' gamma with K learners.
// auto: the central rule's and the optimizer's own (sqrt for AdamW; SGD: quarter for post-local,
// sqrt for the others).
enum class LrScaling { Auto, None, Sqrt, Quarter, Linear };
// The central rule (sma/trainer.h has each rule's maths).
enum class SmaRule { Paper, Elastic, SlowMo, PostLocal };
const char* sma_rule_name(SmaRule r);
SmaRule parse_sma_rule(const std::string& s);  // paper | elastic | slowmo | post-local
// Whether the rule sets every learner to the new z after the central update.
inline bool resets_learners(SmaRule r) { return r == SmaRule::SlowMo || r == SmaRule::PostLocal; }
const char* lr_scaling_name(LrScaling s);
// "sgd" | "adamw"; cb::Error listing the choices otherwise.
OptimizerKind parse_optimizer(const std::string& s);
const char* optimizer_name(OptimizerKind k);
// auto | none | sqrt | quarter | linear; cb::Error otherwise
LrScaling parse_lr_scaling(const std::string& s);
// sqrt: min(sqrt(K), 64 / sqrt(K)) (the most, 8, at K = 64); quarter: min(K/4, 1024/K), at
// least 1 (the most, 16, at K = 64);
// linear: K; none: 1; auto: the rule's and optimizer's (resolve_lr_scaling).
double lr_scale(LrScaling s, int total_learners, SmaRule rule = SmaRule::Paper,
                OptimizerKind opt = OptimizerKind::Sgd);
// auto: sqrt with AdamW; with SGD quarter for post-local, sqrt for the other rules.
LrScaling resolve_lr_scaling(LrScaling s, SmaRule rule, OptimizerKind opt = OptimizerKind::Sgd);
const char* lr_scaling_formula(LrScaling s);  // "min(sqrt(K), 64/sqrt(K))", ...
// alpha with K learners in all when it is not set (paper: min(2/K, 1/2); elastic: 1/4; 0 for one
// learner); for the reset rules the correction's coefficient, 1/K.
double default_alpha(int total_learners, SmaRule rule = SmaRule::Paper);
// The start-up line's words for the rule ("slowmo (eta 1 ...)") and for alpha's origin.
struct TrainerOptions;
std::string sma_rule_text(const TrainerOptions& o, int total_learners);
std::string sma_alpha_text(const TrainerOptions& o, int total_learners);
// The learning-rate warm-up, in epochs, that cb-train gives the reset rules (slowmo, post-local)
// with K learners in all when --warmup-steps is not set: their learners' mean trains as
// large-batch SGD does, which takes the large-batch recipe's warm-up. 2 epochs up to K = 32, the
// recipe's 5 from K = 64 (measured, docs/sma.md "Central rules": at K = 64 two epochs left one seed
// of three with every ReLU dead, five none).
inline int64_t reset_rule_warmup_epochs(int total_learners) { return total_learners >= 64 ? 5 : 2; }
// mu_z and eta when they are not set.
double default_central_momentum(SmaRule rule);
double default_outer_lr(SmaRule rule);

struct TrainerOptions {
  int64_t batch = 16;      // per learner
  int64_t eval_batch = 0;  // 0: the training batch size
  OptimizerKind optimizer = OptimizerKind::Sgd;
  double momentum = 0.9;                          // SGD
  bool nesterov = false;                          // SGD
  double weight_decay = 0;                        // SGD: added to the gradient; AdamW: decoupled
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // AdamW
  int learners = 1;                               // per device, to start with
  std::optional<SmaRule> sma_rule;                // the central rule; empty: rule(K) picks
  std::optional<double> alpha;                    // empty: default_alpha(K), recomputed with K
  LrScaling lr_scaling = LrScaling::Auto;         // gamma = lr x s(K), recomputed with K
  std::optional<double> central_momentum;         // mu_z; empty: the rule's default
  std::optional<double> outer_lr;                 // eta (elastic, slowmo); empty: the default
  int64_t local_after = 0;                        // post-local: steps synchronised every step
  std::optional<double> ema;                      // the weight average's decay, in (0, 1)
  int64_t ema_start = 0;                          // steps before it starts (decay 0 until then)
  Precision precision = Precision::F32;           // bf16: mixed precision (runtime/passes.h)
  // The CPU's own forms where the devices can (TrainModel's blocked_layouts): activations between
  // oneDNN ops in its blocked layout, MatMul through permuted operands, bf16 operands stored as
  // bf16; false: every activation row-major and every operand as the ONNX graph has it.
  bool blocked_layouts = true;
  // Auto: with blocked_layouts, the f32 3x3 convolutions Winograd's algorithm runs faster
  // (choose_conv_algorithms); Direct: every convolution directly.
  ConvAlgorithm conv_algorithm = ConvAlgorithm::Auto;
  // Above 0: each learner's gradients scaled to this global L2 norm where above it (PyTorch's
  // clip_grad_norm_ over all of the learner's parameters), before its optimizer step.
  double clip_grad_norm = 0;
  int64_t sync_every = 1;     // SMA correction every N steps; local steps in between
  bool overlap_sync = true;   // the z update runs while the learners start their next step
  int64_t memory_budget = 0;  // bytes per device; 0: the device's free memory (shared host
                              // memory: divided among this process's devices)

  // Throws cb::Error naming the setting by its cb-train flag (the Trainer calls it too).
  void validate() const;

  // One learner, no central model: exactly torch.optim.SGD / AdamW.
  static TrainerOptions plain(OptimizerKind k = OptimizerKind::Sgd) {
    TrainerOptions o;
    o.optimizer = k;
    o.alpha = 0;
    o.central_momentum = 0;
    return o;
  }
  // The rule in force with K learners in all: --sma-rule, else the paper's below K = 16 (and
  // whenever --alpha is given: the paper's pull) and post-local from K = 16 (docs/sma.md: "Central
  // rules").
  SmaRule rule(int K) const {
    if (sma_rule) return *sma_rule;
    return K >= kPostLocalFrom && !alpha ? SmaRule::PostLocal : SmaRule::Paper;
  }
  static constexpr int kPostLocalFrom = 16;
  double mu_z(int K) const { return central_momentum.value_or(default_central_momentum(rule(K))); }
  double eta(int K) const { return outer_lr.value_or(default_outer_lr(rule(K))); }
  // The steps between two central updates at trainer step `step` (0-based).
  int64_t sync_period(int K, int64_t step) const {
    return rule(K) == SmaRule::PostLocal && step < local_after ? 1 : sync_every;
  }
};

}  // namespace cb
