// cb-run MODEL.onnx --input NAME=FILE.pb|random ... --output-dir DIR [--time N]
//        [--dim NAME=N ...] [--input-shape NAME=AxBxC ...] [--eval-mode | --train-mode]
// Runs a model forward on the CPU: inputs from ONNX TensorProto files (the ONNX test suite's
// format) or random data, every graph output written as DIR/<escaped output name>.pb (see
// output_file_name), and with --time N the per-iteration latency.
// Symbolic sizes are made concrete at load: the batch (a symbolic axis 0, and every dimension of
// the same name) from the input files or --batch-size, every other one from the input files,
// --dim or --input-shape. Inputs whose values decide shapes (Reshape's shape, Slice's starts,
// Pad's pads, axes) or an If's branch are bound as constants from their files. Each node runs as
// ONNX says the file asks: a BatchNormalization in training mode (training_mode=1, or its
// statistics outputs at opset <= 13) normalises with the batch statistics and outputs the updated
// running statistics (the spec's biased variance), a Dropout given training_mode=true drops.
// --eval-mode runs every such node in inference mode (running statistics, Dropout the identity):
// what a model exported for training is deployed as.
// --train-mode runs every one in training mode, as the trainer does (unbiased running variance).
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <map>
#include <new>
#include <random>

#include "importer/onnx_importer.h"
#include "importer/tensor_io.h"
#include "kernels/cpu/cpu_device.h"
#include "runtime/checksum.h"
#include "runtime/error.h"
#include "runtime/executor.h"
#include "runtime/passes.h"
#include "session/devices.h"
#include "session/options.h"

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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cb-run: run an ONNX model forward on the CPU"};
  std::string model, out_dir;
  std::vector<std::string> inputs, dim_opts, shape_opts;
  int64_t batch = 0;
  int threads = hardware_threads(), time_iters = 0;
  uint64_t seed = 0;
  bool train_mode = false, eval_mode = false;
  app.add_option("model", model, "ONNX model file")->required();
  app.add_option("--input,-i", inputs, "NAME=FILE.pb (ONNX TensorProto) or NAME=random");
  app.add_option("--output-dir,-o", out_dir, "write every graph output as DIR/<name>.pb");
  app.add_option("--dim", dim_opts, "NAME=N: the size of the symbolic dimension NAME (repeatable)");
  app.add_option("--input-shape", shape_opts,
                 "NAME=AxBxC: the shape of input NAME (fixes its symbolic sizes; repeatable)");
  app.add_option("--batch-size,-b", batch,
                 "batch size for random inputs (default: from the input files, else 1)");
  app.add_option("--threads", threads, "worker threads")->check(CLI::PositiveNumber);
  std::string device = "cpu";
  app.add_option("--device", device, "cpu, or cuda / cuda:N (one GPU)")->capture_default_str();
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
    std::map<std::string, std::string> spec;
    for (const std::string& s : inputs) {
      auto [name, src] = split_pair(s, "--input", "NAME=FILE.pb or NAME=random");
      spec[name] = src;
    }
    ImportOptions opts;
    add_size_options(opts, dim_opts, shape_opts);
    opts.sizes_hint += ", or an input file (--input INPUT=FILE.pb)";
    for (const auto& [name, src] : spec)
      if (src != "random") opts.input_values[name] = read_tensor_file(src);
    ImportResult r = import_model(model, opts);
    if (eval_mode || train_mode) set_training(r.graph, train_mode);
    const Graph& g = r.graph;
    for (const auto& [name, n] : r.sizes_bound) fmt::print(stderr, "size {} = {}\n", name, n);
    for (const auto& [name, src] : spec) {
      bool bound =
          std::find(r.inputs_bound.begin(), r.inputs_bound.end(), name) != r.inputs_bound.end();
      // An init-capture, not the binding itself: clang < 16 cannot capture a structured binding.
      bool known = std::any_of(g.inputs.begin(), g.inputs.end(),
                               [&, &n = name](ValueId v) { return g.value(v).name == n; });
      if (!known && !bound) {
        std::string names;
        for (ValueId v : g.inputs) names += (names.empty() ? "" : ", ") + g.value(v).name;
        fail("--input '{}': the model has no input of that name (inputs: {})", name, names);
      }
      if (bound && src == "random")
        fail("--input {}=random: '{}' decides shapes, so its values must be given as a file", name,
             name);
    }
    const bool has_batch = std::any_of(g.inputs.begin(), g.inputs.end(), [&](ValueId v) {
      return !g.value(v).shape.empty() && g.value(v).shape[0].batch;
    });
    if (batch && !has_batch)
      fail(
          "--batch-size {}: the model has no batch dimension to set (every input's first "
          "dimension is fixed in the file); give inputs of the shapes it declares",
          batch);
    // The batch size: from input files (or --input-shape) where the model's axis 0 is N, else
    // --batch-size.
    for (ValueId v : g.inputs) {
      const Value& val = g.value(v);
      if (val.shape.empty() || !val.shape[0].batch) continue;
      std::vector<int64_t> dims;
      std::string from;
      const auto& files = opts.input_values;
      if (auto f = files.find(val.name); f != files.end()) {
        dims = f->second->dims;
        from = "its file";
      } else if (auto s = opts.input_shapes.find(val.name); s != opts.input_shapes.end()) {
        dims = s->second;
        from = "--input-shape";
      } else {
        continue;
      }
      int64_t b = dims.empty() ? 0 : dims[0] / val.shape[0].value;
      if (batch && b != batch)
        fail("input '{}' has batch {} (from {}) but the batch size is {}", val.name, b, from,
             batch);
      batch = b;
    }
    if (!batch) batch = 1;
    std::unique_ptr<Device> dev;
    if (is_cuda_spec(device)) {
      const std::vector<int> ids = cuda_devices_of(device, "--device");
      if (ids.size() != 1) fail("--device {}: cb-run runs on one GPU; name it (cuda:N)", device);
      dev = make_cuda_device(ids[0]);
    } else if (device == "cpu") {
      dev = make_cpu_device(threads);
    } else {
      fail("--device '{}': expected cpu, cuda or cuda:N", device);
    }
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
        ex.set_input(i, *opts.input_values.at(v.name));
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
          "latency  batch {}  {}  iterations {}  median {:.3f} ms  mean {:.3f} ms  min "
          "{:.3f} ms\n",
          batch, dev->caps().host_memory ? fmt::format("threads {}", threads) : dev->caps().name,
          time_iters, ms[ms.size() / 2], mean, ms.front());
    }
    if (!out_dir.empty()) {
      fs::create_directories(out_dir);
      for (size_t i = 0; i < g.outputs.size(); ++i) {
        const std::string& name = g.value(g.outputs[i]).name;
        const std::string file = output_file_name(name);
        if (file != name + ".pb") fmt::print("output '{}' -> {}\n", name, file);
        write_tensor_file((fs::path(out_dir) / file).string(), ex.output(i), name);
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
