// Evaluation metrics from host tensors (see metrics.h): one pass over each batch's output and
// target, sums in double and int64, the result divided out at the end.
#include "sma/metrics.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "runtime/error.h"

namespace cb {

namespace {

std::string dims_text(const std::vector<int64_t>& d) { return to_string(shape_of(d)); }

// The output's elements as doubles (f32 read directly: the common case).
std::vector<double> reals(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  if (t.dtype == DType::F32) {
    const float* p = t.data<float>();
    for (size_t i = 0; i < v.size(); ++i) v[i] = p[i];
  } else {
    for (size_t i = 0; i < v.size(); ++i) v[i] = t.real_at(static_cast<int64_t>(i));
  }
  return v;
}

// Chan et al.'s parallel update of (count, mean, sum of squared deviations): the two means'
// difference carries the spread between the parts, so SST has no cancellation.
void merge_moments(int64_t& n, double& mean, double& m2, int64_t on, double omean, double om2) {
  if (on == 0) return;
  const double a = static_cast<double>(n), b = static_cast<double>(on);
  const double delta = omean - mean;
  mean += delta * b / (a + b);
  m2 += om2 + delta * delta * a * b / (a + b);
  n += on;
}

}  // namespace

void MetricSums::merge(const MetricSums& o) {
  count += o.count;
  counted += o.counted;
  loss_sum += o.loss_sum;
  loss_counted += o.loss_counted;
  scored += o.scored;
  correct += o.correct;
  correct5 += o.correct5;
  classes = std::max(classes, o.classes);
  abs_err += o.abs_err;
  sq_err += o.sq_err;
  merge_moments(t_n, t_mean, t_m2, o.t_n, o.t_mean, o.t_m2);
}

Metrics::Metrics(const LossSpec& spec) : spec_(spec) {}

// Top-1 (and top-5) over axis `axis` of output, labels `target` = the output's dims without it.
void Metrics::add_classes(const Tensor& output, const Tensor& target, int64_t axis,
                          int64_t* counted) {
  const auto rank = static_cast<int64_t>(output.dims.size());
  if (axis < 1 || axis >= rank)
    fail("metrics: class axis {} is out of range for an output {}", axis, dims_text(output.dims));
  std::vector<int64_t> want = output.dims;
  want.erase(want.begin() + axis);
  if (target.dims != want || !dtype_is_int(target.dtype))
    fail("metrics: labels {}{} do not fit the output {} with classes on axis {} (want i64{})",
         dtype_name(target.dtype), dims_text(target.dims), dims_text(output.dims), axis,
         dims_text(want));
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < axis; ++k) outer *= output.dims[static_cast<size_t>(k)];
  for (int64_t k = axis + 1; k < rank; ++k) inner *= output.dims[static_cast<size_t>(k)];
  const int64_t c = output.dims[static_cast<size_t>(axis)];
  sums_.classes = std::max(sums_.classes, c);
  const std::vector<double> z = reals(output);
  const bool has_ignore = spec_.kind == LossKind::SoftmaxCrossEntropy && spec_.ignore_index;
  const int64_t ignore = has_ignore ? *spec_.ignore_index : 0;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t label = target.int_at(o * inner + i);
      if (has_ignore && label == ignore) continue;
      if (label < 0 || label >= c)
        fail("metrics: label {} is out of range for {} classes (output {})", label, c,
             dims_text(output.dims));
      ++*counted;
      const double* zi = z.data() + o * c * inner + i;  // class k at zi[k * inner]
      const double zl = zi[label * inner];
      // The label's rank, ties broken toward the lower class (as argmax takes the first max).
      int64_t above = 0;
      for (int64_t k = 0; k < c; ++k) {
        const double zk = zi[k * inner];
        above += zk > zl || (zk == zl && k < label);
      }
      sums_.correct += above == 0;
      sums_.correct5 += above < 5;
    }
}

