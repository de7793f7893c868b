// What a model takes from the data, which columns of the data feed it, and the batches made from
// them: the match made once, before anything is built, and checked there, so that a data set
// that does not fit a model is named (the array, the axis, both sizes) before the first step; then
// one way of making batches for every kind of data (runtime/data/source.h).
//
// A model takes its data inputs (every graph input; per example dims and dtype) and, when the
// loss is not the model's own, a target (FeedSpec). The data's columns give (FeedPlan):
//  - data with an image column (IDX, CIFAR, folders, packs): the image column, transformed
//    (runtime/data/transforms.h plan_transforms), to the model's one data input, and the label
//    column (i64) to the target, or, for a model that computes its own loss, to its i64 [N]
//    labels input;
//  - arrays (NumPy files, the API's arrays and caller batches; runtime/data/tensor_set.h): each
//    input the column of its name (a model with one input may call it `x`), the target the column
//    `y` (FeedOptions::target for another). A column is converted to the input's dtype where that
//    loses nothing (integers to any number type, floats to floats; runtime/dtype.h
//    dtype_converts) and fed with the input's dims when it has the same number of elements per
//    example ([N,784] takes [N,1,28,28]).
// Class targets (i64) must lie in [0, classes) or be the ignore index; float targets must be
// finite: both checked over the whole split before training (check_targets). Likewise the values
// of an input that indexes a table (token ids: ModelInput::index_rows; check_indices).
//
// Batches (make_batches): every fed column of each example is read from the source and written
// into the batch's tensor of its input (converted to the model's dtype), an image column through
// its transform (augmented for training, from the example's own seeded generator). An example
// that cannot be read is recorded in the data set's SkipLog and replaced by the next loadable one
// in the source (the same replacement on every run).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/data/batch.h"
#include "runtime/data/dataset.h"
#include "runtime/data/transforms.h"

namespace cb {

struct FeedSpec {
  std::vector<ModelInput> inputs;       // the model's data inputs, in the order batches hold them
  std::optional<ModelInput> target;     // the loss's target (name "target"); none: the model's own
  int64_t classes = 0;                  // a target of class indices: their number (else 0)
  std::optional<int64_t> ignore_index;  // a class target's value that counts for nothing
  // A model with its own loss fed from image data: the input that takes the labels (else -1).
  int labels_input = -1;
};

// Where one batch tensor comes from: a column of the source.
struct ColumnFeed {
  std::string column;        // the source's column
  bool image = false;        // an image column, through FeedPlan::images
  DType dtype = DType::F32;  // what the batch holds (the model's dtype)
  // Per example, as the model takes it (an image column's batch tensor holds the transform's
  // C x H x W, which has as many values).
  std::vector<int64_t> dims;
};

struct FeedOptions {
  std::string target = "y";  // arrays: the column that feeds the target (--target)
  TransformOptions transforms;
};

struct FeedPlan {
  bool tensors = false;            // no image column fed: arrays only
  TransformSpec images;            // an image column's transforms
  std::vector<ColumnFeed> inputs;  // one per FeedSpec::inputs
  std::optional<ColumnFeed> target;
  // Bytes of one example as batches hold it (arrays; 0 with an image column).
  int64_t example_bytes() const;
  std::string text;  // for cb-train's `inputs` line: "'x' f32 [N,8] <- x, target f32 [N,1] <- y"
};

// Matches `data` to `spec`. Throws cb::Error naming the input or array, the axis and both sizes
// when they do not fit, and the arrays a data set has when one is missing.
FeedPlan plan_feed(const Dataset& data, const FeedSpec& spec, const FeedOptions& o);

// Whether batches of `batch` examples are better made on the training thread than on pipeline
// workers: arrays whose batch is under 64 KiB (copying it costs less than a hand-over between
// threads).
bool batches_inline(const FeedPlan& plan, int64_t batch);

// Checks the targets of a split against the spec (class range, finite values), naming the first
// bad example. `what`: "training" or "test".
void check_targets(const Dataset& data, bool train, const FeedSpec& spec, const FeedPlan& plan,
                   const std::string& what);

// Checks the inputs of a split that index a table (ModelInput::index_rows: token ids into an
// embedding) against its rows, naming the first bad example, the value, the node and what to do.
void check_indices(const Dataset& data, bool train, const FeedSpec& spec, const FeedPlan& plan);

// The batches of examples of `source` as `plan` says, with the training transform of an image
// column when `augment` (drawn from seed, epoch and the example). Examples that cannot be read
// are recorded in `skipped` and replaced (see the top).
MakeBatch make_batches(std::shared_ptr<const Source> source, const FeedPlan& plan, bool augment,
                       uint64_t seed, std::shared_ptr<SkipLog> skipped);
// The batches of one split (train: the training set, augmented as the plan says; else the test
// set), for a BatchPipeline over data.train_size() / test_size() examples.
MakeBatch make_batches(const Dataset& data, bool train, const FeedPlan& plan, uint64_t seed);

// Image examples with their transforms, the plan of a model that takes the images alone:
// out.inputs = {images [n, C, H, W] of spec.dtype}, out.target = labels (i64 [n]).
MakeBatch image_batches(std::shared_ptr<const Source> examples, const TransformSpec& spec,
                        bool augment, uint64_t seed, std::shared_ptr<SkipLog> skipped);

}  // namespace cb
