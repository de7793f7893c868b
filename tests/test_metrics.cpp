// sma/metrics.h against values worked out by hand (NumPy-checkable): top-1 accuracy over the
// class axis of [N,C], [N,T,C] and [N,C,H,W] outputs with ignored labels and ties, top-5 from 100
// classes, bce's per-element accuracy, regression mae and r2 (SST around the overall mean, also
// far from 0), the loss as a mean over all counted elements across batches, and the errors.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "sma/metrics.h"
#include "sma/model.h"
#include "tests/gradcheck.h"
#include "tests/test_util.h"

using namespace cb;

namespace {
Tensor f32(std::vector<int64_t> dims, std::vector<float> v) {
  return testing::tensor_of(DType::F32, std::move(dims), v);
}
Tensor i64(std::vector<int64_t> dims, std::vector<int64_t> v) {
  return testing::i64_tensor(std::move(dims), std::move(v));
}
LossSpec kind(LossKind k, int64_t class_axis = -1) {
  LossSpec s;
  s.kind = k;
  s.class_axis = class_axis;
  return s;
}
}  // namespace

TEST_CASE("metrics: cross-entropy [N,C] over two batches, ignored labels and a tie") {
  Metrics m(kind(LossKind::SoftmaxCrossEntropy));
  // Row 1 ties classes 0 and 1: argmax takes the first, so label 1 is wrong; row 2 is ignored.
  m.add(f32({3, 4}, {0.1f, 2, -1, 0.5f, 1, 1, 0, 0, 0, 0, 3, 0}), i64({3}, {1, 1, -100}), 0.7);
  m.add(f32({2, 4}, {5, 0, 0, 0, 0, 1, 2, 3}), i64({2}, {0, 2}), 1.0);
  const EvalMetrics r = m.result();
  CHECK(r.count == 5);
  CHECK(r.counted == 4);
  CHECK(*r.loss == doctest::Approx((0.7 * 2 + 1.0 * 2) / 4));
  CHECK(*r.accuracy == doctest::Approx(0.5));
  CHECK(!r.top5);  // fewer than 100 classes
  CHECK(!r.mae);
  CHECK(!r.r2);
}

TEST_CASE("metrics: token accuracy over [N,T,C], pixel accuracy over [N,C,H,W]") {
  Metrics seq(kind(LossKind::SoftmaxCrossEntropy));  // rank 3: classes on axis 2
  seq.add(f32({1, 3, 2}, {0.2f, 0.8f, 0.9f, 0.1f, 0.3f, 0.4f}), i64({1, 3}, {1, 1, -100}), 2.0);
  EvalMetrics r = seq.result();
  CHECK(r.count == 1);
  CHECK(r.counted == 2);
  CHECK(*r.accuracy == doctest::Approx(0.5));
  CHECK(*r.loss == doctest::Approx(2.0));

  // [1,2,1,2]: class 0 scores (1, 0), class 1 scores (0, 2) at the two pixels; labels (0, 0).
  Metrics seg(kind(LossKind::SoftmaxCrossEntropy));
  seg.add(f32({1, 2, 1, 2}, {1, 0, 0, 2}), i64({1, 1, 2}, {0, 0}), 0.3);
  r = seg.result();
  CHECK(r.counted == 2);
  CHECK(*r.accuracy == doctest::Approx(0.5));

  // [N,C,T] = [1,2,3] with --class-axis 1: class 0 scores (0.2, 0.9, 0.3), class 1 (0.8, 0.1,
  // 0.4) over T; argmax (1, 0, 1).
  Metrics ct(kind(LossKind::SoftmaxCrossEntropy, 1));
  ct.add(f32({1, 2, 3}, {0.2f, 0.9f, 0.3f, 0.8f, 0.1f, 0.4f}), i64({1, 3}, {1, 0, 1}), 1.0);
  CHECK(*ct.result().accuracy == doctest::Approx(1.0));
}

