// ONNX TensorProto -> cb::Tensor, with every check a bad file needs: dtype, dims, the byte count
// of raw or typed data against the shape, and external data confined to the model's folder.
#pragma once

#include <onnx/onnx_pb.h>

#include <string>

#include "runtime/tensor.h"

namespace cb {

// `what` names the tensor in messages ("initializer 'fc.weight' in model.onnx"); `dir` is the
// folder external data must lie in ("" forbids external data).
TensorPtr tensor_from_proto(const onnx::TensorProto& t, const std::string& what,
                            const std::string& dir);

}  // namespace cb
