// The messages of the errors kernels raise about the values of their inputs (an index or a class
// label out of range), written once for every backend: the CPU kernels raise them where they meet
// the value; the CUDA backend's kernels record the value in a device-side error flag and the
// device raises the same message at its next synchronisation (kernels/cuda/device_error.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/error.h"

namespace cb {

// Gather / GatherGrad: `index` (as given, before negative indices wrap) is outside [-size, size)
// along `axis`.
inline std::string index_out_of_range(std::string_view op, int64_t index, int64_t axis,
                                      int64_t size) {
  return fmt::format("{}: index {} is out of range for axis {} of size {}", op, index, axis, size);
}

// SoftmaxCrossEntropyLoss(+Grad): label `label` of label element `element` (flattened
// [N,d1..dk]) is outside [0, classes) and not the ignored label.
inline std::string label_out_of_range(int64_t label, int64_t element, int64_t classes) {
  return fmt::format(
      "SoftmaxCrossEntropyLoss: label {} (label element {}) is out of range for {} classes: "
      "labels must be in [0, {}); check the dataset's labels against the model's number of "
      "outputs",
      label, element, classes, classes);
}

}  // namespace cb
