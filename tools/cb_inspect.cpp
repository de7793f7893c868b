// cb-inspect MODEL.onnx [--json | --dot] [--html FILE] [--no-fold] [--memory [--batch-size N]]
//            [--train]
// Reads any ONNX model and shows it back: inputs/outputs, parameters, op histogram, per-node
// shapes, and which nodes (if any) keep crossbow from training it.
// Exit codes: 0 trainable, 1 the model (or a file) is bad, 2 usage, 3 read fine but training is
// blocked by unsupported nodes (all listed).
#include <CLI/CLI.hpp>

#include <iostream>
#include <new>
#include <optional>
#include <sstream>

#include "autodiff/autodiff.h"
#include "importer/onnx_importer.h"
#include "runtime/error.h"
#include "runtime/memory_plan.h"
#include "session/devices.h"
#include "session/options.h"
#include "tools/inspect_report.h"
#include "viz/graph_html.h"
#include "viz/report.h"

int main(int argc, char** argv) {
  CLI::App app{"cb-inspect: show what crossbow reads from an ONNX model"};
  std::string model;
  bool json = false, dot = false, no_fold = false, memory = false, train = false;
  std::string html, loss_kind = "auto", output_name;
  std::vector<std::string> dim_opts, shape_opts;
  int64_t batch = 1;
  app.add_option("model", model, "ONNX model file")->required();
  auto* j = app.add_flag("--json", json, "machine-readable JSON on stdout");
  app.add_flag("--dot", dot, "Graphviz dot on stdout")->excludes(j);
  app.add_option("--html", html,
                 "write the graph view here: one HTML file with an SVG of the graph (shapes on "
                 "the edges, parameters and output bytes per node, search); with --train, the "
                 "training graph");
  app.add_flag("--no-fold", no_fold, "keep constant and shape-arithmetic nodes as in the file");
  auto* memory_flag =
      app.add_flag("--memory", memory, "print the memory plan: peak, no-reuse total, reuse ratio");
  app.add_flag("--train", train,
               "show the training graph (forward + loss + backward) instead; with --memory, "
               "its memory plan");
  app.add_option("--dim", dim_opts, "NAME=N: the size of the symbolic dimension NAME (repeatable)");
  app.add_option("--input-shape", shape_opts,
                 "NAME=AxBxC: the shape of input NAME (fixes its symbolic sizes; repeatable)");
  app.add_option("--loss", loss_kind,
                 "with --train: auto | cross-entropy | mse | l1 | huber | bce | model | "
                 "output:NAME, as cb-train")
      ->capture_default_str();
  app.add_option("--output-name", output_name,
                 "with --train: the output the loss trains on, as cb-train");
  std::string device;
  app.add_option("--device", device,
                 "with --memory: also show this device's memory and how many copies of the plan "
                 "fit in it (cpu, cuda, cuda:N; text output only)")
      ->excludes(j)
      ->needs(memory_flag);
  app.add_option("--batch-size,-b", batch, "batch size for --memory (default 1)")
      ->check(CLI::PositiveNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    cb::ImportOptions opts;
    opts.lenient = true;
    opts.fold = !no_fold;
    cb::add_size_options(opts, dim_opts, shape_opts);
    cb::ImportResult r = cb::import_model(model, opts);
    if (r.blockers.empty() && !no_fold) {
      // Every op is known; can gradients reach every parameter? (ops without a vjp block it)
      std::optional<cb::LossSpec> loss;
      try {
        loss = cb::choose_loss(r.graph, loss_kind, output_name);
      } catch (const cb::Error& e) {  // no default loss: cb-train needs --loss; not a blocker
        if (train) throw cb::Error(model + ": " + e.what());
      }
      if (loss) try {
          cb::build_training_graph(r.graph, *loss);
        } catch (const cb::Error& e) {
          r.blockers.push_back({"(training graph)", "-", e.what()});
        }
    }
    cb::TrainingGraph tg;
    if (train) {
      std::string why;
      for (const auto& b : r.blockers)
        why += "\n  " + (b.node == "(training graph)"
                             ? b.reason
                             : fmt::format("node '{}' ({}): {}", b.node, b.op_type, b.reason));
      if (!r.blockers.empty()) throw cb::Error(model + ": no training graph:" + why);
      cb::LossSpec loss = cb::choose_loss(r.graph, loss_kind, output_name);
      tg = cb::build_training_graph(r.graph, loss);
      std::cerr << "cb-inspect: training graph with " << cb::describe_loss(r.graph, loss) << ": "
                << r.graph.nodes.size() << " forward nodes, "
                << tg.graph.nodes.size() - r.graph.nodes.size() << " loss and backward nodes, "
                << tg.params.size() << " parameter tensors\n";
      r.graph = tg.graph;
    }
    std::ostringstream out;  // print only once everything succeeded: nothing half-done
    if (json)
      cb::tools::print_json(out, model, r);
    else if (dot)
      cb::tools::print_dot(out, r);
    else
      cb::tools::print_text(out, model, r);
    if (memory) {
      if (!r.blockers.empty())
        throw cb::Error(model + ": no memory plan: nodes of unknown ops have unknown shapes");
      cb::MemoryPlan plan = cb::plan_memory(r.graph, batch);
      if (json)
        cb::tools::print_plan_json(out, plan);
      else
        cb::print_plan(out, r.graph, plan);
      if (!device.empty()) {
        std::unique_ptr<cb::Device> dev;
        std::vector<int> gpus;
        if (cb::is_cuda_spec(device)) gpus = cb::cuda_devices_of(device, "--device");
        if (device == "cpu")
          dev = cb::make_cpu_device(1);
        else if (gpus.size() == 1)
          dev = cb::make_cuda_device(gpus[0]);
        else
          throw cb::Error("--device '" + device + "': expected cpu, cuda or cuda:N (one device)");
        const cb::DeviceCaps c = dev->caps();
        const double gib = 1 << 30;
        out << fmt::format(
            "device   {}: {:.2f} GiB free of {:.2f} GiB; this plan's peak ({:.3f} MiB) fits {} "
            "times (cb-train adds its flat parameter buffers per learner)\n",
            c.name, static_cast<double>(c.memory_free) / gib,
            static_cast<double>(c.memory_total) / gib,
            static_cast<double>(plan.bytes_peak) / (1 << 20),
            plan.bytes_peak > 0 ? c.memory_free / plan.bytes_peak : 0);
      }
    }
    if (!html.empty()) {
      cb::viz::GraphViewOptions vo;
      vo.title = model + (train ? " (training graph)" : "");
      vo.batch = batch;
      cb::viz::write_file_atomically(html, cb::viz::render_graph_html(r.graph, vo));
      std::cerr << "cb-inspect: wrote " << html << "\n";
    }
    std::cout << out.str();
    if (!r.blockers.empty()) {
      std::cerr << "cb-inspect: " << model << ": training is blocked by " << r.blockers.size()
                << " unsupported node" << (r.blockers.size() == 1 ? "" : "s") << ":\n";
      for (const auto& b : r.blockers)
        std::cerr << "  node '" << b.node << "' (" << b.op_type << "): " << b.reason << "\n";
      return 3;
    }
    return 0;
  } catch (const cb::Error& e) {
    std::cerr << "cb-inspect: error: " << e.what() << "\n";
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << "cb-inspect: error: out of memory (lower --batch-size)\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "cb-inspect: internal error: " << e.what() << "\n";
    return 1;
  }
}
