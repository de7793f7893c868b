// What a model takes from the data, and which part of the data feeds it: the match made once,
// before anything is built, and checked there, so that a data set that does not fit a model is
// named (the array, the axis, both sizes) before the first step.
//
// A model takes its data inputs (every graph input; per example dims and dtype) and, when the
// loss is not the model's own, a target (FeedSpec). The data gives (FeedPlan):
//  - image data sets (IDX, CIFAR, folders, packs): the transformed images to the model's one data
//    input (runtime/data/pipeline.h plan_transforms), and the class labels (i64) to the target,
//    or, for a model that computes its own loss, to its i64 [N] labels input;
//  - tensor data sets (NumPy files, runtime/data/tensor_set.h): each input the array of its name
//    (a model with one input may call it `x`), the target the array `y` (FeedOptions::target for
//    another). An array is converted to the input's dtype where that loses nothing (integers to
//    any number type, floats to floats; runtime/dtype.h dtype_converts) and fed with the input's
//    dims when it has the same number of elements per example ([N,784] takes [N,1,28,28]).
// Class targets (i64) must lie in [0, classes) or be the ignore index; float targets must be
// finite: both checked over the whole split before training (check_targets).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "runtime/data/dataset.h"
#include "runtime/data/pipeline.h"

namespace cb {

struct FeedSpec {
  std::vector<ModelInput> inputs;       // the model's data inputs, in the order batches hold them
  std::optional<ModelInput> target;     // the loss's target (name "target"); none: the model's own
  int64_t classes = 0;                  // a target of class indices: their number (else 0)
  std::optional<int64_t> ignore_index;  // a class target's value that counts for nothing
  // A model with its own loss fed from image data: the input that takes the labels (else -1).
  int labels_input = -1;
};

// Where one batch tensor comes from.
struct ColumnFeed {
  enum class From { Images, Labels, Array } from = From::Array;
  std::string array;          // Array: the tensor set's array
  DType dtype = DType::F32;   // what the batch holds (the model's dtype)
  std::vector<int64_t> dims;  // per example, as the model takes it
};

struct FeedOptions {
  std::string target = "y";  // tensor data: the array that feeds the target (--target)
  TransformOptions transforms;
};

struct FeedPlan {
  bool tensors = false;
  TransformSpec images;            // image data: the transforms
  std::vector<ColumnFeed> inputs;  // one per FeedSpec::inputs
  std::optional<ColumnFeed> target;
  // Bytes of one example as batches hold it (tensor data; 0 for images).
  int64_t example_bytes() const;
  std::string text;  // for cb-train's `inputs` line: "'x' f32 [N,8] <- x, target f32 [N,1] <- y"
};

// Matches `data` to `spec`. Throws cb::Error naming the input or array, the axis and both sizes
// when they do not fit, and the arrays a data set has when one is missing.
FeedPlan plan_feed(const Dataset& data, const FeedSpec& spec, const FeedOptions& o);

// Whether batches of `batch` examples are better made on the training thread than on pipeline
// workers: tensor data whose batch is under 64 KiB (copying it costs less than a hand-over
// between threads).
bool batches_inline(const FeedPlan& plan, int64_t batch);

// Checks the targets of a split against the spec (class range, finite values), naming the first
// bad example. `what`: "training" or "test".
void check_targets(const Dataset& data, bool train, const FeedSpec& spec, const FeedPlan& plan,
                   const std::string& what);

// The batches of one split (train: the training set, augmented as the plan says; else the test
// set), for a BatchPipeline over data.train_size() / test_size() examples.
MakeBatch make_batches(const Dataset& data, bool train, const FeedPlan& plan, uint64_t seed);

// Fills `out` (one tensor per plan input, then the target) with the examples idx of a tensor set.
void fill_tensor_batch(const TensorSet& set, const FeedPlan& plan, const std::vector<int64_t>& idx,
                       Batch& out);

}  // namespace cb
