// A training session's settings: every setting of cb-train, in one struct with its defaults, and
// their validation in one place (SessionOptions::validate, which calls the trainer's, the loop's
// and the checkpoints' own), with the messages naming cb-train's flags. The text forms the
// command line takes ("auto" learners, "64M", "224x224") are parsed here too, so every front end
// reads them the same way.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "autodiff/autodiff.h"
#include "importer/onnx_importer.h"
#include "runtime/data/dataset.h"
#include "sma/checkpoint.h"
#include "sma/train_loop.h"
#include "sma/trainer.h"

namespace cb {

struct SessionOptions {
  std::string program = "cb-train";  // the name messages start with

  // The model and how it is read.
  std::string model;     // the ONNX file (exported in training mode)
  ImportOptions import;  // --dim, --input-shape (dims, input_shapes)
  std::optional<std::pair<int64_t, int64_t>> image_size;  // --image-size: symbolic H and W
  std::string loss = "auto";  // auto | cross-entropy | mse | l1 | huber | bce | model | output:NAME
  std::string output_name;    // the output the loss trains on; "" the one that fits
  int64_t class_axis = -1;    // --class-axis: cross-entropy's class axis; -1 by the output's rank
  int64_t ignore_index = -100;      // --ignore-index: cross-entropy labels that count for nothing
  double label_smoothing = 0;       // --label-smoothing, in [0, 1)
  double huber_delta = 1.0;         // --huber-delta, > 0
  std::vector<std::string> freeze;  // shell patterns of parameters kept fixed
  int64_t num_classes = 0;          // > 0: a new classifier head of this many classes (fine-tuning)

  // The data.
  std::string data;          // --data: a folder or file, format detected from its content
  DataOptions data_options;  // --data-format, --val-split
  std::string cache;         // image folders: train from this .cbpack, made on first use

  // The training.
  // trainer.learners: the start, or the fixed number. The weight average is on by default, with a
  // time constant of kEmaEpochs (run.ema_epochs; trainer.ema is its decay until the loop sets it).
  static constexpr double kEmaEpochs = 0.25;
  static constexpr double kEmaDecayUntilSet = 0.999;  // the trainer's until the loop sets it
  TrainerOptions trainer = [] {
    TrainerOptions t;
    t.ema = kEmaDecayUntilSet;
    return t;
  }();
  bool auto_learners = true;  // --learners auto: the auto-tuner
  RunOptions run = [] {       // run.schedule.lr is --lr
    RunOptions r;
    r.ema_epochs = kEmaEpochs;
    return r;
  }();
  std::string devices = "cpu";
  int threads = 0;  // worker threads (CPU cores); 0: every core this process may use
  bool tf32 = false;
  bool deterministic = false;       // --deterministic: CUDA kernels and engines in a fixed order
  double collective_timeout = 300;  // under mpirun: seconds a sum may take before the job aborts

  // What the run writes.
  std::string output;            // the trained model (ONNX), at every evaluation
  bool output_training = false;  // ... in training form instead of inference form
  std::string metrics, report, tensorboard;
  CheckpointOptions checkpoint;
  bool handle_signals = true;  // SIGINT/SIGTERM stop after the step (checkpoint and model written)
  std::string command_line;    // for the records

  // The loss settings (--class-axis, --ignore-index, --label-smoothing, --huber-delta) for
  // choose_loss.
  LossSpec loss_settings() const;

  // Throws cb::Error naming the flag at fault (not the data: it may come later, with fit). Reads
  // nothing on disk; asks the driver how many GPUs there are when `devices` names GPUs.
  void validate() const;
};

// "NAME=VALUE" of a repeated option (`form` names the expected form in the error).
std::pair<std::string, std::string> split_pair(const std::string& s, std::string_view option,
                                               std::string_view form);
// --learners: "auto" -> nullopt, "N" -> N >= 1.
std::optional<int> parse_learners(const std::string& s);
// --memory-budget: "1234", "512K", "64M", "2G" (powers of 1024) -> bytes.
int64_t parse_bytes(const std::string& s);
// --image-size: "HxW".
std::pair<int64_t, int64_t> parse_image_size(const std::string& s);
// --dim NAME=N and --input-shape NAME=AxBxC into o.dims and o.input_shapes (with the hint that
// names those flags).
void add_size_options(ImportOptions& o, const std::vector<std::string>& dims,
                      const std::vector<std::string>& shapes);

}  // namespace cb
