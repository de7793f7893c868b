// Writing tensors as ONNX TensorProto files (the format of the ONNX test suite and of cb-run's
// outputs). Reading is read_tensor_file() in onnx_importer.h.
#pragma once

#include <string>

#include "runtime/tensor.h"

namespace cb {

// Writes `t` named `name` to `path` through a temporary file and a rename, so a failure never
// leaves a half-written file. Throws cb::Error naming the path.
void write_tensor_file(const std::string& path, const Tensor& t, const std::string& name);

// The file name cb-run writes a graph output named `name` to: every byte outside
// [A-Za-z0-9._-] is written as %XX (so "a/b" and "a%2Fb" cannot collide: the escape is
// injective), then ".pb" is appended (so "." and ".." name files too). A name whose escape is
// longer than 200 bytes keeps its first 180 and ends in "~" + 16 hex digits of its FNV-1a hash
// ("~" is never in an escaped name, so a shortened name cannot equal an escaped one).
std::string output_file_name(const std::string& name);

}  // namespace cb
