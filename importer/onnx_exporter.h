// IR + trained weights -> ONNX: the original model file with its initializers (parameters and
// BatchNorm running statistics) replaced by the trained values. Everything else (graph, opsets,
// metadata) is kept byte for byte, so the result loads wherever the original did.
#pragma once

#include <map>
#include <string>

#include "runtime/tensor.h"

namespace cb {

// Loads `original_model_path`, replaces each initializer named in `trained` by its tensor (as
// raw_data, keeping the initializer's dtype and dims, which must match), inlines any external data
// of the others (so the result stands alone), and writes `out_path` through `out_path.tmp` and a
// rename: a failure never leaves a half-written model. Throws cb::Error naming the file or the
// tensor at fault (a name that is no initializer, a dtype or shape that differs).
void export_trained(const std::string& original_model_path, const std::string& out_path,
                    const std::map<std::string, Tensor>& trained);

}  // namespace cb