TEST_CASE("metrics: top-5 with 100 classes") {
  std::vector<float> z(200);
  for (int k = 0; k < 100; ++k) z[static_cast<size_t>(k)] = z[static_cast<size_t>(100 + k)] = k;
  Metrics m(kind(LossKind::SoftmaxCrossEntropy));
  m.add(f32({2, 100}, z), i64({2}, {97, 99}), 1.0);  // 97 is third: top-5 not top-1
  const EvalMetrics r = m.result();
  CHECK(*r.accuracy == doctest::Approx(0.5));
  CHECK(*r.top5 == doctest::Approx(1.0));
}

TEST_CASE("metrics: bce accuracy per element") {
  Metrics m(kind(LossKind::BinaryCrossEntropy));
  // (0.3 > 0) == (1 >= 0.5) yes; (-0.2) vs 0 yes; 0 vs 0.5 no (0 is not > 0); 2 vs 0.2 no
  m.add(f32({2, 2}, {0.3f, -0.2f, 0, 2}), f32({2, 2}, {1, 0, 0.5f, 0.2f}), 0.9);
  const EvalMetrics r = m.result();
  CHECK(r.count == 2);
  CHECK(r.counted == 4);
  CHECK(*r.accuracy == doctest::Approx(0.5));
  CHECK(*r.loss == doctest::Approx(0.9));
  CHECK(!r.mae);
}

TEST_CASE("metrics: regression mae and r2 over batches, SST around the overall mean") {
  // Targets 1.5 2 2 1 5 (mean 2.3, SST 9.8); errors -0.5 0 1 -1 -1 (SSE 3.25, sum |e| 3.5).
  for (double offset : {0.0, 1e6}) {
    CAPTURE(offset);
    auto o = [&](double v) { return static_cast<float>(v + offset); };
    Metrics m(kind(LossKind::MeanSquaredError));
    m.add(f32({3}, {o(1), o(2), o(3)}), f32({3}, {o(1.5), o(2), o(2)}), 1.25 / 3);
    m.add(f32({2, 1}, {o(0), o(4)}), f32({2, 1}, {o(1), o(5)}), 1.0);
    const EvalMetrics r = m.result();
    CHECK(r.count == 5);
    CHECK(r.counted == 5);
    CHECK(*r.loss == doctest::Approx(3.25 / 5));
    CHECK(*r.mae == doctest::Approx(0.7));
    CHECK(*r.r2 == doctest::Approx(1 - 3.25 / 9.8).epsilon(1e-6));
    CHECK(!r.accuracy);
  }
  Metrics flat(kind(LossKind::L1));  // every target equal: no SST, no r2
  flat.add(f32({2}, {1, 2}), f32({2}, {1, 1}), 0.5);
  CHECK(!flat.result().r2);
  CHECK(*flat.result().mae == doctest::Approx(0.5));
}

TEST_CASE("metrics: merged parts equal the whole; a model's own loss; empty and ignored batches") {
  const Tensor y1 = f32({2, 2}, {1, 2, 3, 4}), t1 = f32({2, 2}, {0, 2, 3, 7});
  const Tensor y2 = f32({1, 2}, {-1, 0}), t2 = f32({1, 2}, {1, 1});
  Metrics whole(kind(LossKind::Huber)), a(kind(LossKind::Huber)), b(kind(LossKind::Huber));
  whole.add(y1, t1, 0.4);
  whole.add(y2, t2, 0.8);
  a.add(y1, t1, 0.4);
  b.add(y2, t2, 0.8);
  a.merge(b);
  const EvalMetrics w = whole.result(), m = a.result();
  CHECK(*m.loss == doctest::Approx(*w.loss));
  CHECK(*m.mae == doctest::Approx(*w.mae));
  CHECK(*m.r2 == doctest::Approx(*w.r2));
  CHECK(m.counted == w.counted);

  Metrics own(kind(LossKind::ModelOutput));  // per example, no classifier output
  own.add(Tensor{}, i64({4}, {0, 1, 2, 3}), 0.5);
  own.add(Tensor{}, i64({2}, {0, 1}), 2.0);
  EvalMetrics r = own.result();
  CHECK(r.count == 6);
  CHECK(*r.loss == doctest::Approx(1.0));
  CHECK(!r.accuracy);
  Metrics own_cls(kind(LossKind::ModelOutput));  // with a classifier output: accuracy too
  own_cls.add(f32({2, 3}, {0, 1, 0, 2, 0, 0}), i64({2}, {1, 1}), 0.25);
  CHECK(*own_cls.result().accuracy == doctest::Approx(0.5));

  Metrics ce(kind(LossKind::SoftmaxCrossEntropy));
  CHECK(!ce.result().loss);  // nothing yet: unset, not NaN
  CHECK(!ce.result().accuracy);
  ce.add(f32({1, 2}, {0, 1}), i64({1}, {-100}), std::numeric_limits<double>::quiet_NaN());
  CHECK(!ce.result().loss);  // every label ignored: the batch's NaN mean weighs nothing
  ce.add(f32({1, 2}, {0, 1}), i64({1}, {1}), 0.3);
  CHECK(*ce.result().loss == doctest::Approx(0.3));
  CHECK(ce.result().count == 2);
  CHECK(ce.result().counted == 1);
}

