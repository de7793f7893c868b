// A fit's start-up lines and config record (see run_start.h).
#include "session/run_start.h"

#include <fmt/format.h>

#include <cstdio>

namespace cb {

namespace {

std::string devices_text(const Trainer& t) {
  std::string text;
  for (int d = 0; d < t.devices(); ++d) {
    const DeviceCaps c = t.device(d).caps();
    text += c.host_memory ? fmt::format("{}{} {} core{}", d ? ", " : "", c.name, c.cores,
                                        c.cores == 1 ? "" : "s")
                          : fmt::format("{}{} {} SMs, {} of {} free", d ? ", " : "", c.name,
                                        c.cores, mib(c.memory_free), mib(c.memory_total));
  }
  return text;
}

}  // namespace

std::string run_data_text(const Dataset& data, const BatchStream* stream) {
  if (stream)
    return stream->batches_per_pass > 0
               ? fmt::format("batches from the caller, {} per pass", stream->batches_per_pass)
               : std::string("batches from the caller");
  if (data.tensors())
    return fmt::format("{} ({}): {} training, {} test examples", data.dir, data.description,
                       data.train_size(), data.test_size());
  return fmt::format("{} ({}): {} training, {} test images", data.dir, data.description,
                     data.train_size(), data.test_size());
}

void announce_run(const RunStart& s, RunRecorder& rec) {
  const SessionOptions& o = *s.options;
  const Trainer& trainer = *s.trainer;
  const Dataset& data = *s.data;
  const TrainerOptions& topts = s.trainer_options;
  const RunOptions& ropts = s.run;
  const int64_t spe = s.batches_per_epoch;
  const std::string data_text = run_data_text(data, s.stream);
  fmt::print("loss     {}\n", s.loss_text);
  if (s.stream)
    fmt::print("data     {}\n", data_text);
  else if (data.tensors())
    fmt::print("data     {}: {}, {} training, {} test examples: {}\n", data.dir, data.description,
               data.train_size(), data.test_size(), data.train->describe());
  else
    fmt::print(
        "data     {}: {}, {} training, {} test images of {}{}\n", data.dir, data.description,
        data.train_size(), data.test_size(), image_dims(*data.train).str(),
        data.classes.empty() ? std::string() : fmt::format(", {} classes", data.classes.size()));
  if (s.stream)
    fmt::print("inputs   fetched ahead on a thread of their own\n");
  else if (ropts.workers == 0 && batches_inline(*s.plan, topts.batch))
    fmt::print("inputs   {}; batched on the training thread (small rows)\n", s.plan->text);
  else
    fmt::print("inputs   {}; {} pipeline worker{}\n", s.plan->text, s.workers,
               s.workers == 1 ? "" : "s");
  const double lr = ropts.schedule.lr;
  const std::string opt_text =
      (topts.optimizer == OptimizerKind::Sgd
           ? fmt::format("sgd momentum {}{} weight decay {}", topts.momentum,
                         topts.nesterov ? " (nesterov)" : "", topts.weight_decay)
           : fmt::format("adamw betas ({}, {}) eps {} weight decay {}", topts.beta1, topts.beta2,
                         topts.eps, topts.weight_decay)) +
      (topts.clip_grad_norm > 0
           ? fmt::format(", gradients clipped to norm {} per learner", topts.clip_grad_norm)
           : std::string());
  const std::string sched_text = fmt::format(
      "lr {} {}{}", lr, lr_schedule_name(ropts.schedule.kind),
      ropts.schedule.warmup_steps
          ? fmt::format(" + {} warm-up steps{}", ropts.schedule.warmup_steps,
                        s.rule_warmup ? fmt::format(" ({} epochs: the {} rule's)", s.warmup_epochs,
                                                    sma_rule_name(trainer.rule()))
                                      : "")
          : "");
  const std::string order_text = s.stream        ? std::string("the caller's order")
                                 : ropts.shuffle ? fmt::format("shuffled (seed {})", ropts.seed)
                                                 : std::string("file order");
  fmt::print("train    batch {} per learner, {} ({}), {}, {}, {} threads, {}\n", topts.batch,
             ropts.steps > 0
                 ? fmt::format("{} steps", ropts.steps)
                 : fmt::format("{} epoch{}", ropts.epochs, ropts.epochs == 1 ? "" : "s"),
             spe > 0 ? fmt::format("{} batches per epoch, last partial batch dropped", spe)
                     : std::string("passes as long as the caller's"),
             opt_text, sched_text, o.threads, order_text);
  const TrainMemory& mem = trainer.memory();
  const std::string cores_text = devices_text(trainer);
  const int K = trainer.total_learners();
  fmt::print(
      "sma      {} device{} ({}), {} learner{} per device{}, rule {}, alpha {:.4g} ({}), "
      "learners' lr {:.5g} ({}), central momentum {}, sync every {} step{}, z update {}\n",
      trainer.devices(), trainer.devices() == 1 ? "" : "s", cores_text,
      trainer.learners_per_device(), trainer.learners_per_device() == 1 ? "" : "s",
      ropts.auto_tune ? " to start (auto-tuned)" : "", sma_rule_text(topts, K), trainer.alpha(),
      sma_alpha_text(topts, K), lr * trainer.lr_factor(),
      topts.lr_scaling == LrScaling::None
          ? std::string("--lr, --lr-scaling none")
          : fmt::format("--lr {} x {} at K = {}; --lr-scaling {}", lr,
                        lr_scaling_formula(
                            resolve_lr_scaling(topts.lr_scaling, trainer.rule(), topts.optimizer)),
                        K, lr_scaling_name(topts.lr_scaling)),
      topts.mu_z(K), topts.sync_every, topts.sync_every == 1 ? "" : "s",
      !topts.overlap_sync || resets_learners(topts.rule(K)) ? "not overlapped" : "overlapped");
  if (const LayoutStats& l = trainer.model().layouts(); l.blocked > 0)
    fmt::print(
        "layout   {} activations kept in oneDNN's blocked layout between its ops, {} "
        "reorder{} where other ops need the plain one (--plain-layout: none)\n",
        l.blocked, l.reorders, l.reorders == 1 ? "" : "s");
  if (const int64_t w = trainer.model().winograd_nodes(); w > 0)
    fmt::print(
        "conv     {} of {} convolutions (forward and backward) by Winograd's F(4x4, 3x3), the "
        "others direct (--conv-algorithm direct: all direct)\n",
        w, trainer.model().conv_nodes());
  if (topts.precision == Precision::BF16) {
    const int64_t n = trainer.model().bf16_nodes(), s = trainer.model().bf16_operands();
    fmt::print(
        "precision bf16: {} convolution{} and matrix product{} (forward and backward) multiply "
        "in bf16 with f32 accumulation (on CPUs where oneDNN runs them, on GPUs through cuDNN "
        "and cuBLASLt); weights, optimizer state and every other op f32{}{}\n",
        n, n == 1 ? "" : "s", n == 1 ? "" : "s",
        n == 0 ? " (this model has no f32 convolution or matrix product: bf16 changes nothing)"
               : "",
        s > 0 ? fmt::format("; {} activation{} only those products read stored as bf16", s,
                            s == 1 ? "" : "s")
              : "");
  }
  if (topts.ema)
    fmt::print(
        "average  the weights' exponential moving average, {}{}: evaluated and exported instead "
        "of the model (--ema off: the model itself)\n",
        ropts.ema_epochs > 0 && spe > 0
            ? fmt::format("time constant {:g} epochs (decay {:.6g} per step at K = {})",
                          ropts.ema_epochs, ema_decay_for(ropts.ema_epochs, spe, K), K)
            : fmt::format("decay {:g} per step", *topts.ema),
        topts.ema_start > 0 ? fmt::format(", from step {}", topts.ema_start) : std::string());
  fmt::print(
      "memory   {} per replica ({} arena + the flat parameter, gradient and optimizer "
      "buffers), {} shared, budget {} per device{}\n",
      mib(mem.per_replica), mib(mem.arena), mib(mem.fixed), mib(mem.budget),
      mem.budget_source.empty() ? "" : " (" + mem.budget_source + ")");
  std::fflush(stdout);
  rec.record(
      {{"type", "config"},
       {"model", o.model},
       {"parameters", trainer.model().param_count()},
       {"data", s.stream ? data_text : fmt::format("{} ({})", data.dir, data.description)},
       {"training examples", data.train_size()},
       {"test examples", data.test_size()},
       {"batch per learner", topts.batch},
       {"length", ropts.steps > 0 ? fmt::format("{} steps", ropts.steps)
                                  : fmt::format("{} epochs", ropts.epochs)},
       {"optimizer", opt_text},
       {"schedule", sched_text},
       {"learners per device",
        ropts.auto_tune ? fmt::format("{} to start (auto-tuned)", trainer.learners_per_device())
                        : std::to_string(trainer.learners_per_device())},
       {"devices", fmt::format("{} ({})", trainer.devices(), cores_text)},
       {"alpha", trainer.alpha()},
       {"ema", topts.ema ? nlohmann::ordered_json(*topts.ema) : nlohmann::ordered_json()},
       {"learners' lr", lr * trainer.lr_factor()},
       {"threads", o.threads},
       {"target_accuracy", ropts.target_accuracy},
       {"command", o.command_line},
       {"memory",
        {{"arena", mem.arena},
         {"per_replica", mem.per_replica},
         {"fixed", mem.fixed},
         {"budget", mem.budget},
         {"budget_source", mem.budget_source}}}});
}

}  // namespace cb