void Metrics::add(const Tensor& output, const Tensor& target, double batch_loss) {
  int64_t counted = 0;  // the elements this batch's loss averages over
  int64_t examples = 0;
  switch (spec_.kind) {
    case LossKind::SoftmaxCrossEntropy: {
      if (output.dims.size() < 2)
        fail("metrics: cross-entropy scores {} have no class axis", dims_text(output.dims));
      const auto rank = static_cast<int64_t>(output.dims.size());
      const int64_t axis = spec_.class_axis >= 0 ? spec_.class_axis : rank == 3 ? 2 : 1;
      add_classes(output, target, axis, &counted);
      sums_.scored += counted;
      examples = output.dims[0];
      break;
    }
    case LossKind::ModelOutput: {
      // Loss per example; accuracy where a classifier output and its labels come along.
      examples = target.dims.empty() ? 0 : target.dims[0];
      if (output.numel() > 0 && output.dims.size() == 2 && dtype_is_float(output.dtype)) {
        examples = output.dims[0];
        int64_t scored = 0;
        add_classes(output, target, 1, &scored);
        sums_.scored += scored;
      }
      counted = examples;
      break;
    }
    case LossKind::BinaryCrossEntropy:
    case LossKind::MeanSquaredError:
    case LossKind::L1:
    case LossKind::Huber: {
      if (output.numel() != target.numel() || !dtype_is_float(target.dtype))
        fail(
            "metrics: targets {}{} do not match the output {} ({} wants float targets of its "
            "shape)",
            dtype_name(target.dtype), dims_text(target.dims), dims_text(output.dims),
            loss_kind_name(spec_.kind));
      examples = output.dims.empty() ? 1 : output.dims[0];
      const std::vector<double> y = reals(output), t = reals(target);
      counted = static_cast<int64_t>(y.size());
      if (spec_.kind == LossKind::BinaryCrossEntropy) {
        for (size_t i = 0; i < y.size(); ++i) sums_.correct += (y[i] > 0) == (t[i] >= 0.5);
        sums_.scored += counted;
        break;
      }
      double mean = 0, m2 = 0;  // this batch's targets
      for (size_t i = 0; i < y.size(); ++i) {
        const double d = y[i] - t[i];
        sums_.abs_err += std::abs(d);
        sums_.sq_err += d * d;
        mean += t[i];
      }
      if (counted == 0) break;
      mean /= static_cast<double>(counted);
      for (double v : t) m2 += (v - mean) * (v - mean);
      merge_moments(sums_.t_n, sums_.t_mean, sums_.t_m2, counted, mean, m2);
      break;
    }
  }
  sums_.count += examples;
  sums_.counted += counted;
  if (counted > 0) {  // a batch with every label ignored has a NaN mean and no weight
    sums_.loss_sum += batch_loss * static_cast<double>(counted);
    sums_.loss_counted += counted;
  }
}

EvalMetrics Metrics::result() const {
  EvalMetrics r;
  const MetricSums& s = sums_;
  r.count = s.count;
  r.counted = s.counted;
  auto ratio = [](double a, int64_t b) -> std::optional<double> {
    if (b <= 0) return std::nullopt;
    return a / static_cast<double>(b);
  };
  r.loss = ratio(s.loss_sum, s.loss_counted);
  switch (spec_.kind) {
    case LossKind::SoftmaxCrossEntropy:
    case LossKind::ModelOutput:
      r.accuracy = ratio(static_cast<double>(s.correct), s.scored);
      if (s.classes >= 100) r.top5 = ratio(static_cast<double>(s.correct5), s.scored);
      break;
    case LossKind::BinaryCrossEntropy:
      r.accuracy = ratio(static_cast<double>(s.correct), s.scored);
      break;
    case LossKind::MeanSquaredError:
    case LossKind::L1:
    case LossKind::Huber:
      r.mae = ratio(s.abs_err, s.counted);
      if (s.t_n > 0 && s.t_m2 > 0) r.r2 = 1 - s.sq_err / s.t_m2;
      break;
  }
  return r;
}

}  // namespace cb
