// CPU gradient/loss kernels launched through a CPU Device (tests/device_util.h; no graph), for
// what the finite-difference checks (test_gradcheck.cpp, f64 through autodiff) do not cover: the
// f32 SoftmaxCrossEntropyLoss against a hand computation, a bad label as a user error, GatherGrad
// with repeated indices split over 4 threads against a serial reference, ClipGrad at its bounds,
// and the softmax gradients in column tiles and with opset < 13's 2-D coercion.
#include <doctest/doctest.h>

#include <any>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/ops/params.h"
#include "tests/device_util.h"

using namespace cb;

namespace {

template <class T>
TensorView view(std::vector<T>& v, DType t, std::vector<int64_t> dims) {
  return TensorView{v.data(), t, std::move(dims)};
}

void launch(OpKind op, KernelArgs& a, Device& dev, const std::any* params) {
  a.params = params;
  test::launch_host(dev, op, a);
}

// scores [2,3], labels {2, 0}: loss_i = log(sum_k exp(x_ik)) - x_i,label.
std::vector<float> kScores = {1.0f, 2.0f, 3.0f, -1.0f, 0.5f, 0.0f};
double hand_row_loss(int i, int label) {
  double s = 0;
  for (int k = 0; k < 3; ++k) s += std::exp(double(kScores[size_t(i * 3 + k)]));
  return std::log(s) - kScores[size_t(i * 3 + label)];
}

}  // namespace

TEST_CASE("kernels: SoftmaxCrossEntropyLoss f32 against a hand computation") {
  auto one = make_cpu_device(1);
  std::vector<float> scores = kScores;
  std::vector<int64_t> labels = {2, 0};
  const double l0 = hand_row_loss(0, 2), l1 = hand_row_loss(1, 0);
  for (std::string red : {"mean", "sum", "none"}) {
    CAPTURE(red);
    std::any params = ops::SoftmaxCrossEntropyLossParams{red};
    std::vector<float> loss(red == "none" ? 2 : 1, -7.0f), log_prob(6, -7.0f);
    KernelArgs a;
    a.in = {view(scores, DType::F32, {2, 3}), view(labels, DType::I64, {2})};
    a.out = {
        view(loss, DType::F32, red == "none" ? std::vector<int64_t>{2} : std::vector<int64_t>{}),
        view(log_prob, DType::F32, {2, 3})};
    launch(OpKind::SoftmaxCrossEntropyLoss, a, *one, &params);
    if (red == "mean") CHECK(loss[0] == doctest::Approx((l0 + l1) / 2).epsilon(1e-6));
    if (red == "sum") CHECK(loss[0] == doctest::Approx(l0 + l1).epsilon(1e-6));
    if (red == "none") {
      CHECK(loss[0] == doctest::Approx(l0).epsilon(1e-6));
      CHECK(loss[1] == doctest::Approx(l1).epsilon(1e-6));
    }
    // log_prob rows are log-softmax: exp sums to 1, and -log_prob[label] is the row loss.
    CHECK(-log_prob[2] == doctest::Approx(l0).epsilon(1e-6));
    CHECK(-log_prob[3] == doctest::Approx(l1).epsilon(1e-6));
    double s = 0;
    for (int k = 0; k < 3; ++k) s += std::exp(double(log_prob[size_t(k)]));
    CHECK(s == doctest::Approx(1.0).epsilon(1e-6));

    // Its gradient with dloss = 1: (softmax - onehot) (/ N for mean); rows sum to 0.
    std::vector<float> dloss(red == "none" ? 2 : 1, 1.0f), dscores(6, -7.0f);
    KernelArgs g;
    g.in = {
        view(dloss, DType::F32, red == "none" ? std::vector<int64_t>{2} : std::vector<int64_t>{}),
        view(scores, DType::F32, {2, 3}), view(labels, DType::I64, {2})};
    g.out = {view(dscores, DType::F32, {2, 3})};
    launch(OpKind::SoftmaxCrossEntropyLossGrad, g, *one, &params);
    const double scale = red == "mean" ? 0.5 : 1.0;
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 3; ++k) {
        double p = std::exp(double(log_prob[size_t(i * 3 + k)]));
        double want = (p - (k == int(labels[size_t(i)]) ? 1.0 : 0.0)) * scale;
        CHECK(dscores[size_t(i * 3 + k)] == doctest::Approx(want).epsilon(1e-5));
      }
  }
}

TEST_CASE("kernels: SoftmaxCrossEntropyLoss with a label out of range is a user error") {
  auto one = make_cpu_device(1);
  std::vector<float> scores = kScores, loss(1), dscores(6);
  std::any params = ops::SoftmaxCrossEntropyLossParams{"mean"};
  for (int64_t bad : {int64_t{3}, int64_t{-1}, int64_t{1000}}) {
    CAPTURE(bad);
    std::vector<int32_t> labels = {1, static_cast<int32_t>(bad)};
    KernelArgs a;
    a.in = {view(scores, DType::F32, {2, 3}), view(labels, DType::I32, {2})};
    a.out = {view(loss, DType::F32, {}), TensorView{}};
    std::string msg;
    try {
      launch(OpKind::SoftmaxCrossEntropyLoss, a, *one, &params);
    } catch (const Error& e) {
      msg = e.what();
    }
    CHECK(msg.find("label " + std::to_string(bad)) != std::string::npos);
    CHECK(msg.find("3 classes") != std::string::npos);
    std::vector<float> dloss = {1.0f};
    KernelArgs g;
    g.in = {view(dloss, DType::F32, {}), view(scores, DType::F32, {2, 3}),
            view(labels, DType::I32, {2})};
    g.out = {view(dscores, DType::F32, {2, 3})};
    CHECK_THROWS_AS(launch(OpKind::SoftmaxCrossEntropyLossGrad, g, *one, &params), Error);
  }
}

