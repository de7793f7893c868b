// crossbow's public C++ API: train an ONNX model with SMA (many learners per device), as cb-train
// does, from a program. One header, no other crossbow header behind it:
//
//   #include <crossbow/crossbow.h>
//   crossbow::Options o;
//   o.set("batch-size", "16").set("epochs", "1");            // any cb-train option, by name
//   crossbow::Trainer t("lenet5.onnx", o);
//   t.fit(crossbow::Data::arrays({{"x", x}, {"y", y}}));      // or Data::path("fashion-mnist/")
//   double acc = t.evaluate(crossbow::Data::arrays({{"x", xv}, {"y", yv}})).at("accuracy");
//   t.save("trained.onnx");                                   // inference form
//
// CMake: find_package(crossbow) and target_link_libraries(app PRIVATE crossbow::crossbow).
//
// Every error is a crossbow::Error carrying the message cb-train prints (naming the option, the
// file, the input or the shape at fault). A Trainer is used from one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

// What the shared library exports (everything else in it is hidden).
#define CROSSBOW_API __attribute__((visibility("default")))

namespace crossbow {

// The version of the library, "MAJOR.MINOR.PATCH".
CROSSBOW_API std::string version();

class CROSSBOW_API Error : public std::runtime_error {
 public:
  enum class Kind {
    Usage,  // an option's value, an unknown option (cb-train exits with 2)
    Input,  // the model, the data, an array's dtype or shape (cb-train exits with 1)
    Run     // training failed: a diverged run, out of memory, a device (cb-train exits with 1)
  };
  Error(Kind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

// The element types a model's inputs and targets may have (wider or other integer types are
// converted by the caller: int16 and uint16 fit I32, uint32 fits I64).
enum class DType { F32, F64, F16, BF16, I8, I32, I64, U8, Bool };
CROSSBOW_API const char* dtype_name(DType t);  // "f32", ...
CROSSBOW_API size_t dtype_size(DType t);

// A host array: shape, dtype and row-major contiguous bytes. As data, its first axis is the
// example. `keep` holds whatever owns the bytes; without it the caller keeps them alive (and
// unchanged) for as long as the Trainer may read them (the fit, evaluate or predict call).
struct CROSSBOW_API Array {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  std::shared_ptr<const void> keep;

  int64_t elements() const;
  size_t bytes() const { return static_cast<size_t>(elements()) * dtype_size(dtype); }
  // An array that owns a zeroed buffer of its size.
  static Array zeros(DType dtype, std::vector<int64_t> shape);
  // The caller's bytes, not copied.
  static Array view(DType dtype, std::vector<int64_t> shape, const void* data,
                    std::shared_ptr<const void> keep = {});
  template <class T>
  static Array copy_of(const std::vector<T>& v, std::vector<int64_t> shape);
  template <class T>
  const T* as() const {
    return static_cast<const T*>(data);
  }
};

// Named arrays: the model's inputs by name (a one-input model may call its array "x") and the
// loss's target ("y", or the option "target").
using Arrays = std::vector<std::pair<std::string, Array>>;

// Where examples come from.
class CROSSBOW_API Data {
 public:
  Data() = default;  // none
  // A --data path: a folder (IDX, CIFAR, image folders, NumPy train.npz + val.npz) or a file
  // (.cbpack, .npz). Its test split is what evaluation uses when fit gets no validation data.
  static Data path(std::string path);
  // Arrays with one row per example (all the same number of rows), read where they are.
  static Data arrays(Arrays arrays);
  // Batches the caller makes. `start` begins one pass (an epoch) and returns the function that
  // yields its batches: it fills the arrays of the next one (each of batch-size rows for
  // training; a smaller last one is dropped) and returns false at the end of the pass.
  // `batches_per_pass`, when known (> 0), lets epoch-based schedules and the progress line
  // work; else a pass ends when the source does. Training fetches ahead on a thread of its own,
  // so `next` runs on that thread.
  using Next = std::function<bool(Arrays& batch)>;
  static Data batches(std::function<Next()> start, int64_t batches_per_pass = 0);

  bool empty() const { return !impl_; }
  struct Impl;
  const Impl* impl() const { return impl_.get(); }

 private:
  std::shared_ptr<const Impl> impl_;
};

// cb-train's options, set by name: its flag without the dashes ("batch-size"; "batch_size" is the
// same), the value as the command line takes it ("16", "auto", "0.5,0.5,0.5", "true" for a
// flag). An unknown name or a bad value throws Error (Usage) naming it; the whole set is checked
// again when a Trainer is made.
class CROSSBOW_API Options {
 public:
  Options();
  ~Options();
  Options(const Options&);
  Options& operator=(const Options&);
  Options(Options&&) noexcept;
  Options& operator=(Options&&) noexcept;

  Options& set(std::string_view name, const std::string& value);
  // The value in text form ("" when unset): the default until set.
  std::string get(std::string_view name) const;
  // The name messages start with ("crossbow" unless set) and the command line recorded in the
  // metrics and checkpoints.
  Options& label(std::string program, std::string command_line);

  struct Info {
    std::string name, alias, help, default_value;
    enum class Kind { Value, Flag, List, Repeat } kind;
    std::string type;  // what a value is, as --help shows it: INT, FLOAT or TEXT
  };
  static std::vector<Info> list();  // every option, in cb-train --help's order

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// One record of a run, as cb-train's --metrics file holds it: a JSON object, "type" "config",
// "tune", "eval" or "summary".
struct Record {
  std::string type;
  std::string json;
  std::map<std::string, double> numbers;  // its numeric fields at the top level
};

struct FitCallbacks {
  // SIGINT and SIGTERM stop training after the step (cb-train's behaviour; a second SIGINT exits
  // at once). Off by default: the program keeps its own handlers.
  bool handle_signals = false;
  // After each evaluation, with its record; true stops training there.
  std::function<bool(const Record& eval)> on_eval;
  // Polled after every step; true stops after it (a checkpoint is written when checkpoint-dir
  // is set). How a front end turns Ctrl-C into a clean stop.
  std::function<bool()> should_stop;
};

struct History {
  std::vector<Record> records;  // config, tune, eval ..., summary
  bool stopped = false;         // by a callback or a signal before the end
  int signal = 0;               // the signal that stopped it (SIGINT, SIGTERM), else 0
};

// Test scores: "loss", "count", and where they apply "accuracy", "top5", "mae", "r2".
using Scores = std::map<std::string, double>;

class CROSSBOW_API Trainer {
 public:
  // Reads the model file (exported in training mode) and checks the options (Error: Usage). The
  // learners are made on the first call that sees data: the data give sizes the model leaves
  // symbolic and the loss (integers: classes; floats: values).
  Trainer(const std::string& model, const Options& options = {});
  ~Trainer();
  Trainer(Trainer&&) noexcept;
  Trainer& operator=(Trainer&&) noexcept;

  // Trains for the options' epochs (or steps) on `train`, evaluating on `validation` (none: a
  // path's test split, else no evaluation) after each epoch (see evals-per-epoch, eval-every).
  // With the option resume, continues that run. A later call trains on from the weights reached
  // (its schedule starts again). Writes output, metrics, report and checkpoints as the options
  // say. On a handled signal (FitCallbacks::handle_signals) or a callback's stop, returns with
  // History::stopped; the trainer stays usable.
  History fit(const Data& train, const Data& validation = {}, const FitCallbacks& callbacks = {});
  // The trained model (the weight average of the central model, or with --ema off the central
  // model itself) on `data`, which must hold the target.
  Scores evaluate(const Data& data);
  // The model's outputs (every output, by name; rows in the order of the inputs) for `inputs`
  // (arrays, or batches; targets are not needed).
  Arrays predict(const Data& inputs);
  // Writes the trained model as ONNX: inference form (BatchNormalization on running statistics,
  // Dropout as Identity), or the graph as exported with `training_form`.
  void save(const std::string& path, bool training_form = false);
  // Writes a checkpoint of the whole training state into the option checkpoint-dir now (after a
  // fit); returns its folder.
  std::string save_checkpoint();

  // Changes an option between calls. Once the learners are made (the first call that saw data),
  // only what a run may change is accepted: its length, schedule, evaluation and output
  // options (epochs, steps, lr, lr-*, warmup-steps, seed, no-shuffle, eval-*, evals-per-epoch,
  // test-limit, target-accuracy, output*, metrics, report, tensorboard, checkpoint-*, keep,
  // resume, workers, augment, no-flip, mean, std); others throw Error (Usage) naming them.
  void set(std::string_view name, const std::string& value);
  std::string get(std::string_view name) const;

  int learners() const;   // in all, now (0 before the first fit)
  int64_t steps() const;  // steps trained so far

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::F32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::F64;
};
template <>
struct dtype_of<int8_t> {
  static constexpr DType value = DType::I8;
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = DType::I32;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::I64;
};
template <>
struct dtype_of<uint8_t> {
  static constexpr DType value = DType::U8;
};

template <class T>
Array Array::copy_of(const std::vector<T>& v, std::vector<int64_t> shape) {
  auto owned = std::make_shared<std::vector<T>>(v);
  Array a = view(dtype_of<T>::value, std::move(shape), owned->data(), owned);
  if (a.elements() != static_cast<int64_t>(v.size()))
    throw Error(Error::Kind::Input, "Array::copy_of: " + std::to_string(v.size()) +
                                        " values do not fill the shape given");
  return a;
}

}  // namespace crossbow
