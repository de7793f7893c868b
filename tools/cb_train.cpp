// cb-train MODEL.onnx --data DIR [options]: trains an ONNX model on a data set with SMA (many
// learners per device), as a TrainSession (session/train_session.h) does; this file only reads
// the command line. Exit codes: 0 trained; 1 bad input (the model, the data) or a diverged run;
// 2 usage (a flag's value); 128 + N stopped by signal N (SIGINT, SIGTERM) after writing a
// checkpoint and the model.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "runtime/data/pipeline.h"
#include "runtime/error.h"
#include "runtime/thread_pool.h"
#include "session/train_session.h"

using namespace cb;

int main(int argc, char** argv) {
  SessionOptions o;
  for (int i = 0; i < argc; ++i) o.command_line += (i ? " " : "") + std::string(argv[i]);
  o.threads = ThreadPool::hardware_threads();
  CLI::App app{
      "cb-train: train an ONNX model with SMA (many learners per device) on IDX, CIFAR, image "
      "folder or .cbpack data"};
  std::string optimizer = "sgd", schedule = "constant", image_size, learners = "auto",
              memory_budget;
  std::string lr_scaling = lr_scaling_name(TrainerOptions{}.lr_scaling);
  std::vector<std::string> dim_opts, shape_opts;
  bool no_shuffle = false, no_overlap = false, no_flip = false;
  app.add_option("model", o.model, "ONNX model file (exported in training mode)")->required();
  app.add_option("--data", o.data,
                 "data folder, format detected from its files: MNIST-style IDX "
                 "(train-/t10k- images and labels, .gz or not), CIFAR-10/100 binaries "
                 "(data_batch_N.bin + test_batch.bin, or train.bin + test.bin), an image folder "
                 "(train/<class>/ and val/<class>/, or <class>/, of .jpg/.jpeg/.png), or a "
                 ".cbpack file (cb-pack)")
      ->required();
  std::string data_format = "auto", augment = "auto";
  app.add_option("--data-format", data_format, "auto | idx | cifar | folder | pack | npz")
      ->capture_default_str();
  app.add_option("--val-split", o.data_options.val_split,
                 "a folder of class folders (no train/, val/): the fraction of each class held "
                 "out as the test set (chosen by file name, the same in every run); one .npz: "
                 "the fraction of its rows held out (a fixed choice, the same in every run)")
      ->capture_default_str();
  app.add_option("--target", o.run.target,
                 "NumPy data: the array that holds the loss's target (the model's inputs take "
                 "the arrays of their names; a one-input model may call its array x)")
      ->capture_default_str();
  app.add_option("--workers", o.run.workers,
                 "data pipeline threads that decode and transform ahead of the learners "
                 "(default: the cores --threads leaves free, at least 1)");
  app.add_option("--augment", augment,
                 "training augmentation: auto (for image folders and packs: CIFAR's pad + crop "
                 "for small images, milder and unflipped for grey ones, else a random-resized "
                 "crop around the input's aspect, ImageNet's for square inputs >= 160; + flip "
                 "unless the input is wide; none for IDX/CIFAR) | none | crop (ImageNet's "
                 "RandomResizedCrop + flip)")
      ->capture_default_str();
  app.add_flag("--no-flip", no_flip,
               "no horizontal flip in the augmentation (labels that mirroring changes: text, "
               "digits, left/right)");
  app.add_option("--mean", o.run.transforms.mean,
                 "per-channel mean subtracted after x/255 (default: ImageNet's for image folders "
                 "and packs, 0 for IDX/CIFAR); one value or one per channel")
      ->delimiter(',');
  app.add_option("--std", o.run.transforms.std,
                 "per-channel std divided by after the mean (default: ImageNet's for image "
                 "folders and packs, 1 for IDX/CIFAR)")
      ->delimiter(',');
  app.add_option("--cache", o.cache,
                 "image folders: train from this .cbpack (decoded, resized samples), made from "
                 "--data on first use (as cb-pack does) and checked against it later");
  app.add_option("--batch-size,-b", o.trainer.batch, "examples per step")->capture_default_str();
  app.add_option("--eval-batch-size", o.trainer.eval_batch,
                 "examples per evaluation batch (default: --batch-size)");
  app.add_option("--epochs", o.run.epochs, "passes over the training set")->capture_default_str();
  app.add_option("--steps", o.run.steps, "stop after N steps (overrides --epochs)");
  app.add_option("--lr", o.run.schedule.lr,
                 "learning rate of one learner at --batch-size (K learners: see --lr-scaling)")
      ->capture_default_str();
  app.add_option("--momentum", o.trainer.momentum, "SGD momentum")->capture_default_str();
  app.add_flag("--nesterov", o.trainer.nesterov, "Nesterov momentum (SGD)");
  app.add_option("--weight-decay", o.trainer.weight_decay,
                 "L2 penalty (SGD: added to the gradient; AdamW: decoupled)")
      ->capture_default_str();
  app.add_option("--optimizer", optimizer, "sgd | adamw")->capture_default_str();
  app.add_option("--lr-schedule", schedule, "constant | step | multistep | cosine")
      ->capture_default_str();
  app.add_option("--lr-step-size", o.run.schedule.step_size, "step: epochs between decays")
      ->capture_default_str();
  app.add_option("--lr-gamma", o.run.schedule.gamma, "step, multistep: decay factor")
      ->capture_default_str();
  app.add_option("--lr-milestones", o.run.schedule.milestones, "multistep: epochs, e.g. 30,60")
      ->delimiter(',');
  app.add_option("--warmup-steps", o.run.schedule.warmup_steps,
                 "linear warm-up over the first N steps");
  app.add_option("--seed", o.run.seed, "seed of the shuffle")->capture_default_str();
  app.add_flag("--no-shuffle", no_shuffle, "visit the training examples in file order");
  app.add_option("--evals-per-epoch", o.run.evals_per_epoch,
                 "without --eval-every: evaluate N times per epoch (at every 1/N of the training "
                 "set, whatever the number of learners)")
      ->capture_default_str();
  app.add_option("--eval-every", o.run.eval_every,
                 "evaluate every N steps (default: at the end of each epoch)");
  app.add_option("--test-limit", o.run.test_limit, "evaluate on the first N test examples only");
  app.add_option("--loss", o.loss,
                 "auto | cross-entropy | mse | l1 | huber | bce | model | output:NAME. "
                 "cross-entropy: scores with a class axis ([N,C], [N,T,C], [N,C,H,W]) vs integer "
                 "labels (on a model ending in Softmax/LogSoftmax it reads the logits under it); "
                 "mse, l1, huber: float targets of the output's shape; bce: logits vs targets in "
                 "[0,1] (BCEWithLogits); model: the model's own scalar loss output; output:NAME: "
                 "that scalar output; auto: a scalar output, else cross-entropy on the [N,C] one")
      ->capture_default_str();
  app.add_option("--class-axis", o.class_axis,
                 "cross-entropy: the output's class axis (-1: [N,C] 1, [N,T,C] 2, rank >= 4 1)")
      ->capture_default_str();
  app.add_option("--ignore-index", o.ignore_index,
                 "cross-entropy: labels equal to N add nothing to the loss or the accuracy")
      ->capture_default_str();
  app.add_option("--label-smoothing", o.label_smoothing,
                 "cross-entropy: PyTorch's label smoothing, in [0,1)")
      ->capture_default_str();
  app.add_option("--huber-delta", o.huber_delta,
                 "huber: where the loss turns from quadratic to linear")
      ->capture_default_str();
  app.add_option("--image-size", image_size,
                 "HxW: the size of a model input with symbolic height and width (image data are "
                 "resized to it)");
  app.add_option("--dim", dim_opts,
                 "NAME=N: the size of the model's symbolic dimension NAME (repeatable)");
  app.add_option("--input-shape", shape_opts,
                 "NAME=AxBxC: the shape of model input NAME, its first dimension the batch");
  app.add_option("--freeze", o.freeze,
                 "PATTERN: keep the parameters whose name matches this shell pattern (* ? [..]) "
                 "fixed; repeatable");
  app.add_option("--num-classes", o.num_classes,
                 "K: replace the classifier that computes the output by a new, freshly "
                 "initialised K-way one before training (fine-tuning on a data set of K classes)");
  app.add_option("--output-name", o.output_name,
                 "the model output the loss trains on (default: the one that fits)");
  app.add_option("--threads", o.threads, "worker threads")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--output,-o", o.output,
                 "write the trained model here (ONNX), at every evaluation (tmp + rename), in "
                 "inference form: BatchNormalization on its running statistics, Dropout as "
                 "Identity, no training-only outputs");
  app.add_flag("--output-training", o.output_training,
               "write --output in training form instead (the graph as exported, for training "
               "elsewhere)");
  app.add_option("--learners", learners,
                 "learners per device: a number, or auto (the auto-tuner adds learners while "
                 "throughput grows)")
      ->capture_default_str();
  app.add_option("--devices", o.devices,
                 "cpu (one device of --threads cores), cpu:G (G devices, the cores split among "
                 "them, each with its own learners and copy of the central model), cuda (every "
                 "GPU: one device each, summed with NCCL) or cuda:I,J (those GPUs)")
      ->capture_default_str();
  app.add_flag("--tf32", o.tf32,
               "on GPUs, let cuBLASLt and cuDNN use TF32 tensor cores for f32 (faster, about 10 "
               "mantissa bits in products)");
  app.add_flag("--deterministic", o.deterministic,
               "on GPUs, results identical from run to run (with a fixed --learners: the "
               "auto-tuner decides from measured throughput): the gradients that scatter with "
               "atomic adds (GatherGrad with many indices, PadGrad, ResizeGrad) gather in the "
               "CPU's order instead, and cuDNN runs no engine it notes nondeterministic (slower "
               "where those ops are large). CPU kernels are always deterministic: accepted, "
               "changes nothing");
  app.add_flag("--no-overlap", no_overlap,
               "run the z update (cross-device sum and central step) before the learners' next "
               "step instead of alongside it (same result, bit for bit)");
  app.add_option("--lr-scaling", lr_scaling,
                 "how --lr (one learner's learning rate at --batch-size) becomes the learners' "
                 "with K learners in all: none | sqrt | linear (x sqrt(K), x K)")
      ->capture_default_str();
  app.add_option("--alpha", o.trainer.alpha,
                 "SMA's pull toward the central model (default min(2/K, 1/2) for K >= 2 learners "
                 "in all, 0 for one learner: plain SGD)");
  app.add_option("--central-momentum", o.trainer.central_momentum, "SMA's central momentum mu_z")
      ->capture_default_str();
  app.add_option("--sync-every", o.trainer.sync_every,
                 "apply the SMA correction every N steps (local SGD in between)")
      ->capture_default_str();
  app.add_option("--tuner-threshold", o.run.tuner.threshold,
                 "auto-tuner: add learners while images/s grow by more than this fraction")
      ->capture_default_str();
  app.add_option("--tuner-window", o.run.tuner.window_steps,
                 "auto-tuner: steps per throughput measurement")
      ->capture_default_str();
  app.add_option("--tuner-windows", o.run.tuner.windows,
                 "auto-tuner: windows per number of learners (their median is compared, and "
                 "their spread is the noise a gain must exceed)")
      ->capture_default_str();
  app.add_option("--tuner-warmup", o.run.tuner.warmup_steps,
                 "auto-tuner: steps after each change before measuring")
      ->capture_default_str();
  app.add_option("--memory-budget", memory_budget,
                 "bytes the learners of one device may use (K, M, G suffixes; default: the "
                 "memory this process may still use, a container's cgroup limit included, / "
                 "devices)");
  app.add_option("--target-accuracy", o.run.target_accuracy,
                 "stop once the central model's test accuracy reaches this (0-1); reports the "
                 "time to it");
  app.add_option("--metrics", o.metrics, "append one JSON object per evaluation to this file");
  app.add_option("--report", o.report,
                 "write the run report here: one self-contained HTML file with plots, redrawn at "
                 "every evaluation (cb-report draws it from a --metrics file too)");
  app.add_option("--tensorboard", o.tensorboard,
                 "write TensorBoard event files into this folder (tensorboard --logdir DIR)");
  app.add_option("--collective-timeout", o.collective_timeout,
                 "under mpirun: seconds a sum or agreement between the processes may take before "
                 "the whole job is aborted (a rank died, hangs or is far slower)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--checkpoint-dir", o.checkpoint.dir,
                 "write checkpoints (the whole training state) into this folder, as "
                 "ckpt-<step>/; also at the end and when stopped by SIGINT/SIGTERM");
  app.add_option("--checkpoint-every", o.checkpoint.every,
                 "N (steps), Ne (epochs) or Nm (minutes); default 1e with --checkpoint-dir");
  app.add_option("--keep", o.checkpoint.keep, "checkpoints kept in --checkpoint-dir (the newest)")
      ->capture_default_str();
  app.add_option("--resume", o.checkpoint.resume,
                 "continue the run saved in this checkpoint, or the newest valid one in this "
                 "--checkpoint-dir (same model, data and batch size)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  // Usage: every flag's value is checked first, before anything is read; exit code 2.
  int code = 2;
  try {
    o.run.shuffle = !no_shuffle;
    o.run.schedule.kind = parse_lr_schedule(schedule);
    o.run.transforms.augment = parse_augment(augment);
    o.run.transforms.flip = !no_flip;
    o.data_options.format = parse_data_format(data_format);
    o.trainer.optimizer = parse_optimizer(optimizer);
    o.trainer.lr_scaling = parse_lr_scaling(lr_scaling);
    o.trainer.overlap_sync = !no_overlap;
    const std::optional<int> n = parse_learners(learners);
    o.auto_learners = !n;
    o.trainer.learners = n.value_or(1);
    if (!memory_budget.empty()) o.trainer.memory_budget = parse_bytes(memory_budget);
    if (!image_size.empty()) o.image_size = parse_image_size(image_size);
    add_size_options(o.import, dim_opts, shape_opts);
    TrainSession session(std::move(o));
    code = 1;
    return session.run();
  } catch (...) {
    fmt::print(stderr, "{}\n", failure_message("cb-train"));
    return code;
  }
}