TEST_CASE("metrics: labels out of range and shapes that do not fit are errors") {
  using test::contains;
  using test::error_of;
  Metrics ce(kind(LossKind::SoftmaxCrossEntropy));
  CHECK(contains(error_of([&] {
                   ce.add(f32({1, 2}, {0, 1}), i64({1}, {2}), 0);
                 }),
                 "label 2 is out of range for 2 classes"));
  CHECK(contains(error_of([&] {
                   ce.add(f32({2, 2}, {0, 1, 0, 1}), i64({3}, {0, 0, 0}), 0);
                 }),
                 "do not fit the output [2,2]"));
  Metrics ax(kind(LossKind::SoftmaxCrossEntropy, 2));
  CHECK(contains(error_of([&] {
                   ax.add(f32({1, 2}, {0, 1}), i64({1}, {0}), 0);
                 }),
                 "class axis 2 is out of range"));
  Metrics mse(kind(LossKind::MeanSquaredError));
  CHECK(contains(error_of([&] {
                   mse.add(f32({2}, {0, 1}), i64({2}, {0, 1}), 0);
                 }),
                 "float targets"));
}

// Processes each score a part of an evaluation pass and exchange their scores as doubles
// (Trainer::evaluate with a part): packed and unpacked, every field comes back, and the parts
// merged equal the whole pass.
TEST_CASE("metrics: an evaluation score packed as doubles and back; parts merge into the whole") {
  const Tensor y1 = f32({2, 2}, {1, 2, 3, 4}), t1 = f32({2, 2}, {0, 2, 3, 7});
  const Tensor y2 = f32({1, 2}, {-1, 0}), t2 = f32({1, 2}, {1, 1});
  Metrics whole(kind(LossKind::MeanSquaredError)), a(kind(LossKind::MeanSquaredError)),
      b(kind(LossKind::MeanSquaredError));
  whole.add(y1, t1, 2.5);
  whole.add(y2, t2, 1.25);
  a.add(y1, t1, 2.5);
  b.add(y2, t2, 1.25);
  EvalScore sa, sb;
  sa.count = 2;
  sa.label_correct = 1;
  sa.labels_scored = true;
  sa.own_loss_sum = 0.75;
  sa.sums = a.sums();
  sb.count = 1;
  sb.sums = b.sums();
  const std::vector<double> packed = sa.pack();
  REQUIRE(packed.size() == EvalScore::kPacked);
  const EvalScore back = EvalScore::unpack(packed);
  CHECK(back.pack() == packed);
  CHECK(back.count == 2);
  CHECK(back.label_correct == 1);
  CHECK(back.labels_scored);
  CHECK(back.sums.t_m2 == sa.sums.t_m2);
  EvalScore merged = back;
  merged.merge(EvalScore::unpack(sb.pack()));
  CHECK(merged.count == 3);
  Metrics m(kind(LossKind::MeanSquaredError));
  m.merge(merged.sums);
  const EvalMetrics w = whole.result(), r = m.result();
  CHECK(*r.loss == doctest::Approx(*w.loss));
  CHECK(*r.mae == doctest::Approx(*w.mae));
  CHECK(*r.r2 == doctest::Approx(*w.r2));
  CHECK(r.counted == w.counted);
}
