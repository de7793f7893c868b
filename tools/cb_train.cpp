// cb-train MODEL.onnx --data DIR [options]
// Trains an ONNX model on MNIST-style IDX data (Fashion-MNIST by default in the docs) with one
// learner on the CPU: SGD (momentum, Nesterov, weight decay) or AdamW, a learning-rate schedule
// with optional warm-up, evaluation on the test set, and the trained model written back as ONNX.
// One line per evaluation, one summary line at the end. Exit codes: 0 trained; 1 bad input (the
// model, the data, a setting) or a diverged run; 2 usage.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <chrono>

#include "autodiff/autodiff.h"
#include "importer/onnx_exporter.h"
#include "importer/onnx_importer.h"
#include "runtime/data/idx_dataset.h"
#include "runtime/error.h"
#include "runtime/thread_pool.h"
#include "sma/trainer.h"

using namespace cb;

namespace {

std::string accuracy_text(const EvalResult& r) {
  return r.accuracy < 0 ? std::string("n/a") : fmt::format("{:.2f}%", 100 * r.accuracy);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cb-train: train an ONNX model on MNIST-style data (single learner, CPU)"};
  std::string model, data_dir, output, optimizer = "sgd", schedule = "constant", loss = "auto";
  TrainerOptions topts;
  RunOptions ropts;
  double lr = 0.01;
  bool no_shuffle = false;
  int threads = ThreadPool::hardware_threads();
  app.add_option("model", model, "ONNX model file (exported in training mode)")->required();
  app.add_option("--data", data_dir,
                 "folder with train-/t10k- images and labels in IDX format (.gz or not)")
      ->required();
  app.add_option("--batch-size,-b", topts.batch, "examples per step")->capture_default_str();
  app.add_option("--eval-batch-size", topts.eval_batch,
                 "examples per evaluation batch (default: --batch-size)");
  app.add_option("--epochs", ropts.epochs, "passes over the training set")->capture_default_str();
  app.add_option("--steps", ropts.steps, "stop after N steps (overrides --epochs)");
  app.add_option("--lr", lr, "learning rate")->capture_default_str();
  app.add_option("--momentum", topts.momentum, "SGD momentum")->capture_default_str();
  app.add_flag("--nesterov", topts.nesterov, "Nesterov momentum (SGD)");
  app.add_option("--weight-decay", topts.weight_decay,
                 "L2 penalty (SGD: added to the gradient; AdamW: decoupled)")
      ->capture_default_str();
  app.add_option("--optimizer", optimizer, "sgd | adamw")->capture_default_str();
  app.add_option("--lr-schedule", schedule, "constant | step | multistep | cosine")
      ->capture_default_str();
  app.add_option("--lr-step-size", ropts.schedule.step_size, "step: epochs between decays")
      ->capture_default_str();
  app.add_option("--lr-gamma", ropts.schedule.gamma, "step, multistep: decay factor")
      ->capture_default_str();
  app.add_option("--lr-milestones", ropts.schedule.milestones, "multistep: epochs, e.g. 30,60")
      ->delimiter(',');
  app.add_option("--warmup-steps", ropts.schedule.warmup_steps,
                 "linear warm-up over the first N steps");
  app.add_option("--seed", ropts.seed, "seed of the shuffle")->capture_default_str();
  app.add_flag("--no-shuffle", no_shuffle, "visit the training examples in file order");
  app.add_option("--eval-every", ropts.eval_every,
                 "evaluate every N steps (default: at the end of each epoch)");
  app.add_option("--test-limit", ropts.test_limit, "evaluate on the first N test examples only");
  app.add_option("--loss", loss, "auto | cross-entropy | mse | model")->capture_default_str();
  app.add_option("--threads", threads, "worker threads")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--output,-o", output, "write the trained model here (ONNX)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    ropts.shuffle = !no_shuffle;
    ropts.schedule.lr = lr;
    ropts.schedule.kind = parse_lr_schedule(schedule);
    ropts.schedule.validate();
    if (optimizer == "sgd")
      topts.optimizer = OptimizerKind::Sgd;
    else if (optimizer == "adamw")
      topts.optimizer = OptimizerKind::AdamW;
    else
      fail("unknown --optimizer '{}' (choices: sgd, adamw)", optimizer);
    if (topts.batch <= 0) fail("--batch-size must be positive, got {}", topts.batch);
    if (!(topts.momentum >= 0 && topts.momentum < 1))
      fail("--momentum must be in [0, 1), got {}", topts.momentum);
    if (topts.nesterov && (topts.optimizer != OptimizerKind::Sgd || topts.momentum == 0))
      fail("--nesterov needs --optimizer sgd with a --momentum above 0");
    if (!(topts.weight_decay >= 0))
      fail("--weight-decay must not be negative, got {}", topts.weight_decay);

    // Data first: a missing folder is the commonest mistake and costs nothing to find.
    IdxDataset data = load_idx_dataset(data_dir);
    ImportResult r = import_model(model);
    LossSpec spec;
    if (loss == "auto") {
      try {
        spec = detect_loss(r.graph);
      } catch (const Error&) {
        std::string outs;
        for (ValueId o : r.graph.outputs)
          outs +=
              fmt::format("{}'{}' {}{}", outs.empty() ? "" : ", ", r.graph.value(o).name,
                          dtype_name(r.graph.value(o).dtype), to_string(r.graph.value(o).shape));
        fail(
            "{}: no classifier output to train on labels (outputs: {}); cb-train needs [N,C] "
            "logits (or a scalar loss output computed by the model from an i64 [N] labels input)",
            model, outs);
      }
    } else if (loss == "cross-entropy")
      spec.kind = LossKind::SoftmaxCrossEntropy;
    else if (loss == "mse")
      spec.kind = LossKind::MeanSquaredError;
    else if (loss == "model")
      spec = {LossKind::ModelOutput, ""};
    else
      fail("unknown --loss '{}' (choices: auto, cross-entropy, mse, model)", loss);
    if (loss == "model") {
      LossSpec d = detect_loss(r.graph);
      if (d.kind != LossKind::ModelOutput)
        fail("--loss model: the model has no scalar float output");
      spec = d;
    }
    auto dev = make_cpu_device(threads);
    Trainer trainer(r.graph, spec, *dev, topts);
    const Value& out = trainer.training_graph().graph.value(trainer.training_graph().output);
    fmt::print("model    {}: {} parameters, output '{}' {}\n", model, trainer.param_count(),
               out.name, to_string(out.shape));
    fmt::print("loss     {}{}\n", loss_kind_name(spec.kind),
               loss == "auto" ? " (auto-detected)" : "");
    fmt::print("data     {}: {} training, {} test images of {}x{}\n", data_dir, data.train.count,
               data.test.count, data.train.rows, data.train.cols);
    const int64_t spe = data.train.count / topts.batch;
    const int64_t total = ropts.steps > 0 ? ropts.steps : ropts.epochs * spe;
    std::string opt_text =
        topts.optimizer == OptimizerKind::Sgd
            ? fmt::format("sgd momentum {}{} weight decay {}", topts.momentum,
                          topts.nesterov ? " (nesterov)" : "", topts.weight_decay)
            : fmt::format("adamw betas ({}, {}) eps {} weight decay {}", topts.beta1, topts.beta2,
                          topts.eps, topts.weight_decay);
    fmt::print(
        "train    batch {}, {} steps ({} per epoch, last partial batch dropped), {}, lr {} {}{}, "
        "{} threads, {}\n",
        topts.batch, total, spe, opt_text, lr, lr_schedule_name(ropts.schedule.kind),
        ropts.schedule.warmup_steps
            ? fmt::format(" + {} warm-up steps", ropts.schedule.warmup_steps)
            : "",
        threads, ropts.shuffle ? fmt::format("shuffled (seed {})", ropts.seed) : "file order");
    std::fflush(stdout);
    RunSummary s = run_training(trainer, data, ropts, [&](const Progress& p) {
      fmt::print(
          "epoch {:3d}  step {:7d}  lr {:.5g}  train loss {:.4f}  test loss {:.4f}  "
          "test accuracy {}  {:.0f} images/s\n",
          p.epoch, p.step, p.lr, p.train_loss, p.test.loss, accuracy_text(p.test), p.images_per_s);
      std::fflush(stdout);
    });
    fmt::print(
        "done     {} steps, {} images in {:.2f} s ({:.2f} s training): {:.0f} images/s, "
        "test accuracy {} on {} images\n",
        s.steps, s.images, s.seconds, s.train_seconds, s.images_per_s, accuracy_text(s.test),
        s.test.count);
    if (!output.empty()) {
      export_trained(model, output, trainer.trained_tensors());
      fmt::print("wrote    {}\n", output);
    }
    return 0;
  } catch (const Error& e) {
    fmt::print(stderr, "cb-train: error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "cb-train: internal error: {}\n", e.what());
    return 1;
  }
}
