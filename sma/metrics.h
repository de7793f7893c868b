// Evaluation metrics that fit the loss, computed on the host from each evaluation batch's scored
// model output and target (and the evaluation graph's loss for the batch, autodiff's
// build_eval_graph), summed over batches:
//   cross-entropy   accuracy: top-1 over the class axis ("token accuracy" for [N,T,C], pixel
//                   accuracy for [N,C,H,W]); top5 with >= 100 classes; labels equal to
//                   ignore_index are not counted
//   bce             accuracy: (logit > 0) == (target >= 0.5), per element
//   mse, l1, huber  mae, and r2 = 1 - SSE / SST over all target elements (SST around their
//                   overall mean)
//   model output    the loss (per example); accuracy when a classifier output and labels are given
// The loss is the mean over all counted elements: each batch's mean is weighted by its counted
// elements (labels not ignored, or target elements; examples for a model's own loss).
// Unset metrics are std::nullopt, never NaN: a metric that does not fit the loss, or one with
// nothing to average (no counted element, all targets equal for r2).
#pragma once

#include <cstdint>
#include <optional>

#include "autodiff/autodiff.h"
#include "runtime/tensor.h"

namespace cb {

struct EvalMetrics {
  int64_t count = 0;           // examples: the outputs' first dims, summed
  int64_t counted = 0;         // elements the loss averages over (tokens, pixels, target elements)
  std::optional<double> loss;  // mean over the counted elements
  std::optional<double> accuracy;  // cross-entropy top-1 (ignored labels left out); bce per element
  std::optional<double> top5;      // cross-entropy with >= 100 classes
  std::optional<double> mae;       // regression: mean |y - t|
  std::optional<double> r2;        // regression: 1 - SSE / SST
};

// Sums over evaluation batches (mergeable: learners or processes may each score a part).
struct MetricSums {
  int64_t count = 0, counted = 0;
  double loss_sum = 0;       // sum of batch loss * batch counted, over batches with counted > 0
  int64_t loss_counted = 0;  // the counted elements loss_sum weighs
  int64_t scored = 0;        // elements accuracy is over
  int64_t correct = 0, correct5 = 0;
  int64_t classes = 0;  // cross-entropy: the class dim seen (top5 needs >= 100)
  double abs_err = 0, sq_err = 0;
  // Targets (regression): their count, mean and sum of squared deviations from the mean,
  // combined over batches with Chan et al.'s parallel update (no cancellation in SST).
  int64_t t_n = 0;
  double t_mean = 0, t_m2 = 0;

  void merge(const MetricSums& o);
};

class Metrics {
 public:
  // What to score: the loss's kind, its class axis (-1: by the output's rank, as the loss
  // resolves it) and ignore_index.
  explicit Metrics(const LossSpec& spec);
  explicit Metrics(const TrainingGraph& tg) : Metrics(tg.spec) {}

  // One evaluation batch. output: the scored model output ([N,C], [N,T,C], [N,C,H,W] for
  // cross-entropy; any shape for regression and bce; for a model's own loss an [N,C] classifier
  // output or an empty tensor); target: i64 labels (cross-entropy: the output's shape without
  // the class axis; model loss: [N]) or float targets of the output's shape; batch_loss: the eval
  // graph's loss for this batch (the mean over its counted elements). Throws cb::Error when the
  // shapes do not fit or a label (not ignore_index) is outside [0, C).
  void add(const Tensor& output, const Tensor& target, double batch_loss);
  EvalMetrics result() const;

  const MetricSums& sums() const { return sums_; }
  void merge(const Metrics& other) { sums_.merge(other.sums_); }
  void merge(const MetricSums& other) { sums_.merge(other); }
  void reset() { sums_ = {}; }

 private:
  void add_classes(const Tensor& output, const Tensor& target, int64_t axis, int64_t* counted);

  LossSpec spec_;
  MetricSums sums_;
};

}  // namespace cb
