// cb-train's options (see option_table.h).
#include "session/option_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "runtime/error.h"

namespace cb {

namespace {

using Kind = OptionSpec::Kind;

std::string flag_of(const std::string& name) { return "--" + name; }

template <class T>
T parse_int(const std::string& name, const std::string& v) {
  T out{};
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || end != v.data() + v.size())
    fail("{} '{}': expected {}", flag_of(name), v,
         std::is_signed_v<T> ? "an integer" : "a non-negative integer");
  return out;
}

double parse_double(const std::string& name, const std::string& v) {
  size_t pos = 0;
  double out = 0;
  try {
    out = std::stod(v, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (v.empty() || pos != v.size() || std::isnan(out))
    fail("{} '{}': expected a number", flag_of(name), v);
  return out;
}

std::vector<std::string> split_commas(const std::string& v) {
  std::vector<std::string> out;
  size_t at = 0;
  for (;;) {
    const size_t c = v.find(',', at);
    out.push_back(v.substr(at, c == std::string::npos ? c : c - at));
    if (c == std::string::npos) break;
    at = c + 1;
  }
  return out;
}

std::string num(double v) { return fmt::format("{}", v); }

template <class T>
std::string join(const std::vector<T>& v) {
  return fmt::format("{}", fmt::join(v, ","));
}

// Builders for the common kinds.
struct Table {
  std::vector<OptionSpec> v;

  OptionSpec& add(std::string name, Kind kind, std::string help,
                  std::function<void(SessionOptions&, const std::string&)> set,
                  std::function<std::string(const SessionOptions&)> get) {
    v.push_back(
        {std::move(name), "", kind, std::move(help), "TEXT", true, std::move(set), std::move(get)});
    return v.back();
  }
  template <class T>
  OptionSpec& integer(std::string name, T SessionOptions::*field, std::string help) {
    return integer_at(
        std::move(name), [field](SessionOptions& o) -> T& { return o.*field; }, std::move(help));
  }
  // One value shown as `type` by --help: `parse(name, text)` gives the field's value, `print`
  // its text form.
  template <class F, class Parse, class Print>
  OptionSpec& value_at(std::string name, const char* type, F field, Parse parse, Print print,
                       std::string help) {
    const std::string n = name;
    OptionSpec& s = add(
        std::move(name), Kind::Value, std::move(help),
        [n, field, parse](SessionOptions& o, const std::string& s) { field(o) = parse(n, s); },
        [field, print](const SessionOptions& o) {
          return print(field(const_cast<SessionOptions&>(o)));
        });
    s.type = type;
    return s;
  }
  template <class F>
  OptionSpec& integer_at(std::string name, F field, std::string help) {
    using T = std::remove_reference_t<decltype(field(std::declval<SessionOptions&>()))>;
    return value_at(
        std::move(name), "INT", field,
        [](const std::string& n, const std::string& s) { return parse_int<T>(n, s); },
        [](T v) { return std::to_string(v); }, std::move(help));
  }
  template <class F>
  OptionSpec& real_at(std::string name, F field, std::string help) {
    return value_at(std::move(name), "FLOAT", field, parse_double, num, std::move(help));
  }
  // A real that is unset (no default shown, "" in text form) until given: its default depends on
  // other settings (alpha on K, mu_z and eta on the central rule).
  template <class F>
  OptionSpec& optional_real_at(std::string name, F field, std::string help) {
    OptionSpec& s = value_at(
        std::move(name), "FLOAT", field, parse_double,
        [](const std::optional<double>& v) { return v ? num(*v) : std::string(); },
        std::move(help));
    s.show_default = false;
    return s;
  }
  template <class F>
  OptionSpec& text_at(std::string name, F field, std::string help) {
    return add(
        std::move(name), Kind::Value, std::move(help),
        [field](SessionOptions& o, const std::string& s) { field(o) = s; },
        [field](const SessionOptions& o) { return field(const_cast<SessionOptions&>(o)); });
  }
  template <class F>
  OptionSpec& flag_at(std::string name, F field, std::string help, bool invert = false) {
    const std::string n = name;
    OptionSpec& s = add(
        std::move(name), Kind::Flag, std::move(help),
        [n, field, invert](SessionOptions& o, const std::string& s) {
          field(o) = parse_flag(n, s) != invert;
        },
        [field, invert](const SessionOptions& o) {
          return (field(const_cast<SessionOptions&>(o)) != invert) ? "true" : "false";
        });
    s.show_default = false;
    return s;
  }
};

#define CB_FIELD(expr) \
  [](SessionOptions & o) -> auto& { return o.expr; }

std::vector<OptionSpec> make_table() {
  Table t;
  t.add(
      "data-format", Kind::Value, "auto | idx | cifar | folder | pack | npz",
      [](SessionOptions& o, const std::string& s) { o.data_options.format = parse_data_format(s); },
      [](const SessionOptions& o) { return std::string(data_format_name(o.data_options.format)); });
  t.real_at("val-split", CB_FIELD(data_options.val_split),
            "a folder of class folders (no train/, val/): the fraction of each class held out as "
            "the test set (chosen by file name, the same in every run); one .npz: the fraction of "
            "its rows held out (a fixed choice, the same in every run)");
  t.text_at("target", CB_FIELD(run.target),
            "NumPy data: the array that holds the loss's target (the model's inputs take the "
            "arrays of their names; a one-input model may call its array x)");
  t.integer_at("workers", CB_FIELD(run.workers),
               "data pipeline threads that decode and transform ahead of the learners (default: "
               "the cores --threads leaves free, at least 1)")
      .show_default = false;
  t.add(
      "augment", Kind::Value,
      "training augmentation: auto (for image folders and packs: CIFAR's pad + crop for small "
      "images, milder and unflipped for grey ones, else a random-resized crop around the input's "
      "aspect, ImageNet's for square inputs >= 160; + flip unless the input is wide; none for "
      "IDX/CIFAR) | none | crop (ImageNet's RandomResizedCrop + flip)",
      [](SessionOptions& o, const std::string& s) { o.run.transforms.augment = parse_augment(s); },
      [](const SessionOptions& o) {
        switch (o.run.transforms.augment) {
          case AugmentMode::None:
            return std::string("none");
          case AugmentMode::Crop:
            return std::string("crop");
          default:
            return std::string("auto");
        }
      });
  t.flag_at("no-flip", CB_FIELD(run.transforms.flip),
            "no horizontal flip in the augmentation (labels that mirroring changes: text, digits, "
            "left/right)",
            true);
  auto floats = [&t](std::string name, std::vector<float> TransformOptions::*field,
                     std::string help) {
    const std::string n = name;
    OptionSpec& s = t.add(
        std::move(name), Kind::List, std::move(help),
        [n, field](SessionOptions& o, const std::string& v) {
          std::vector<float> out;
          for (const std::string& x : split_commas(v))
            out.push_back(static_cast<float>(parse_double(n, x)));
          o.run.transforms.*field = out;
        },
        [field](const SessionOptions& o) { return join(o.run.transforms.*field); });
    s.show_default = false;
  };
  floats("mean", &TransformOptions::mean,
         "per-channel mean subtracted after x/255 (default: ImageNet's for image folders and "
         "packs, 0 for IDX/CIFAR); one value or one per channel");
  floats("std", &TransformOptions::std,
         "per-channel std divided by after the mean (default: ImageNet's for image folders and "
         "packs, 1 for IDX/CIFAR)");
  t.text_at("cache", CB_FIELD(cache),
            "image folders: train from this .cbpack (decoded, resized samples), made from --data "
            "on first use (as cb-pack does) and checked against it later");
  t.integer_at("batch-size", CB_FIELD(trainer.batch), "examples per step").alias = "b";
  t.integer_at("eval-batch-size", CB_FIELD(trainer.eval_batch),
               "examples per evaluation batch (default: --batch-size)")
      .show_default = false;
  t.integer_at("epochs", CB_FIELD(run.epochs), "passes over the training set");
  t.integer_at("steps", CB_FIELD(run.steps), "stop after N steps (overrides --epochs)")
      .show_default = false;
  t.real_at("lr", CB_FIELD(run.schedule.lr),
            "learning rate of one learner at --batch-size (K learners: see --lr-scaling)");
  t.real_at("momentum", CB_FIELD(trainer.momentum), "SGD momentum");
  t.flag_at("nesterov", CB_FIELD(trainer.nesterov), "Nesterov momentum (SGD)");
  t.real_at("weight-decay", CB_FIELD(trainer.weight_decay),
            "L2 penalty (SGD: added to the gradient; AdamW: decoupled)");
  t.add(
      "optimizer", Kind::Value, "sgd | adamw",
      [](SessionOptions& o, const std::string& s) { o.trainer.optimizer = parse_optimizer(s); },
      [](const SessionOptions& o) { return std::string(optimizer_name(o.trainer.optimizer)); });
  t.add(
      "betas", Kind::List, "AdamW: the moments' decays beta1,beta2 (torch.optim.AdamW's betas)",
      [](SessionOptions& o, const std::string& v) {
        const std::vector<std::string> b = split_commas(v);
        if (b.size() != 2) fail("--betas takes two values, such as 0.9,0.999, got '{}'", v);
        o.trainer.beta1 = parse_double("betas", b[0]);
        o.trainer.beta2 = parse_double("betas", b[1]);
      },
      [](const SessionOptions& o) {
        return fmt::format("{},{}", o.trainer.beta1, o.trainer.beta2);
      });
  t.real_at("eps", CB_FIELD(trainer.eps), "AdamW: added to the second moment's root");
  t.real_at("clip-grad-norm", CB_FIELD(trainer.clip_grad_norm),
            "scale each learner's gradients to this L2 norm (over all its parameters) where "
            "above it, before its optimizer step (torch.nn.utils.clip_grad_norm_); 0: off")
      .show_default = false;
  t.add(
      "lr-schedule", Kind::Value, "constant | step | multistep | cosine",
      [](SessionOptions& o, const std::string& s) { o.run.schedule.kind = parse_lr_schedule(s); },
      [](const SessionOptions& o) { return std::string(lr_schedule_name(o.run.schedule.kind)); });
  t.integer_at("lr-step-size", CB_FIELD(run.schedule.step_size), "step: epochs between decays");
  t.real_at("lr-gamma", CB_FIELD(run.schedule.gamma), "step, multistep: decay factor");
  t.add(
       "lr-milestones", Kind::List, "multistep: epochs, e.g. 30,60",
       [](SessionOptions& o, const std::string& v) {
         o.run.schedule.milestones.clear();
         for (const std::string& x : split_commas(v))
           o.run.schedule.milestones.push_back(parse_int<int64_t>("lr-milestones", x));
       },
       [](const SessionOptions& o) { return join(o.run.schedule.milestones); })
      .show_default = false;
  t.integer_at("warmup-steps", CB_FIELD(run.schedule.warmup_steps),
               "linear warm-up over the first N steps")
      .show_default = false;
  t.integer_at("seed", CB_FIELD(run.seed), "seed of the shuffle");
  t.flag_at("no-shuffle", CB_FIELD(run.shuffle), "visit the training examples in file order", true);
  t.integer_at("evals-per-epoch", CB_FIELD(run.evals_per_epoch),
               "without --eval-every: evaluate N times per epoch (at every 1/N of the training "
               "set, whatever the number of learners)");
  t.integer_at("eval-every", CB_FIELD(run.eval_every),
               "evaluate every N steps (default: at the end of each epoch)")
      .show_default = false;
  t.integer_at("test-limit", CB_FIELD(run.test_limit), "evaluate on the first N test examples only")
      .show_default = false;
  t.text_at("loss", CB_FIELD(loss),
            "auto | cross-entropy | mse | l1 | huber | bce | model | output:NAME. cross-entropy: "
            "scores with a class axis ([N,C], [N,T,C], [N,C,H,W]) vs integer labels (on a model "
            "ending in Softmax/LogSoftmax it reads the logits under it); mse, l1, huber: float "
            "targets of the output's shape; bce: logits vs targets in [0,1] (BCEWithLogits); "
            "model: the model's own scalar loss output; output:NAME: that scalar output; auto: a "
            "scalar output, else cross-entropy on the [N,C] one");
  t.integer_at("class-axis", CB_FIELD(class_axis),
               "cross-entropy: the output's class axis (-1: [N,C] 1, [N,T,C] 2, rank >= 4 1)");
  t.integer_at("ignore-index", CB_FIELD(ignore_index),
               "cross-entropy: labels equal to N add nothing to the loss or the accuracy");
  t.real_at("label-smoothing", CB_FIELD(label_smoothing),
            "cross-entropy: PyTorch's label smoothing, in [0,1)");
  t.real_at("huber-delta", CB_FIELD(huber_delta),
            "huber: where the loss turns from quadratic to linear");
  t.add(
       "image-size", Kind::Value,
       "HxW: the size of a model input with symbolic height and width (image data are resized "
       "to it)",
       [](SessionOptions& o, const std::string& s) { o.image_size = parse_image_size(s); },
       [](const SessionOptions& o) {
         return o.image_size ? fmt::format("{}x{}", o.image_size->first, o.image_size->second)
                             : std::string();
       })
      .show_default = false;
  t.add(
       "dim", Kind::Repeat, "NAME=N: the size of the model's symbolic dimension NAME (repeatable)",
       [](SessionOptions& o, const std::string& s) { add_size_options(o.import, {s}, {}); },
       [](const SessionOptions& o) {
         std::vector<std::string> v;
         for (const auto& [k, n] : o.import.dims) v.push_back(fmt::format("{}={}", k, n));
         return join(v);
       })
      .show_default = false;
  t.add(
       "input-shape", Kind::Repeat,
       "NAME=AxBxC: the shape of model input NAME, its first dimension the batch",
       [](SessionOptions& o, const std::string& s) { add_size_options(o.import, {}, {s}); },
       [](const SessionOptions& o) {
         std::vector<std::string> v;
         for (const auto& [k, d] : o.import.input_shapes)
           v.push_back(fmt::format("{}={}", k, fmt::join(d, "x")));
         return join(v);
       })
      .show_default = false;
  t.add(
       "freeze", Kind::Repeat,
       "PATTERN: keep the parameters whose name matches this shell pattern (* ? [..]) fixed; "
       "repeatable",
       [](SessionOptions& o, const std::string& s) { o.freeze.push_back(s); },
       [](const SessionOptions& o) { return join(o.freeze); })
      .show_default = false;
  t.integer_at("num-classes", CB_FIELD(num_classes),
               "K: replace the classifier that computes the output by a new, freshly initialised "
               "K-way one before training (fine-tuning on a data set of K classes)")
      .show_default = false;
  t.text_at("output-name", CB_FIELD(output_name),
            "the model output the loss trains on (default: the one that fits)");
  t.integer_at("threads", CB_FIELD(threads),
               "worker threads (default: every core this process "
               "may use)")
      .show_default = false;
  t.text_at("output", CB_FIELD(output),
            "write the trained model here (ONNX), at every evaluation (tmp + rename), in "
            "inference form: BatchNormalization on its running statistics, Dropout as Identity, "
            "no training-only outputs")
      .alias = "o";
  t.flag_at("output-training", CB_FIELD(output_training),
            "write --output in training form instead (the graph as exported, for training "
            "elsewhere)");
  t.add(
      "learners", Kind::Value,
      "learners per device: a number, or auto (the auto-tuner adds learners while throughput "
      "grows)",
      [](SessionOptions& o, const std::string& s) {
        const std::optional<int> n = parse_learners(s);
        o.auto_learners = !n;
        o.trainer.learners = n.value_or(1);
      },
      [](const SessionOptions& o) {
        return o.auto_learners ? std::string("auto") : std::to_string(o.trainer.learners);
      });
  t.text_at("devices", CB_FIELD(devices),
            "cpu (one device of --threads cores), cpu:G (G devices, the cores split among them, "
            "each with its own learners and copy of the central model), cuda (every GPU: one "
            "device each, summed with NCCL) or cuda:I,J (those GPUs)");
  t.flag_at("tf32", CB_FIELD(tf32),
            "on GPUs, let cuBLASLt and cuDNN use TF32 tensor cores for f32 (faster, about 10 "
            "mantissa bits in products)");
  t.add(
      "precision", Kind::Value,
      "f32, or bf16: mixed precision (the convolutions and matrix products (Gemm, MatMul), "
      "forward and backward, multiply in bf16 with f32 accumulation, and on the CPU the "
      "activations between convolutions are stored as bf16; weights, "
      "optimizer, SMA state, BatchNorm statistics, softmax and losses stay f32; checkpoints and "
      "exports are f32). CPU: needs AVX-512 BF16 cores; GPU: compute capability 8.0 or newer",
      [](SessionOptions& o, const std::string& s) { o.trainer.precision = parse_precision(s); },
      [](const SessionOptions& o) { return std::string(precision_name(o.trainer.precision)); });
  t.flag_at("plain-layout", CB_FIELD(trainer.blocked_layouts),
            "keep every activation in the row-major layout of the ONNX graph and every MatMul "
            "operand as the graph has it (by default, on the CPU, activations between oneDNN's "
            "convolutions stay in its blocked layout, which saves a reorder on each side of "
            "every conv; MatMul reads attention's heads through strides instead of Transposes, and "
            "each head's products and softmax run together, its scores never stored whole; "
            "under bf16, activations only bf16 products read are stored as bf16)",
            true);
  t.add(
      "conv-algorithm", Kind::Value,
      "auto, or direct: how the CPU multiplies its convolutions. auto: with the blocked layout, "
      "f32 3x3 stride-1 convolutions with 32 or more channels (multiples of 16) in and out and "
      "outputs of 14x14 or more use oneDNN's Winograd F(4x4, 3x3) kernels in training (forward and backward), "
      "1.6-2.4x faster than its direct ones there, with results that differ by rounding (about "
      "1e-6 of the largest output); every other convolution, and evaluation, direct (the "
      "exported model's bits under cb-run). direct: every convolution direct (PyTorch's CPU "
      "algorithm). GPUs: cuDNN picks its own",
      [](SessionOptions& o, const std::string& s) {
        o.trainer.conv_algorithm = parse_conv_algorithm(s);
      },
      [](const SessionOptions& o) {
        return std::string(conv_algorithm_name(o.trainer.conv_algorithm));
      });
  t.flag_at("deterministic", CB_FIELD(deterministic),
            "on GPUs, results identical from run to run (with a fixed --learners: the auto-tuner "
            "decides from measured throughput): the gradients that scatter with atomic adds "
            "(GatherGrad with many indices, PadGrad, ResizeGrad) gather in the CPU's order "
            "instead, and cuDNN runs no engine it notes nondeterministic (slower where those ops "
            "are large). CPU kernels are always deterministic: accepted, changes nothing");
  t.flag_at("no-overlap", CB_FIELD(trainer.overlap_sync),
            "run the z update (cross-device sum and central step) before the learners' next step "
            "instead of alongside it (same result, bit for bit)",
            true);
  t.add(
      "lr-scaling", Kind::Value,
      "how --lr (one learner's learning rate at --batch-size) becomes the learners' with K "
      "learners in all: auto (the central rule's: quarter for post-local, sqrt for the others) "
      "| none | sqrt (x sqrt(K) up to 8 at K = 64, then 64/sqrt(K)) | quarter "
      "(x K/4 up to 16 at K = 64, then 1024/K; at least 1) | linear (x K)",
      [](SessionOptions& o, const std::string& s) { o.trainer.lr_scaling = parse_lr_scaling(s); },
      [](const SessionOptions& o) { return std::string(lr_scaling_name(o.trainer.lr_scaling)); });
  t.optional_real_at("alpha", CB_FIELD(trainer.alpha),
                     "SMA's pull toward the central model, for --sma-rule paper (default "
                     "min(2/K, 1/2) for K >= 2 learners in all, 0 for one learner: plain SGD; "
                     "given without --sma-rule, the paper's rule at every K) and elastic "
                     "(default 1/4)");
  t.add(
       "sma-rule", Kind::Value,
       "SMA's central rule (default: paper below 16 learners in all, post-local from 16): paper "
       "(the CROSSBOW paper's: z moves by the learners' pulls) | "
       "elastic (EASGD's normalised centre: a pull that does not shrink with K) | slowmo (an "
       "outer momentum step on the learners' mean every --sync-every steps, learners reset to z) "
       "| post-local (synchronous every step for --local-after steps, then local SGD)",
       [](SessionOptions& o, const std::string& s) { o.trainer.sma_rule = parse_sma_rule(s); },
       [](const SessionOptions& o) {
         return o.trainer.sma_rule ? std::string(sma_rule_name(*o.trainer.sma_rule)) : "";
       })
      .show_default = false;
  t.optional_real_at("central-momentum", CB_FIELD(trainer.central_momentum),
                     "SMA's central momentum mu_z (default 0.9 for the paper and elastic rules, "
                     "0.5 for slowmo, 0 for post-local)");
  t.optional_real_at("outer-lr", CB_FIELD(trainer.outer_lr),
                     "the central step eta of --sma-rule elastic and slowmo: z moves by eta "
                     "(mean - z) plus its momentum (default 1)");
  t.integer_at("local-after", CB_FIELD(trainer.local_after),
               "--sma-rule post-local: steps synchronised every step before --sync-every applies");
  t.add(
      "ema", Kind::Value,
      "the exponential moving average of the weights and BatchNorm statistics (timm's model "
      "EMA), evaluated, checkpointed and exported instead of the model: Ne for a time constant "
      "of N epochs (the decay per step follows the learners), a decay per step such as 0.999, or "
      "off",
      [](SessionOptions& o, const std::string& s) {
        if (s == "off" || s == "none") {
          o.trainer.ema.reset();
          o.run.ema_epochs = 0;
        } else if (!s.empty() && s.back() == 'e') {
          const double e = parse_double("ema", s.substr(0, s.size() - 1));
          if (!(e > 0)) fail("--ema '{}': the time constant must be positive epochs", s);
          o.trainer.ema = SessionOptions::kEmaDecayUntilSet;  // the loop sets it from the epochs
          o.run.ema_epochs = e;
        } else {
          o.trainer.ema = parse_double("ema", s);
          o.run.ema_epochs = 0;
        }
      },
      [](const SessionOptions& o) {
        if (!o.trainer.ema) return std::string("off");
        return o.run.ema_epochs > 0 ? num(o.run.ema_epochs) + "e" : num(*o.trainer.ema);
      });
  t.flag_at("eval-unaveraged", CB_FIELD(run.eval_unaveraged),
            "with --ema: evaluate the weights it averages too (z, or the learners' mean), "
            "reported alongside the average's scores");
  t.integer_at("ema-start", CB_FIELD(trainer.ema_start),
               "with --ema: steps before the average starts (until then it is a copy of the "
               "model)");
  t.integer_at("sync-every", CB_FIELD(trainer.sync_every),
               "apply the SMA correction every N steps (local SGD in between)");
  t.real_at("tuner-threshold", CB_FIELD(run.tuner.threshold),
            "auto-tuner: add learners while images/s grow by more than this fraction");
  t.integer_at("tuner-window", CB_FIELD(run.tuner.window_steps),
               "auto-tuner: steps per throughput measurement");
  t.integer_at("tuner-windows", CB_FIELD(run.tuner.windows),
               "auto-tuner: windows per number of learners (their median is compared, and their "
               "spread is the noise a gain must exceed)");
  t.integer_at("tuner-warmup", CB_FIELD(run.tuner.warmup_steps),
               "auto-tuner: steps after each change before measuring");
  t.add(
       "memory-budget", Kind::Value,
       "bytes the learners of one device may use (K, M, G suffixes; default: the memory this "
       "process may still use, a container's cgroup limit included, / devices)",
       [](SessionOptions& o, const std::string& s) { o.trainer.memory_budget = parse_bytes(s); },
       [](const SessionOptions& o) {
         return o.trainer.memory_budget ? std::to_string(o.trainer.memory_budget) : std::string();
       })
      .show_default = false;
  t.real_at("target-accuracy", CB_FIELD(run.target_accuracy),
            "stop once the central model's test accuracy reaches this (0-1); reports the time to "
            "it")
      .show_default = false;
  t.text_at("metrics", CB_FIELD(metrics), "append one JSON object per evaluation to this file");
  t.text_at("report", CB_FIELD(report),
            "write the run report here: one self-contained HTML file with plots, redrawn at every "
            "evaluation (cb-report draws it from a --metrics file too)");
  t.text_at("tensorboard", CB_FIELD(tensorboard),
            "write TensorBoard event files into this folder (tensorboard --logdir DIR)");
  t.real_at("collective-timeout", CB_FIELD(collective_timeout),
            "under mpirun: seconds a sum or agreement between the processes may take before the "
            "whole job is aborted (a rank died, hangs or is far slower)");
  t.text_at("checkpoint-dir", CB_FIELD(checkpoint.dir),
            "write checkpoints (the whole training state) into this folder, as ckpt-<step>/; also "
            "at the end and when stopped by SIGINT/SIGTERM");
  t.text_at("checkpoint-every", CB_FIELD(checkpoint.every),
            "N (steps), Ne (epochs) or Nm (minutes); default 1e with --checkpoint-dir");
  t.integer_at("keep", CB_FIELD(checkpoint.keep),
               "checkpoints kept in --checkpoint-dir (the newest)");
  t.text_at("resume", CB_FIELD(checkpoint.resume),
            "continue the run saved in this checkpoint, or the newest valid one in this "
            "--checkpoint-dir (same model, data and batch size)");
  for (OptionSpec& s : t.v)
    if (s.kind == Kind::Value && s.show_default) {
      // Options whose default is "" have nothing to show.
      SessionOptions defaults;
      if (s.get(defaults).empty()) s.show_default = false;
    }
  return t.v;
}

#undef CB_FIELD

// Edit distance, for the "did you mean" of an unknown name.
size_t distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

bool parse_flag(const std::string& option, const std::string& v) {
  if (v == "true" || v == "1" || v == "yes" || v == "on") return true;
  if (v == "false" || v == "0" || v == "no" || v == "off") return false;
  fail("{} '{}': expected true or false", flag_of(option), v);
}

const std::vector<OptionSpec>& session_options() {
  static const std::vector<OptionSpec> table = make_table();
  return table;
}

const OptionSpec& find_session_option(std::string_view name) {
  std::string n(name);
  while (!n.empty() && n[0] == '-') n.erase(0, 1);
  std::replace(n.begin(), n.end(), '_', '-');
  const OptionSpec* best = nullptr;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (const OptionSpec& s : session_options()) {
    if (s.name == n || (!s.alias.empty() && s.alias == n)) return s;
    const size_t d = distance(n, s.name);
    if (d < best_d) {
      best_d = d;
      best = &s;
    }
  }
  if (n == "model" || n == "data")
    fail("'{}' is not an option here: it is given on its own (the model file, the data)", name);
  fail("unknown option '{}'{}", name,
       best && best_d <= std::max<size_t>(2, n.size() / 3)
           ? fmt::format(" (did you mean '{}'?)", best->name)
           : std::string());
}

void set_session_option(SessionOptions& o, std::string_view name, const std::string& value) {
  find_session_option(name).set(o, value);
}

}  // namespace cb