TEST_CASE("kernels: GatherGrad with repeated indices on 4 threads equals a serial reference") {
  auto four = make_cpu_device(4);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  // (data dims, axis, indices dims): an embedding table (axis 0) and a middle axis.
  struct Case {
    std::vector<int64_t> data;
    int64_t axis;
    std::vector<int64_t> idx;
  };
  for (const Case& c : {Case{{50, 700}, 0, {16, 20}}, Case{{6, 9, 300}, -2, {40}}}) {
    const size_t axis = static_cast<size_t>(c.axis < 0 ? c.axis + int64_t(c.data.size()) : c.axis);
    int64_t outer = 1, inner = 1, ni = 1;
    for (size_t d = 0; d < axis; ++d) outer *= c.data[d];
    for (size_t d = axis + 1; d < c.data.size(); ++d) inner *= c.data[d];
    for (int64_t d : c.idx) ni *= d;
    const int64_t n = c.data[axis];
    std::vector<int64_t> idx(static_cast<size_t>(ni));
    std::uniform_int_distribution<int64_t> pick(-n, 4);  // few rows, many repeats, some negative
    for (int64_t& i : idx) i = pick(rng);
    std::vector<int64_t> dy_dims(c.data.begin(), c.data.begin() + int64_t(axis));
    dy_dims.insert(dy_dims.end(), c.idx.begin(), c.idx.end());
    dy_dims.insert(dy_dims.end(), c.data.begin() + int64_t(axis) + 1, c.data.end());
    std::vector<float> dy(static_cast<size_t>(outer * ni * inner));
    for (float& x : dy) x = u(rng);

    std::vector<float> want(static_cast<size_t>(outer * n * inner), 0.0f);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k = 0; k < ni; ++k) {
        int64_t r = idx[size_t(k)] < 0 ? idx[size_t(k)] + n : idx[size_t(k)];
        for (int64_t j = 0; j < inner; ++j)
          want[size_t((o * n + r) * inner + j)] += dy[size_t((o * ni + k) * inner + j)];
      }

    std::any params = ops::GatherParams{c.axis};
    std::vector<int64_t> shape = c.data;
    std::vector<float> got(want.size(), 123.0f);
    KernelArgs a;
    a.in = {view(dy, DType::F32, dy_dims), view(idx, DType::I64, c.idx),
            view(shape, DType::I64, {int64_t(shape.size())})};
    a.out = {view(got, DType::F32, c.data)};
    launch(OpKind::GatherGrad, a, *four, &params);
    CHECK(got == want);  // same summation order per element: bitwise equal
  }
}

TEST_CASE("kernels: ClipGrad passes the gradient at the bounds (PyTorch's clamp backward)") {
  auto one = make_cpu_device(1);
  std::vector<float> dy = {1, 2, 3, 4, 5, 6}, x = {-0.5f, 0.5f, 0.0f, 0.51f, -0.51f, 2.0f};
  std::vector<float> lo = {-0.5f}, hi = {0.5f}, dx(6, -7.0f);
  std::any params = ops::ClipParams{};
  KernelArgs a;
  a.in = {view(dy, DType::F32, {6}), view(x, DType::F32, {6}), view(lo, DType::F32, {}),
          view(hi, DType::F32, {})};
  a.out = {view(dx, DType::F32, {6})};
  launch(OpKind::ClipGrad, a, *one, &params);
  CHECK(dx == std::vector<float>{1, 2, 3, 0, 0, 0});
}

TEST_CASE("kernels: SoftmaxGrad and LogSoftmaxGrad along an axis and coerced to 2-D") {
  auto one = make_cpu_device(1);
  // [2,3,70] along axis 1 (inner 70: two column tiles) and coerce_2d at axis 1 (rows of 210).
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> dy(420), y(420);
  for (double& v : dy) v = u(rng);
  for (double& v : y) v = u(rng);
  for (bool coerce : {false, true})
    for (bool log : {false, true}) {
      CAPTURE(coerce);
      CAPTURE(log);
      const int64_t outer = 2, n = coerce ? 210 : 3, inner = coerce ? 1 : 70;
      std::vector<double> want(420);
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < inner; ++j) {
          auto at = [&](int64_t k) { return size_t((o * n + k) * inner + j); };
          double s = 0;
          for (int64_t k = 0; k < n; ++k) s += log ? dy[at(k)] : dy[at(k)] * y[at(k)];
          for (int64_t k = 0; k < n; ++k)
            want[at(k)] = log ? dy[at(k)] - std::exp(y[at(k)]) * s : y[at(k)] * (dy[at(k)] - s);
        }
      std::any params = ops::SoftmaxParams{1, coerce};
      std::vector<double> got(420, -7.0);
      KernelArgs a;
      a.in = {view(dy, DType::F64, {2, 3, 70}), view(y, DType::F64, {2, 3, 70})};
      a.out = {view(got, DType::F64, {2, 3, 70})};
      launch(log ? OpKind::LogSoftmaxGrad : OpKind::SoftmaxGrad, a, *one, &params);
      for (size_t i = 0; i < got.size(); ++i)
        CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-12));
    }
}
