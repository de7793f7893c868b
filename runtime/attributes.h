// Node attributes as imported (generic), and the reader each op's parse() uses to turn them into
// its typed parameter struct. The reader tracks which attributes were read, so an attribute the
// op does not know is reported instead of silently ignored.
#pragma once

#include <map>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "runtime/tensor.h"

namespace cb {

// An attribute kind the IR does not carry (subgraphs of If/Loop/Scan, sparse tensors, type
// protos): kept by name so ops that would need it fail clearly.
struct OpaqueAttr {
  std::string kind;
};

using AttrValue = std::variant<int64_t, float, std::string, std::vector<int64_t>,
                               std::vector<float>, std::vector<std::string>, TensorPtr, OpaqueAttr>;
using AttrMap = std::map<std::string, AttrValue>;

std::string attr_type_name(const AttrValue& v);

}  // namespace cb
