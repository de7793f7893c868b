// Writing tensors as ONNX TensorProto files (the format of the ONNX test suite and of cb-run's
// outputs). Reading is read_tensor_file() in onnx_importer.h.
#pragma once

#include <string>

#include "runtime/tensor.h"

namespace cb {

// Writes `t` named `name` to `path` through a temporary file and a rename, so a failure never
// leaves a half-written file. Throws cb::Error naming the path.
void write_tensor_file(const std::string& path, const Tensor& t, const std::string& name);

}  // namespace cb
