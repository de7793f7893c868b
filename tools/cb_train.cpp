// cb-train MODEL.onnx --data DIR [options]
// Trains an ONNX model on the data set in DIR (runtime/data/dataset.h: MNIST-style IDX files,
// CIFAR-10/100 binaries, image folders of JPEG/PNG, or a .cbpack; detected from the content) on
// the CPU, the batches made ahead by a pipeline of worker threads (runtime/data/pipeline.h):
// SGD (momentum, Nesterov, weight decay) with SMA over many learners (sma/trainer.h; the
// number chosen by the auto-tuner or --learners), or AdamW with one learner (the same trainer); a
// learning-rate schedule with optional warm-up, evaluation of the central model on the test set,
// and the trained model written back as ONNX at every evaluation (temporary file + rename, so the
// file on disk is always the last good model). A progress line redraws in place on a terminal
// (plain lines every 10 s in a log); one line per evaluation (and one JSON object per evaluation
// in --metrics), one summary line at the end. Exit codes: 0 trained; 1 bad input (the model, the
// data, a setting) or a diverged run; 2 usage.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <optional>

#include "autodiff/autodiff.h"
#include "importer/onnx_exporter.h"
#include "importer/onnx_importer.h"
#include "kernels/cpu/cpu_device.h"
#include "runtime/checksum.h"
#include "runtime/data/dataset.h"
#include "runtime/data/pack.h"
#include "runtime/data/pipeline.h"
#include "runtime/error.h"
#include "runtime/passes.h"
#include "runtime/thread_pool.h"
#include "sma/checkpoint.h"
#include "sma/mpi_job.h"
#include "sma/tensorboard.h"
#include "sma/train_loop.h"
#include "sma/trainer.h"
#include "tools/device_options.h"
#include "tools/size_options.h"
#include "tools/viz/report.h"

using namespace cb;

namespace {

std::string accuracy_text(const EvalResult& r) {
  return r.accuracy < 0 ? std::string("n/a") : fmt::format("{:.2f}%", 100 * r.accuracy);
}

std::string mib(int64_t bytes) {
  return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20));
}

std::string duration_text(double s) {
  if (s < 0) return "?";
  const auto t = static_cast<int64_t>(std::lround(s));
  if (t >= 3600) return fmt::format("{}h{:02d}m", t / 3600, t / 60 % 60);
  return fmt::format("{}m{:02d}s", t / 60, t % 60);
}

// "1234", "512K", "64M", "2G" (powers of 1024) -> bytes.
int64_t parse_bytes(const std::string& s) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (const std::exception&) {
    fail("--memory-budget '{}' is not a size (bytes, or with K, M, G)", s);
  }
  std::string unit = s.substr(pos);
  double mult = 1;
  if (unit == "K" || unit == "k" || unit == "KiB")
    mult = 1 << 10;
  else if (unit == "M" || unit == "MiB")
    mult = 1 << 20;
  else if (unit == "G" || unit == "GiB")
    mult = 1 << 30;
  else if (!unit.empty())
    fail("--memory-budget '{}': unknown unit '{}' (K, M, G)", s, unit);
  if (!(v > 0)) fail("--memory-budget must be positive, got '{}'", s);
  return static_cast<int64_t>(v * mult);
}

