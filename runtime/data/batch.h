// A batch as the learners take it, and the function that makes one: what the feed
// (runtime/data/feed.h) gives the batch pipeline (runtime/data/pipeline.h) and the trainer.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/tensor.h"

namespace cb {

// One learner's batch: a tensor per model data input ([n, ...], in the order of the model's
// FeedSpec, runtime/data/feed.h) and the loss's target (empty when the model computes its own).
struct Batch {
  std::vector<Tensor> inputs;
  Tensor target;
  int64_t size() const {
    return inputs.empty() ? 0 : inputs[0].dims.empty() ? 0 : inputs[0].dims[0];
  }
};

// Makes the batch of examples `idx` (drawn in `epoch`, which seeds the augmentation) into `out`.
// Called from several worker threads at once; throws cb::Error for data that cannot be made.
using MakeBatch = std::function<void(const std::vector<int64_t>& idx, int64_t epoch, Batch& out)>;

}  // namespace cb
