// Saying in words why bytes are not an ONNX model.
#pragma once

#include <string>

namespace cb {

// Why `bytes` do not parse as a ModelProto, in words: a text file, a truncated file, another kind
// of file, or a model whose field `x` is corrupt. Walks the top-level protobuf wire format.
std::string why_unparsable(const std::string& bytes);

}  // namespace cb