// SIGINT/SIGTERM: the first asks the loop to stop after the current step (a checkpoint and the
// model are then written); a second SIGINT exits at once (every file on disk is written to a
// temporary name and renamed, so nothing is left half-written).
volatile sig_atomic_t g_signal = 0;
extern "C" void on_signal(int sig) {
  if (g_signal != 0 && sig == SIGINT) _exit(128 + SIGINT);
  g_signal = sig;
}
void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// --checkpoint-every: "N" steps, "Ne" epochs, "Nm" minutes.
struct Every {
  double n = 0;
  char unit = 's';  // s(teps), e(pochs), m(inutes)
};
Every parse_every(const std::string& s) {
  Every e;
  size_t pos = 0;
  try {
    e.n = std::stod(s, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  const std::string unit = s.substr(pos);
  if (pos == 0 || !(e.n > 0) || (unit != "" && unit != "e" && unit != "m"))
    fail("--checkpoint-every '{}': expected N (steps), Ne (epochs) or Nm (minutes), N > 0", s);
  e.unit = unit.empty() ? 's' : unit[0];
  if (e.unit == 's' && e.n != std::floor(e.n))
    fail("--checkpoint-every '{}': a number of steps is a whole number", s);
  return e;
}

// A folder a file will be written into: it must exist and be writable, checked before training.
void check_writable_folder(const std::string& file, const char* flag) {
  std::filesystem::path dir = std::filesystem::path(file).parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    fail("{} {}: the folder {} does not exist; create it first", flag, file, dir.string());
  if (access(dir.c_str(), W_OK) != 0)
    fail("{} {}: the folder {} is not writable ({})", flag, file, dir.string(),
         std::strerror(errno));
}

// The progress line: redrawn in place on a terminal, plain lines in a log.
struct ProgressLine {
  // Under mpirun stdout is a pseudo-terminal that ends up in a log: plain lines there.
  bool tty = isatty(fileno(stdout)) != 0 && !launched_by_mpi();
  bool shown = false;
  void clear() {
    if (tty && shown) fmt::print("\r\033[K");
    shown = false;
  }
  // per_device: learners per device; memory: the device memory they use (the plan's bytes).
  void show(const Progress& p, int per_device, int64_t memory) {
    std::string line = fmt::format(
        "epoch {:.2f}  step {}  {:.0f} images/s  loss {:.4f}  lr {:.5g}  learners {} ({}/device, "
        "{:.1f} MiB)  data wait {:.0f}%  ETA {}",
        p.epoch, p.step, p.images_per_s, p.loss, p.lr, p.learners, per_device,
        static_cast<double>(memory) / (1 << 20), 100 * p.data_wait, duration_text(p.eta_s));
    if (tty) {
      fmt::print("\r\033[K{}", line);
      shown = true;
    } else {
      fmt::print("progress {}\n", line);
    }
    std::fflush(stdout);
  }
};

}  // namespace

// --image-size HxW.
std::pair<int64_t, int64_t> parse_image_size(const std::string& s) {
  int64_t h = 0, w = 0;
  char x = 0, extra = 0;
  if (std::sscanf(s.c_str(), "%" SCNd64 "%c%" SCNd64 "%c", &h, &x, &w, &extra) != 3 || x != 'x' ||
      h <= 0 || w <= 0 || h > 65536 || w > 65536)
    fail("--image-size '{}': expected HxW, e.g. 224x224", s);
  return {h, w};
}

int main(int argc, char** argv) {
  std::string command_line;
  for (int i = 0; i < argc; ++i) command_line += (i ? " " : "") + std::string(argv[i]);
  CLI::App app{
      "cb-train: train an ONNX model with SMA (many learners per device) on IDX, CIFAR, image "
      "folder or .cbpack data"};
  std::string model, data_dir, output, optimizer = "sgd", schedule = "constant", loss = "auto",
                                       output_name;
  std::vector<std::string> freeze;
  std::string image_size;
  std::vector<std::string> dim_opts, shape_opts;
  TrainerOptions topts;
  RunOptions ropts;
  double lr = 0.01;
  bool no_shuffle = false, output_training = false;
  int threads = hardware_threads();
  std::string learners = "auto", devices = "cpu", memory_budget, metrics, tensorboard, report;
  RunOptions& sro = ropts;
  std::optional<double> alpha;
  std::string lr_scaling = lr_scaling_name(TrainerOptions{}.lr_scaling);
  app.add_option("model", model, "ONNX model file (exported in training mode)")->required();
  app.add_option("--data", data_dir,
                 "data folder, format detected from its files: MNIST-style IDX "
                 "(train-/t10k- images and labels, .gz or not), CIFAR-10/100 binaries "
                 "(data_batch_N.bin + test_batch.bin, or train.bin + test.bin), an image folder "
                 "(train/<class>/ and val/<class>/, or <class>/, of .jpg/.jpeg/.png), or a "
                 ".cbpack file (cb-pack)")
      ->required();
  std::string data_format = "auto", augment = "auto", cache;
  DataOptions dopts;
  app.add_option("--data-format", data_format, "auto | idx | cifar | folder | pack")
      ->capture_default_str();
  app.add_option("--val-split", dopts.val_split,
                 "a folder of class folders (no train/, val/): the fraction of each class held "
                 "out as the test set (chosen by file name, the same in every run)")
      ->capture_default_str();
  app.add_option("--workers", ropts.workers,
                 "data pipeline threads that decode and transform ahead of the learners "
                 "(default: the cores --threads leaves free, at least 1)");
  app.add_option("--augment", augment,
                 "training augmentation: auto (random-resized crop + flip for image folders and "
                 "packs, none for IDX/CIFAR) | none | crop")
      ->capture_default_str();
  app.add_option("--mean", ropts.transforms.mean,
                 "per-channel mean subtracted after x/255 (default: ImageNet's for image folders "
                 "and packs, 0 for IDX/CIFAR); one value or one per channel")
      ->delimiter(',');
  app.add_option("--std", ropts.transforms.std,
                 "per-channel std divided by after the mean (default: ImageNet's for image "
                 "folders and packs, 1 for IDX/CIFAR)")
      ->delimiter(',');
  app.add_option("--cache", cache,
                 "image folders: train from this .cbpack (decoded, resized samples), made from "
                 "--data on first use (as cb-pack does) and checked against it later");
  app.add_option("--batch-size,-b", topts.batch, "examples per step")->capture_default_str();
  app.add_option("--eval-batch-size", topts.eval_batch,
                 "examples per evaluation batch (default: --batch-size)");
  app.add_option("--epochs", ropts.epochs, "passes over the training set")->capture_default_str();
  app.add_option("--steps", ropts.steps, "stop after N steps (overrides --epochs)");
  app.add_option("--lr", lr,
                 "learning rate of one learner at --batch-size (K learners: see --lr-scaling)")
      ->capture_default_str();
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
  app.add_option("--evals-per-epoch", ropts.evals_per_epoch,
                 "without --eval-every: evaluate N times per epoch (at every 1/N of the training "
                 "set, whatever the number of learners)")
      ->capture_default_str();
  app.add_option("--eval-every", ropts.eval_every,
                 "evaluate every N steps (default: at the end of each epoch)");
  app.add_option("--test-limit", ropts.test_limit, "evaluate on the first N test examples only");
  app.add_option("--loss", loss,
                 "auto | cross-entropy | mse | model (cross-entropy on a model ending in "
                 "Softmax/LogSoftmax reads the logits under it)")
      ->capture_default_str();
  app.add_option("--image-size", image_size,
                 "HxW: the size of a model input with symbolic height and width (image data are "
                 "resized to it)");
  app.add_option("--dim", dim_opts,
                 "NAME=N: the size of the model's symbolic dimension NAME (repeatable)");
  app.add_option("--input-shape", shape_opts,
                 "NAME=AxBxC: the shape of model input NAME, its first dimension the batch");
  app.add_option("--freeze", freeze,
                 "PATTERN: keep the parameters whose name matches this shell pattern (* ? [..]) "
                 "fixed; repeatable");
  app.add_option("--output-name", output_name,
                 "the model output the loss trains on (default: the one that fits)");
  app.add_option("--threads", threads, "worker threads")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--output,-o", output,
                 "write the trained model here (ONNX), at every evaluation (tmp + rename), in "
                 "inference form: BatchNormalization on its running statistics, Dropout as "
                 "Identity, no training-only outputs");
  app.add_flag("--output-training", output_training,
               "write --output in training form instead (the graph as exported, for training "
               "elsewhere)");
  app.add_option("--learners", learners,
                 "learners per device: a number, or auto (the auto-tuner adds learners while "
                 "throughput grows)")
      ->capture_default_str();
  app.add_option("--devices", devices,
                 "cpu (one device of --threads cores), cpu:G (G devices, the cores split among "
                 "them, each with its own learners and copy of the central model), cuda (every "
                 "GPU: one device each, summed with NCCL) or cuda:I,J (those GPUs)")
      ->capture_default_str();
  bool tf32 = false;
  app.add_flag("--tf32", tf32,
               "on GPUs, let cuBLASLt and cuDNN use TF32 tensor cores for f32 (faster, about 10 "
               "mantissa bits in products)");
  bool no_overlap = false;
  app.add_flag("--no-overlap", no_overlap,
               "run the z update (cross-device sum and central step) before the learners' next "
               "step instead of alongside it (same result, bit for bit)");
  app.add_option("--lr-scaling", lr_scaling,
                 "how --lr (one learner's learning rate at --batch-size) becomes the learners' "
                 "with K learners in all: none | sqrt | linear (x sqrt(K), x K)")
      ->capture_default_str();
  app.add_option("--alpha", alpha,
                 "SMA's pull toward the central model (default min(2/K, 1/2) for K >= 2 learners "
                 "in all, 0 for one learner: plain SGD)");
  app.add_option("--central-momentum", topts.central_momentum, "SMA's central momentum mu_z")
      ->capture_default_str();
  app.add_option("--sync-every", topts.sync_every,
                 "apply the SMA correction every N steps (local SGD in between)")
      ->capture_default_str();
  app.add_option("--tuner-threshold", sro.tuner.threshold,
                 "auto-tuner: add learners while images/s grow by more than this fraction")
      ->capture_default_str();
  app.add_option("--tuner-window", sro.tuner.window_steps,
                 "auto-tuner: steps per throughput measurement")
      ->capture_default_str();
  app.add_option("--tuner-windows", sro.tuner.windows,
                 "auto-tuner: windows per number of learners (their median is compared, and "
                 "their spread is the noise a gain must exceed)")
      ->capture_default_str();
  app.add_option("--tuner-warmup", sro.tuner.warmup_steps,
                 "auto-tuner: steps after each change before measuring")
      ->capture_default_str();
  app.add_option("--memory-budget", memory_budget,
                 "bytes the learners of one device may use (K, M, G suffixes; default: free "
                 "memory / devices)");
  app.add_option("--target-accuracy", sro.target_accuracy,
                 "stop once the central model's test accuracy reaches this (0-1); reports the "
                 "time to it");
  app.add_option("--metrics", metrics, "append one JSON object per evaluation to this file");
  app.add_option("--report", report,
                 "write the run report here: one self-contained HTML file with plots, redrawn at "
                 "every evaluation (cb-report draws it from a --metrics file too)");
  app.add_option("--tensorboard", tensorboard,
                 "write TensorBoard event files into this folder (tensorboard --logdir DIR)");
  double collective_timeout = 300;
  app.add_option("--collective-timeout", collective_timeout,
                 "under mpirun: seconds a sum or agreement between the processes may take before "
                 "the whole job is aborted (a rank died, hangs or is far slower)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  std::string checkpoint_dir, checkpoint_every, resume;
  int keep = 3;
  app.add_option("--checkpoint-dir", checkpoint_dir,
                 "write checkpoints (the whole training state) into this folder, as "
                 "ckpt-<step>/; also at the end and when stopped by SIGINT/SIGTERM");
  app.add_option("--checkpoint-every", checkpoint_every,
                 "N (steps), Ne (epochs) or Nm (minutes); default 1e with --checkpoint-dir");
  app.add_option("--keep", keep, "checkpoints kept in --checkpoint-dir (the newest)")
      ->capture_default_str();
  app.add_option("--resume", resume,
                 "continue the run saved in this checkpoint, or the newest valid one in this "
                 "--checkpoint-dir (same model, data and batch size)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  // Usage: every flag's value is checked first, before anything is read; exit code 2.
  Every every;
  const bool auto_learners = learners == "auto";
  int nlearners = 1;
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
    if (ropts.workers < 0) fail("--workers must not be negative, got {}", ropts.workers);
    if (keep < 1) fail("--keep must be at least 1, got {}", keep);
    every = parse_every(checkpoint_every.empty() ? "1e" : checkpoint_every);
    if (!checkpoint_every.empty() && checkpoint_dir.empty())
      fail("--checkpoint-every needs --checkpoint-dir");
    ropts.transforms.augment = parse_augment(augment);
    dopts.format = parse_data_format(data_format);
    if (loss != "auto" && loss != "cross-entropy" && loss != "mse" && loss != "model")
      fail("unknown --loss '{}' (choices: auto, cross-entropy, mse, model)", loss);
    if (!auto_learners) {
      try {
        size_t pos = 0;
        nlearners = std::stoi(learners, &pos);
        if (pos != learners.size()) throw std::invalid_argument(learners);
      } catch (const std::exception&) {
        fail("--learners '{}': expected a number or auto", learners);
      }
      if (nlearners < 1) fail("--learners must be at least 1, got {}", nlearners);
    }
    if (topts.optimizer != OptimizerKind::Sgd &&
        ((!auto_learners && nlearners != 1) || tools::count_devices(devices) != 1 || alpha))
      fail(
          "--optimizer adamw trains one learner on one device; SMA (--learners, --devices, "
          "--alpha) needs --optimizer sgd");
    if (!(sro.target_accuracy >= 0 && sro.target_accuracy <= 1))
      fail("--target-accuracy must be in [0, 1], got {}", sro.target_accuracy);
    tools::count_devices(devices);
    parse_lr_scaling(lr_scaling);
    if (!memory_budget.empty()) parse_bytes(memory_budget);
    if (output_training && output.empty()) fail("--output-training needs --output");
  } catch (const Error& e) {
    fmt::print(stderr, "cb-train: error: {}\n", e.what());
    return 2;
  }
  // Under mpirun: one process per device, rank 0 prints and writes (sma/mpi_job.h).
  std::unique_ptr<MpiJob> mpi;
  std::string who = "cb-train";
  try {
    if (launched_by_mpi()) {
      mpi = std::make_unique<MpiJob>(collective_timeout);
      who = fmt::format("cb-train (rank {} of {})", mpi->rank(), mpi->size());
      char host[256] = "?";
      gethostname(host, sizeof host - 1);
      fmt::print(stderr, "{}: pid {} on {}\n", who, getpid(), host);
      if (tools::is_cuda_spec(devices))
        fail(
            "--devices {} under mpirun: not supported yet (the MPI collective sums host "
            "memory); run GPUs in one process with --devices cuda, or CPUs under mpirun",
            devices);
      if (tools::count_devices(devices) != 1)
        fail("--devices {}: under mpirun each process is one device (start one rank per device)",
             devices);
      if (!checkpoint_dir.empty() || !resume.empty())
        fail("--checkpoint-dir and --resume are not supported under mpirun yet");
      if (!cache.empty()) fail("--cache under mpirun: make the pack first with cb-pack");
      if (mpi->rank() != 0) {  // rank 0 prints and writes; the others keep only stderr
        output.clear();
        metrics.clear();
        report.clear();
        tensorboard.clear();
        if (!std::freopen("/dev/null", "w", stdout)) fail("cannot silence stdout on this rank");
      }
    }
  } catch (const Error& e) {
    if (mpi) mpi->abort(fmt::format("{}: error: {}", who, e.what()), 2);  // peers must not wait
    fmt::print(stderr, "{}: error: {}\n", who, e.what());
    return 2;
  }
  try {
    if (!output.empty()) check_writable_folder(output, "--output");
    if (!report.empty()) check_writable_folder(report, "--report");
    const ExportForm form = output_training ? ExportForm::Training : ExportForm::Inference;
    if (!checkpoint_dir.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(checkpoint_dir, ec);
      if (ec) fail("--checkpoint-dir {}: cannot create it: {}", checkpoint_dir, ec.message());
      check_writable_folder((std::filesystem::path(checkpoint_dir) / "x").string(),
                            "--checkpoint-dir");
    }
    // Data first: a missing folder is the commonest mistake and costs nothing to find.
    Dataset data = load_dataset(data_dir, dopts);
    if (!cache.empty() && data.format != DataFormat::Folder)
      fail("--cache packs an image folder; {} is {}", data_dir, data.description);
    // Concrete sizes: symbolic H and W of an image input from --image-size, else from the data
    // when its images all have one size (IDX, CIFAR).
    std::optional<std::pair<int64_t, int64_t>> hw;
    if (!image_size.empty()) hw = parse_image_size(image_size);
    const ExampleDims ddims = data.train->dims();
    ImportOptions iopts;
    tools::add_size_options(iopts, dim_opts, shape_opts);
    iopts.size_of = [&](const std::string&, size_t axis, size_t rank) -> std::optional<int64_t> {
      if (rank != 4 || axis < 2) return std::nullopt;
      if (hw) return axis == 2 ? hw->first : hw->second;
      if (ddims.fixed()) return axis == 2 ? ddims.rows : ddims.cols;
      return std::nullopt;
    };
    iopts.sizes_hint = fmt::format(
        "with --image-size HxW (the images of {} have no one size to take it from), --dim NAME=N "
        "or --input-shape INPUT=AxBxC",
        data_dir);
    ImportResult r = import_model(model, iopts);
    const bool has_batch =
        std::any_of(r.graph.inputs.begin(), r.graph.inputs.end(), [&](ValueId v) {
          const Shape& s = r.graph.value(v).shape;
          return !s.empty() && s[0].batch;
        });
    if (!has_batch) {  // exported with a fixed batch: make it N where the graph allows
      iopts.rebatch = true;
      r = import_model(model, iopts);
      fmt::print(
          "batch    the model was exported with a fixed batch of {}; re-batched to "
          "--batch-size {} (its graph carries the batch through)\n",
          r.rebatched_from, topts.batch);
    }
    if (hw)
      for (ValueId v : r.graph.inputs) {
        const Value& in = r.graph.value(v);
        if (in.shape.size() == 4 &&
            (in.shape[2] != Dim::of(hw->first) || in.shape[3] != Dim::of(hw->second)))
          fail(
              "--image-size {}: the model's input '{}' is fixed at {}; drop --image-size or "
              "give its size",
              image_size, in.name, to_string(in.shape));
      }
    if (!freeze.empty()) {
      const int64_t n = freeze_parameters(r.graph, freeze);
      fmt::print("freeze   {} parameter tensor{} kept fixed\n", n, n == 1 ? "" : "s");
    }
    const LossSpec spec = choose_loss(r.graph, loss, output_name);
    if (topts.batch > data.train->size())
      fail("--batch-size {} is larger than the {} training examples", topts.batch,
           data.train->size());
    // The data against the model's input, before any learner is built.
    TransformSpec tspec = plan_transforms(data, model_input(r.graph, spec), ropts.transforms);
    if (!cache.empty()) {
      std::error_code ec;
      if (!std::filesystem::exists(cache, ec)) {
        PackOptions po;
        po.size = tspec.eval_resize();
        po.val_split = dopts.val_split;
        po.workers = ropts.workers > 0 ? ropts.workers : hardware_threads();
        fmt::print("cache    packing {} into {} (shorter side {}) ...\n", data_dir, cache, po.size);
        std::fflush(stdout);
        PackSummary ps = write_pack(data_dir, cache, po);
        fmt::print("cache    {} training + {} test images, {}\n", ps.train, ps.test, mib(ps.bytes));
      }
      Dataset packed = load_pack_dataset(cache, data_dir);
      packed.skipped = data.skipped;  // the folder's listing skips stay reported
      data = std::move(packed);
      tspec = plan_transforms(data, model_input(r.graph, spec), ropts.transforms);
    }
    const bool sma = topts.optimizer == OptimizerKind::Sgd;
    std::unique_ptr<EventWriter> tb;
    if (!tensorboard.empty()) tb = std::make_unique<EventWriter>(tensorboard);
    std::unique_ptr<std::ofstream> metrics_out;
    if (!metrics.empty()) {
      metrics_out = std::make_unique<std::ofstream>(metrics, std::ios::app);
      if (!*metrics_out) fail("{}: cannot open the metrics file for writing", metrics);
    }
    // The run's records (tools/viz/report.h): appended to --metrics as JSON lines, and drawn into
    // --report.
    std::vector<nlohmann::ordered_json> records;
    auto record = [&](nlohmann::ordered_json j, bool redraw) {
      if (metrics_out) {
        *metrics_out << j.dump() << "\n";
        metrics_out->flush();
        if (!*metrics_out)
          fail("{}: writing the metrics failed (is the disk full, or the file removed?)", metrics);
      }
      records.push_back(std::move(j));
      if (redraw && !report.empty())
        viz::write_file_atomically(report, viz::render_report(records));
    };
    // The tuner's records are timed as the loop times evaluations: from the start of train().
    auto t_start = std::chrono::steady_clock::now();
    auto since_start = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    };
    fmt::print("loss     {}{}\n", describe_loss(r.graph, spec),
               loss == "auto" ? " (auto-detected)" : "");
    fmt::print(
        "data     {}: {}, {} training, {} test images of {}{}\n", data.dir, data.description,
        data.train->size(), data.test->size(), data.train->dims().str(),
        data.classes.empty() ? std::string() : fmt::format(", {} classes", data.classes.size()));
    // GPUs: the learners' threads only enqueue work, so half the cores decode data.
    const int workers = ropts.workers > 0 ? ropts.workers
                        : tools::is_cuda_spec(devices)
                            ? default_workers(std::max(1, hardware_threads() / 2))
                            : default_workers(threads);
    fmt::print("inputs   {}; {} pipeline worker{}\n", tspec.describe(), workers,
               workers == 1 ? "" : "s");
    const int64_t spe = data.train->size() / topts.batch;
    std::string opt_text =
        topts.optimizer == OptimizerKind::Sgd
            ? fmt::format("sgd momentum {}{} weight decay {}", topts.momentum,
                          topts.nesterov ? " (nesterov)" : "", topts.weight_decay)
            : fmt::format("adamw betas ({}, {}) eps {} weight decay {}", topts.beta1, topts.beta2,
                          topts.eps, topts.weight_decay);
    std::string sched_text =
        fmt::format("lr {} {}{}", lr, lr_schedule_name(ropts.schedule.kind),
                    ropts.schedule.warmup_steps
                        ? fmt::format(" + {} warm-up steps", ropts.schedule.warmup_steps)
                        : "");
    std::string order_text =
        ropts.shuffle ? fmt::format("shuffled (seed {})", ropts.seed) : "file order";

    // The devices and the collective are made here and given to the trainer: CPU core groups
    // and an in-process group, or under mpirun the job's MPI collective (GPUs and NCCL plug into
    // the same two interfaces).
    std::vector<int> cores;  // within this process's affinity (an MPI launcher binds each rank)
    const std::vector<int>& allowed = ThreadPool::allowed_cores();
    for (int c = 0; c < threads; ++c)
      cores.push_back(allowed[static_cast<size_t>(c) % allowed.size()]);
    CudaOptions cuda_opts;
    cuda_opts.tf32 = tf32;
    std::vector<std::unique_ptr<Device>> devs = tools::make_devices(devices, cores, cuda_opts);
    std::vector<std::unique_ptr<Collective>> colls;
    if (mpi)
      colls.push_back(mpi->collective());
    else
      colls = tools::make_collectives(devices, devs);
    Placement where;
    for (size_t d = 0; d < devs.size(); ++d) {
      where.devices.push_back(devs[d].get());
      where.collectives.push_back(colls[d].get());
    }
    topts.learners = nlearners;
    topts.alpha = alpha;
    topts.lr_scaling = parse_lr_scaling(lr_scaling);
    topts.overlap_sync = !no_overlap;
    if (!sma) {  // AdamW: one learner, no central model (exactly torch.optim.AdamW)
      topts.alpha = 0;
      topts.central_momentum = 0;
    }
    if (!memory_budget.empty()) topts.memory_budget = parse_bytes(memory_budget);
    sro.auto_tune = sma && auto_learners;
    ProgressLine progress;
    sro.progress_interval_s = progress.tty ? 0.25 : 10;
    const std::string model_hash = file_hash(model);  // checkpoints and the ranks' agreement
    if (mpi) {
      // Every rank must run the same job: refused before the first step, naming each difference.
      const std::vector<std::pair<std::string, std::string>> mine = {
          {"crossbow version", CB_VERSION},
          {"model (hash)", model_hash},
          {"--batch-size", std::to_string(topts.batch)},
          {"--learners", learners},
          {"training examples", std::to_string(data.train->size())},
          {"test examples", std::to_string(data.test->size())},
          {"--seed", std::to_string(ropts.seed)},
          {"--steps/--epochs", fmt::format("{}/{}", ropts.steps, ropts.epochs)}};
      const std::string diff = mpi->differences(mine);
      if (!diff.empty())
        fail(
            "the ranks of this job differ:{}\nstart every rank with the same model, data and "
            "settings",
            diff);
      fmt::print(
          "ranks    {} processes (mpirun), one device each; sums: reduce to rank 0 + "
          "broadcast, timeout {:.0f} s\n",
          mpi->size(), collective_timeout);
    }
    Trainer trainer(r.graph, spec, topts, where);
    const Value& out =
        trainer.model().training_graph().graph.value(trainer.model().training_graph().output);
    const int64_t const_weights = param_stats(r.graph).constant_node_tensors;
    fmt::print("model    {}: {} parameters{}, output '{}' {}\n", model,
               trainer.model().param_count(),
               const_weights
                   ? fmt::format(" ({} tensors the file stores as Constant nodes)", const_weights)
                   : "",
               out.name, to_string(out.shape));
    fmt::print(
        "train    batch {} per learner, {} ({} batches per epoch, last partial batch dropped), "
        "{}, {}, {} threads, {}\n",
        topts.batch,
        ropts.steps > 0 ? fmt::format("{} steps", ropts.steps)
                        : fmt::format("{} epoch{}", ropts.epochs, ropts.epochs == 1 ? "" : "s"),
        spe, opt_text, sched_text, threads, order_text);
    const TrainMemory& mem = trainer.memory();
    std::string cores_text;
    for (int d = 0; d < trainer.devices(); ++d) {
      const DeviceCaps c = trainer.device(d).caps();
      cores_text += c.host_memory ? fmt::format("{}{} {} core{}", d ? ", " : "", c.name, c.cores,
                                                c.cores == 1 ? "" : "s")
                                  : fmt::format("{}{} {} SMs, {} of {} free", d ? ", " : "", c.name,
                                                c.cores, mib(c.memory_free), mib(c.memory_total));
    }
    const int K = trainer.total_learners();
    fmt::print(
        "sma      {} device{} ({}), {} learner{} per device{}, alpha {:.4g} ({}), learners' lr "
        "{:.5g} ({}), central momentum {}, sync every {} step{}, z update {}\n",
        trainer.devices(), trainer.devices() == 1 ? "" : "s", cores_text,
        trainer.learners_per_device(), trainer.learners_per_device() == 1 ? "" : "s",
        sro.auto_tune ? " to start (auto-tuned)" : "", trainer.alpha(),
        topts.alpha ? std::string("--alpha")
        : K == 1    ? std::string("one learner: plain SGD; min(2/K, 1/2) from K = 2")
                    : fmt::format("min(2/K, 1/2) at K = {}", K),
        lr * trainer.lr_factor(),
        topts.lr_scaling == LrScaling::None
            ? std::string("--lr, --lr-scaling none")
            : fmt::format("--lr {} x {} at K = {}; --lr-scaling {}", lr,
                          topts.lr_scaling == LrScaling::Sqrt ? "sqrt(K)" : "K", K,
                          lr_scaling_name(topts.lr_scaling)),
        topts.central_momentum, topts.sync_every, topts.sync_every == 1 ? "" : "s",
        topts.overlap_sync ? "overlapped" : "not overlapped");
    fmt::print(
        "memory   {} per replica ({} arena + the flat parameter, gradient, optimizer and snapshot "
        "buffers), {} shared, budget {} per device\n",
        mib(mem.per_replica), mib(mem.arena), mib(mem.fixed), mib(mem.budget));
    std::fflush(stdout);
    record({{"type", "config"},
            {"model", model},
            {"parameters", trainer.model().param_count()},
            {"data", fmt::format("{} ({})", data.dir, data.description)},
            {"training examples", data.train->size()},
            {"test examples", data.test->size()},
            {"batch per learner", topts.batch},
            {"length", ropts.steps > 0 ? fmt::format("{} steps", ropts.steps)
                                       : fmt::format("{} epochs", ropts.epochs)},
            {"optimizer", opt_text},
            {"schedule", sched_text},
            {"learners per device",
             sro.auto_tune ? fmt::format("{} to start (auto-tuned)", trainer.learners_per_device())
                           : std::to_string(trainer.learners_per_device())},
            {"devices", fmt::format("{} ({})", trainer.devices(), cores_text)},
            {"alpha", trainer.alpha()},
            {"learners' lr", lr * trainer.lr_factor()},
            {"threads", threads},
            {"target_accuracy", sro.target_accuracy},
            {"command", command_line},
            {"memory",
             {{"arena", mem.arena},
              {"per_replica", mem.per_replica},
              {"fixed", mem.fixed},
              {"budget", mem.budget}}}},
           true);

    Callbacks cbs;
    cbs.on_progress = [&](const Progress& p) {
      progress.show(p, trainer.learners_per_device(),
                    trainer.memory().need(trainer.learners_per_device()));
      if (tb)
        tb->scalars(p.step,
                    {{"train/loss", p.loss},
                     {"train/lr", p.lr},
                     {"train/images_per_s", p.images_per_s},
                     {"train/learners", p.learners},
                     {"train/data_wait_share", p.data_wait},
                     {"train/learners_per_device", trainer.learners_per_device()},
                     {"train/memory_mib",
                      static_cast<double>(trainer.memory().need(trainer.learners_per_device())) /
                          (1 << 20)}});
    };
    cbs.on_tune = [&](const TunerDecision& d, const TrainMemory& m) {
      progress.clear();
      const char* what = d.action == TunerDecision::Action::Add       ? "add one"
                         : d.action == TunerDecision::Action::BackOff ? "back off one"
                                                                      : "keep";
      std::string windows;
      for (double w : d.windows) windows += fmt::format("{}{:.0f}", windows.empty() ? "" : " ", w);
      const int cores = trainer.device(0).caps().cores;
      fmt::print(
          "tuner    {} learner{}/device ({}): {:.0f} images/s, median of [{}], spread {:.1f}%{}: "
          "{} -> {}/device (alpha {:.4g}, learners' lr {:.5g}; {} of {} budget) [{}]\n",
          d.measured, d.measured == 1 ? "" : "s",
          d.measured <= cores ? fmt::format("{} thread{} each", cores / d.measured,
                                            cores / d.measured == 1 ? "" : "s")
                              : fmt::format("{} on {} cores", d.measured, cores),
          d.images_per_s, windows, 100 * d.spread,
          d.gain != 0
              ? fmt::format(", gain {:+.1f}% (needed {:.1f}%)", 100 * d.gain, 100 * d.required)
              : std::string(),
          what, d.learners, trainer.alpha_for(d.learners),
          lr * lr_scale(topts.lr_scaling, d.learners * trainer.ranks()), mib(m.need(d.learners)),
          mib(m.budget), d.reason);
      std::fflush(stdout);
      record({{"type", "tune"},
              {"time", since_start()},
              {"measured", d.measured},
              {"learners", d.learners},
              {"action", what},
              {"images_per_s", d.images_per_s},
              {"windows", d.windows},
              {"spread", d.spread},
              {"gain", d.gain},
              {"required", d.required},
              {"reason", d.reason}},
             true);
    };
    cbs.on_reset = [&](int64_t step, double new_lr) {
      progress.clear();
      fmt::print("reset    step {}: the learning rate drops to {:.5g}; every replica reset to z\n",
                 step + 1, new_lr);
    };
    cbs.on_skipped = [&](const std::vector<SkipLog::Entry>& fresh, int64_t total) {
      progress.clear();
      fmt::print(stderr, "cb-train: warning: {}{}\n", skip_summary(fresh),
                 total > static_cast<int64_t>(fresh.size())
                     ? fmt::format(" ({} skipped so far)", total)
                     : std::string());
      std::fflush(stderr);
    };
    bool wrote = false;
    cbs.on_eval = [&](const EvalReport& p) {
      progress.clear();
      fmt::print(
          "epoch {:6.2f}  step {:7d}  lr {:.5g}  train loss {:.4f}  test loss {:.4f}  "
          "test accuracy {}  {:.0f} images/s  learners {}  spread {:.4g}\n",
          p.epoch, p.step, p.lr, p.train_loss, p.test.loss, accuracy_text(p.test), p.images_per_s,
          p.learners, p.spread);
      record({{"type", "eval"},
              {"time", p.time_s},
              {"epoch", p.epoch},
              {"step", p.step},
              {"loss", p.train_loss},
              {"test_loss", p.test.loss},
              {"accuracy", p.test.accuracy < 0 ? nlohmann::ordered_json(nullptr)
                                               : nlohmann::ordered_json(p.test.accuracy)},
              {"images_per_s", p.images_per_s},
              {"learners", p.learners},
              {"learners_per_device", trainer.learners_per_device()},
              {"lr", p.lr},
              {"data_wait_s", p.data_wait_s},
              {"spread", p.spread},
              {"memory_bytes", trainer.memory().need(trainer.learners_per_device())}},
             true);
      if (tb) {
        std::vector<std::pair<std::string, double>> v = {
            {"eval/train_loss", p.train_loss},
            {"eval/test_loss", p.test.loss},
            {"eval/lr", p.lr},
            {"eval/images_per_s", p.images_per_s},
            {"eval/learners", p.learners},
            {"eval/learners_per_device", trainer.learners_per_device()},
            {"eval/data_wait_s", p.data_wait_s},
            {"eval/sma_spread", p.spread},
            {"eval/epoch", p.epoch}};
        if (p.test.accuracy >= 0) v.emplace_back("eval/test_accuracy", p.test.accuracy);
        tb->scalars(p.step, v);
      }
      if (!output.empty()) {
        export_trained(model, output, trainer.trained_tensors(), form);
        wrote = true;
      }
      std::fflush(stdout);
    };
    // Checkpoints, resume and signals.
    CheckpointMeta meta;
    meta.model_hash = model_hash;
    meta.data = fmt::format("{} ({}): {} training, {} test images", data.dir, data.description,
                            data.train->size(), data.test->size());
    meta.batch = topts.batch;
    meta.command = command_line;
    meta.model_path = std::filesystem::absolute(model).string();
    meta.loss = loss_record(spec);
    LoopState loop;
    if (!resume.empty()) {
      LoadedCheckpoint ck = load_checkpoint(resume);
      for (const std::string& why : ck.refused)
        fmt::print(stderr, "cb-train: warning: checkpoint refused: {}\n", why);
      std::string diff;
      if (ck.meta.model_hash != meta.model_hash)
        diff += fmt::format("\n  model: {} is not the model of the checkpoint (hash {} vs {})",
                            model, meta.model_hash, ck.meta.model_hash);
      if (ck.meta.data != meta.data)
        diff += fmt::format("\n  data: {} (checkpoint: {})", meta.data, ck.meta.data);
      if (ck.meta.batch != meta.batch)
        diff += fmt::format("\n  --batch-size: {} (checkpoint: {})", meta.batch, ck.meta.batch);
      if (!diff.empty())
        fail(
            "--resume {}: this run differs from the checkpoint's:{}\n(the checkpoint's command: "
            "{})",
            ck.path, diff, ck.meta.command);
      loop = restore(trainer, ck.state);
      fmt::print("resume   {}: step {}, epoch {:.2f}, {} learner{}/device\n", ck.path, loop.step,
                 static_cast<double>(loop.consumed) / static_cast<double>(spe),
                 trainer.learners_per_device(), trainer.learners_per_device() == 1 ? "" : "s");
    }
    auto checkpoint = [&](const LoopState& st) {
      const std::string path = write_checkpoint(checkpoint_dir, capture(trainer, st), meta);
      prune_checkpoints(checkpoint_dir, keep);
      progress.clear();
      fmt::print("saved    {} (step {})\n", path, st.step);
      std::fflush(stdout);
    };
    auto last_ckpt_time = std::chrono::steady_clock::now();
    int64_t last_ckpt_epochs = spe > 0 ? loop.consumed / spe : 0;
    cbs.after_step = [&](const LoopState& st) {
      if (mpi) {  // every rank stops after the same step when any of them was signalled
        if (g_signal != 0) trainer.request_stop();
        if (trainer.stop_agreed()) {
          if (g_signal == 0) g_signal = SIGTERM;  // another rank's signal
          return true;
        }
      } else if (g_signal != 0) {
        return true;
      }
      if (checkpoint_dir.empty()) return false;
      bool due = false;
      if (every.unit == 's') {
        due = st.step % static_cast<int64_t>(every.n) == 0;
      } else if (every.unit == 'e') {
        const auto per = std::max<int64_t>(1, std::llround(every.n * static_cast<double>(spe)));
        due = st.consumed / per > last_ckpt_epochs;
        if (due) last_ckpt_epochs = st.consumed / per;
      } else {
        due = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_ckpt_time)
                  .count() >= every.n * 60;
      }
      if (due) {
        checkpoint(st);
        last_ckpt_time = std::chrono::steady_clock::now();
      }
      return false;
    };
    if (every.unit == 'e')
      last_ckpt_epochs =
          loop.consumed / std::max<int64_t>(1, std::llround(every.n * static_cast<double>(spe)));
    install_signal_handlers();

    RunSummary s;
    try {
      t_start = std::chrono::steady_clock::now();
      s = train(trainer, data, sro, cbs, &loop);
    } catch (const Error&) {
      progress.clear();
      if (wrote)
        fmt::print(stderr, "cb-train: {} holds the last good model (the last evaluation)\n",
                   output);
      throw;
    }
    progress.clear();
    if (!checkpoint_dir.empty()) checkpoint(loop);
    if (s.stopped) {
      const int sig = g_signal;
      if (!output.empty()) {
        export_trained(model, output, trainer.trained_tensors(), form);
        fmt::print("wrote    {} (the model at step {})\n", output, loop.step);
      }
      fmt::print(stderr, "cb-train: stopped by {} after step {}{}\n",
                 sig == SIGINT ? "SIGINT" : "SIGTERM", loop.step,
                 checkpoint_dir.empty()
                     ? std::string(" (no --checkpoint-dir: the run cannot be resumed)")
                     : fmt::format("; continue with --resume {}", checkpoint_dir));
      return 128 + sig;
    }
    if (mpi) {
      // The central model must be the same bits on every rank: checked, not assumed.
      const std::vector<float> z = trainer.central(0);
      const std::string h = fmt::format("{:016x}", fnv1a(z.data(), z.size() * sizeof(float)));
      const std::vector<std::string> all = mpi->all_gather(h);
      for (int rk = 1; rk < mpi->size(); ++rk)
        if (all[static_cast<size_t>(rk)] != all[0])
          fail("the central model differs between rank 0 ({}) and rank {} ({})", all[0], rk,
               all[static_cast<size_t>(rk)]);
      fmt::print(stderr, "{}: z fnv1a {}\n", who, h);
      fmt::print("ranks    z identical on all {} ranks (fnv1a {})\n", mpi->size(), h);
    }
    fmt::print(
        "done     {} steps, {} images in {:.2f} s ({:.2f} s training): {:.0f} images/s, "
        "test accuracy {} on {} images, {:.2f} epochs, {} learner{}\n",
        s.steps, s.images, s.seconds, s.train_seconds, s.images_per_s, accuracy_text(s.test),
        s.test.count, s.epochs, s.learners, s.learners == 1 ? "" : "s");
    fmt::print("data     waited {:.2f} s for training batches ({:.1f}% of training time){}\n",
               s.data_wait_s,
               s.train_seconds + s.data_wait_s > 0
                   ? 100 * s.data_wait_s / (s.train_seconds + s.data_wait_s)
                   : 0.0,
               data.skipped->count() > 0 ? fmt::format("; {} file{} skipped", data.skipped->count(),
                                                       data.skipped->count() == 1 ? "" : "s")
                                         : std::string());
    const StepTiming& tm = trainer.timing();
    fmt::print(
        "steps    forward/backward (phase A) {:.1f}%, waiting for the SMA update (phase B) "
        "{:.1f}% of step time, z update {}\n",
        100 * (1 - tm.phase_b_share()), 100 * tm.phase_b_share(),
        topts.overlap_sync ? "overlapped with the next step" : "not overlapped (--no-overlap)");
    if (sro.target_accuracy > 0) {
      if (s.reached_target)
        fmt::print(
            "target   test accuracy {:.2f}% reached after {:.2f} s, {:.2f} epochs, step {}\n",
            100 * sro.target_accuracy, s.target_seconds, s.target_epoch, s.target_step);
      else
        fmt::print("target   test accuracy {:.2f}% not reached ({} after {:.2f} epochs)\n",
                   100 * sro.target_accuracy, accuracy_text(s.test), s.epochs);
    }
    nlohmann::ordered_json sum = {
        {"type", "summary"},
        {"steps", s.steps},
        {"images", s.images},
        {"seconds", s.seconds},
        {"train_seconds", s.train_seconds},
        {"images_per_s", s.images_per_s},
        {"epochs", s.epochs},
        {"learners", s.learners},
        {"data_wait_s", s.data_wait_s},
        {"test_accuracy", s.test.accuracy < 0 ? nlohmann::ordered_json(nullptr)
                                              : nlohmann::ordered_json(s.test.accuracy)},
        {"test_loss", s.test.loss},
        {"phase_b_share", tm.phase_b_share()}};
    if (sro.target_accuracy > 0) {
      sum["target_accuracy"] = sro.target_accuracy;
      sum["target_reached"] = s.reached_target;
      if (s.reached_target) {
        sum["target_seconds"] = s.target_seconds;
        sum["target_epoch"] = s.target_epoch;
        sum["target_step"] = s.target_step;
      }
    }
    record(sum, true);
    if (!report.empty()) fmt::print("report   {}\n", report);
    if (!output.empty())
      fmt::print("wrote    {} ({} form)\n", output, output_training ? "training" : "inference");
    return 0;
  } catch (const Error& e) {
    // Under mpirun a rank that fails ends the job at once: its peers would otherwise wait in the
    // next collective until the timeout.
    if (mpi) mpi->abort(fmt::format("{}: error: {}", who, e.what()), 1);
    fmt::print(stderr, "{}: error: {}\n", who, e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    const std::string m = fmt::format(
        "{}: error: out of memory (lower --batch-size or --learners, or set --memory-budget)", who);
    if (mpi) mpi->abort(m, 1);
    fmt::print(stderr, "{}\n", m);
    return 1;
  } catch (const std::exception& e) {
    const std::string m = fmt::format("{}: internal error: {}", who, e.what());
    if (mpi) mpi->abort(m, 1);
    fmt::print(stderr, "{}\n", m);
    return 1;
  }
}
