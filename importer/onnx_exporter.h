// IR + trained weights -> ONNX: the original model file with its initializers (parameters and
// BatchNorm running statistics) replaced by the trained values.
//
// Two forms:
//  - Inference (the default, what --output writes): the model as one deploys it. Every
//    BatchNormalization runs on its running statistics (training_mode removed at opset >= 14; its
//    running/saved statistics outputs removed at every opset), every Dropout is an Identity, graph
//    outputs that only training produces (those statistics, Dropout masks) are removed, and the
//    nodes, initializers and value_info that fed only what was removed go with them.
//  - Training (--output-training): the graph exactly as exported for training.
// Everything else (opsets, metadata, names, the other nodes) is kept as in the original, so the
// result loads wherever the original did.
#pragma once

#include <map>
#include <string>

#include "runtime/tensor.h"

namespace onnx {
class ModelProto;
}

namespace cb {

enum class ExportForm { Inference, Training };

// Changes a pass made to the model before training that the file must take too (cb-train
// --num-classes: a new classifier head, runtime/replace_head.h).
struct ExportEdits {
  // New contents of values, by name, dims included: written over the file's initializer or
  // Constant node of that name; a value a node computes (folded shape arithmetic) becomes a
  // Constant node. A trained tensor of the same name is written instead, and may have these dims
  // rather than the file's. The value_info of every value downstream of these is dropped (its
  // shape may have changed; ONNX infers it again).
  std::map<std::string, Tensor> values;
  // Graph outputs whose last dimension changed (the class count): name -> its new size.
  std::map<std::string, int64_t> output_last_dim;
};

// Loads `original_model_path`, replaces each initializer named in `trained` by its tensor (as
// raw_data, keeping the initializer's dtype and dims, which must match), inlines any external data
// of the others (so the result stands alone), rewrites the graph into `form`, and writes
// `out_path` through `out_path.tmp` and a rename: a failure never leaves a half-written model.
// Throws cb::Error naming the file or the tensor at fault (a name that is no initializer, a dtype
// or shape that differs), or the node whose training-only output another node reads. `edits`
// applies the changes of a pass (see ExportEdits).
void export_trained(const std::string& original_model_path, const std::string& out_path,
                    const std::map<std::string, Tensor>& trained,
                    ExportForm form = ExportForm::Inference, const ExportEdits& edits = {});

// The inference-form rewrite alone, in place (`what` names the model in messages).
void to_inference_form(onnx::ModelProto& m, const std::string& what);

}  // namespace cb
