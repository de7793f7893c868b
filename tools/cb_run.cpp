// cb-run MODEL.onnx --input NAME=FILE.pb|random ... --output-dir DIR [--time N]
//        [--eval-mode | --train-mode]
// Runs a model forward on the CPU: inputs from ONNX TensorProto files (the ONNX test suite's
// format) or random data, every graph output written as DIR/<output name>.pb, and with --time N
// the per-iteration latency. Each node runs as ONNX says the file asks: a BatchNormalization in
// training mode (training_mode=1, or its statistics outputs at opset <= 13) normalises with the
// batch statistics and outputs the updated running statistics (the spec's biased variance), a
// Dropout given training_mode=true drops. --eval-mode runs every such node in inference mode
// (running statistics, Dropout the identity): what a model exported for training is deployed as.
// --train-mode runs every one in training mode, as the trainer does (unbiased running variance).
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <new>
#include <random>

#include "importer/onnx_importer.h"
#include "importer/tensor_io.h"
#include "kernels/cpu/cpu_device.h"
#include "runtime/error.h"
#include "runtime/executor.h"
#include "runtime/passes.h"

namespace fs = std::filesystem;
using namespace cb;

namespace {

Tensor random_tensor(const Value& v, const std::vector<int64_t>& dims, std::mt19937_64& rng) {
  Tensor t;
  t.dtype = v.dtype;
  t.dims = dims;
  t.bytes.resize(static_cast<size_t>(t.numel()) * dtype_size(v.dtype));
  std::uniform_real_distribution<double> real(-1.0, 1.0);
  std::uniform_int_distribution<int> small(0, 9);  // safe as indices into any table of >= 10
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (v.dtype) {
      case DType::F32:
        t.data<float>()[i] = static_cast<float>(real(rng));
        break;
      case DType::F64:
        t.data<double>()[i] = real(rng);
        break;
      case DType::I64:
        t.data<int64_t>()[i] = small(rng);
        break;
      case DType::I32:
        t.data<int32_t>()[i] = small(rng);
        break;
      case DType::U8:
      case DType::I8:
        t.data<uint8_t>()[i] = static_cast<uint8_t>(small(rng));
        break;
      case DType::Bool:
        t.data<uint8_t>()[i] = static_cast<uint8_t>(small(rng) & 1);
        break;
      default:
        fail("input '{}': random data of type {} is not supported", v.name, dtype_name(v.dtype));
    }
  }
  return t;
}

std::string safe_file_name(std::string s) {
  for (char& c : s)
    if (c == '/' || c == '\\' || c == ':') c = '_';
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cb-run: run an ONNX model forward on the CPU"};
  std::string model, out_dir;
  std::vector<std::string> inputs;
  int64_t batch = 0;
  int threads = hardware_threads(), time_iters = 0;
  uint64_t seed = 0;
  bool train_mode = false, eval_mode = false;
  app.add_option("model", model, "ONNX model file")->required();
  app.add_option("--input,-i", inputs, "NAME=FILE.pb (ONNX TensorProto) or NAME=random");
  app.add_option("--output-dir,-o", out_dir, "write every graph output as DIR/<name>.pb");
  app.add_option("--batch-size,-b", batch,
                 "batch size for random inputs (default: from the input files, else 1)");
  app.add_option("--threads", threads, "worker threads")->check(CLI::PositiveNumber);
  app.add_option("--time", time_iters, "time N iterations after one warm-up, print latency");
  app.add_option("--seed", seed, "seed for random inputs");
  auto* eval_flag = app.add_flag(
      "--eval-mode", eval_mode,
      "run every BatchNormalization/Dropout in inference mode (default: each as the file says)");
  app.add_flag("--train-mode", train_mode,
               "run every BatchNormalization/Dropout in training mode, as the trainer does")
      ->excludes(eval_flag);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    ImportResult r = import_model(model);
    if (eval_mode || train_mode) set_training(r.graph, train_mode);
    const Graph& g = r.graph;
    std::map<std::string, std::string> spec;
    for (const std::string& s : inputs) {
      auto eq = s.find('=');
      if (eq == std::string::npos || eq == 0)
        fail("--input '{}': expected NAME=FILE.pb or NAME=random", s);
      spec[s.substr(0, eq)] = s.substr(eq + 1);
    }
    std::map<std::string, TensorPtr> files;
    for (const auto& [name, src] : spec) {
      // An init-capture, not the binding itself: clang < 16 cannot capture a structured binding.
      bool known = std::any_of(g.inputs.begin(), g.inputs.end(),
                               [&, &n = name](ValueId v) { return g.value(v).name == n; });
      if (!known) {
        std::string names;
        for (ValueId v : g.inputs) names += (names.empty() ? "" : ", ") + g.value(v).name;
        fail("--input '{}': the model has no input of that name (inputs: {})", name, names);
      }
      if (src != "random") files[name] = read_tensor_file(src);
    }
    // The batch size: from input files where the model's axis 0 is N, else --batch-size.
    for (ValueId v : g.inputs) {
      const Value& val = g.value(v);
      auto f = files.find(val.name);
      if (f == files.end() || val.shape.empty() || !val.shape[0].batch) continue;
      int64_t b = f->second->dims.empty() ? 0 : f->second->dims[0] / val.shape[0].value;
      if (batch && b != batch)
        fail("input '{}' has batch {} but the batch size is {}", val.name, b, batch);
      batch = b;
    }
    if (!batch) batch = 1;
    auto dev = make_cpu_device(threads);
    Executor ex(g, *dev, batch);
    std::mt19937_64 rng(seed);
    for (size_t i = 0; i < g.inputs.size(); ++i) {
      const Value& v = g.value(g.inputs[i]);
      auto s = spec.find(v.name);
      if (s == spec.end())
        fail("no data for input '{}' {}: pass --input {}=FILE.pb or --input {}=random", v.name,
             to_string(v.shape), v.name, v.name);
      if (s->second == "random")
        ex.set_input(i, random_tensor(v, ex.input_dims(i), rng));
      else
        ex.set_input(i, *files.at(v.name));
    }
    ex.run();
    if (time_iters > 0) {
      std::vector<double> ms;
      for (int it = 0; it < time_iters; ++it) {
        auto t0 = std::chrono::steady_clock::now();
        ex.run();
        ms.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count());
      }
      std::sort(ms.begin(), ms.end());
      double mean = 0;
      for (double x : ms) mean += x;
      mean /= static_cast<double>(ms.size());
      fmt::print(
          "latency  batch {}  threads {}  iterations {}  median {:.3f} ms  mean {:.3f} ms  min "
          "{:.3f} ms\n",
          batch, threads, time_iters, ms[ms.size() / 2], mean, ms.front());
    }
    if (!out_dir.empty()) {
      fs::create_directories(out_dir);
      for (size_t i = 0; i < g.outputs.size(); ++i) {
        const std::string& name = g.value(g.outputs[i]).name;
        write_tensor_file((fs::path(out_dir) / (safe_file_name(name) + ".pb")).string(),
                          ex.output(i), name);
      }
    } else if (time_iters == 0) {
      for (size_t i = 0; i < g.outputs.size(); ++i) {
        Tensor t = ex.output(i);
        fmt::print("{} {}{}\n", g.value(g.outputs[i]).name, dtype_name(t.dtype),
                   to_string(shape_of(t.dims)));
      }
    }
    return 0;
  } catch (const Error& e) {
    fmt::print(stderr, "cb-run: error: {}\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "cb-run: error: out of memory (lower --batch-size)\n");
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "cb-run: internal error: {}\n", e.what());
    return 1;
  }
}
