// cb-export CHECKPOINT --out MODEL.onnx [--model FILE] [--training]
// Writes the model a checkpoint holds (cb-train --checkpoint-dir) as ONNX: the same file
// cb-train --output writes at that step (inference form by default, --training for the training
// form; importer/onnx_exporter.h). CHECKPOINT is one ckpt-NNNNNNNNNN folder or a checkpoint
// folder (its newest valid checkpoint). The model the run trained is found where the checkpoint
// says (--model gives it when it moved); it must be that same file (its hash is checked).
// Exit codes: 0 written; 1 bad input (the checkpoint, the model, the output); 2 usage.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <filesystem>
#include <new>
#include <sstream>

#include "importer/onnx_exporter.h"
#include "importer/onnx_importer.h"
#include "runtime/error.h"
#include "runtime/passes.h"
#include "runtime/replace_head.h"
#include "sma/checkpoint.h"
#include "sma/model.h"
#include "sma/trainer.h"

using namespace cb;
namespace fs = std::filesystem;

int main(int argc, char** argv) {
  CLI::App app{"cb-export: write the model a cb-train checkpoint holds as ONNX"};
  std::string checkpoint, out, model;
  bool training = false;
  app.add_option(
         "checkpoint", checkpoint,
         "a checkpoint (ckpt-NNNNNNNNNN folder) or a --checkpoint-dir (its newest valid one)")
      ->required();
  app.add_option("--out,-o", out, "the ONNX file to write (FILE.tmp until complete)")->required();
  app.add_option("--model", model,
                 "the model the run trained (default: where the checkpoint says it was)");
  app.add_flag("--training", training,
               "write the training form (the graph as exported) instead of the inference form");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    LoadedCheckpoint ck = load_checkpoint(checkpoint);
    for (const std::string& why : ck.refused)
      fmt::print(stderr, "cb-export: warning: checkpoint refused: {}\n", why);
    if (model.empty()) {
      if (ck.meta.model_path.empty())
        fail(
            "{}: the checkpoint does not record its model's path (an older format): give it "
            "with --model FILE",
            ck.path);
      model = ck.meta.model_path;
      std::error_code ec;
      if (!fs::is_regular_file(model, ec))
        fail("{}: the checkpoint's model {} is not there any more: give it with --model FILE",
             ck.path, model);
    }
    const std::string hash = file_hash(model);
    if (hash != ck.meta.model_hash)
      fail(
          "{} is not the model the checkpoint was trained from (hash {}, the checkpoint's {}): "
          "give that model with --model FILE",
          model, hash, ck.meta.model_hash);
    ImportResult r = import_model(model);
    ExportEdits edits;
    if (!ck.meta.head.empty()) {  // the run's new head, drawn again from its seed
      std::istringstream in(ck.meta.head);
      int64_t classes = 0;
      uint64_t seed = 0;
      std::string output;
      if (!(in >> classes >> seed))
        fail("{}: head '{}': expected CLASSES SEED OUTPUT", ck.path, ck.meta.head);
      in >> output;
      const HeadReplacement h = replace_head(r.graph, output, classes, seed);
      edits.values = h.values;
      edits.output_last_dim[h.output] = h.classes;
    }
    if (!ck.meta.freeze.empty()) freeze_parameters(r.graph, ck.meta.freeze);
    const LossSpec loss =
        ck.meta.loss.empty() ? detect_loss(r.graph) : parse_loss_record(ck.meta.loss, ck.path);
    const TrainModel m(r.graph, loss);
    export_trained(model, out, model_tensors(m, ck.state.model),
                   training ? ExportForm::Training : ExportForm::Inference, edits);
    fmt::print("wrote    {} ({} form) from {} (step {}, model {})\n", out,
               training ? "training" : "inference", ck.path, ck.state.loop.step, model);
    return 0;
  } catch (const Error& e) {
    fmt::print(stderr, "cb-export: error: {}\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr,
               "cb-export: error: out of memory (the checkpoint holds every learner: it needs that "
               "much memory to read)\n");
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "cb-export: internal error: {}\n", e.what());
    return 1;
  }
}
