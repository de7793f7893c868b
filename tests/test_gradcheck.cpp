// Every vjp against central finite differences in fp64 (tests/gradcheck.h): broadcasting,
// groups, strides/pads/dilations, training-mode batchnorm, embeddings, dropout with its mask.
#include <doctest/doctest.h>

#include <cstring>

#include "tests/gradcheck.h"

using namespace cb;
using namespace cb::testing;

namespace {
Tensor f64(std::vector<int64_t> dims, std::vector<double> v) {
  return tensor_of(DType::F64, std::move(dims), v);
}
Tensor scalar(double v) { return f64({}, {v}); }
Tensor f32(std::vector<int64_t> dims, std::vector<float> v) {
  return tensor_of(DType::F32, std::move(dims), v);
}
Tensor boolean(std::vector<int64_t> dims, std::vector<uint8_t> v) {
  return tensor_of(DType::Bool, std::move(dims), v);
}
GradInput diff(Tensor t) { return {std::move(t), true}; }
GradInput cnst(Tensor t) { return {std::move(t), false}; }
Tensor r(std::vector<int64_t> dims, uint64_t seed, double lo = -1, double hi = 1, double gap = 0) {
  return random_f64(std::move(dims), seed, lo, hi, gap);
}
}  // namespace

TEST_CASE("gradcheck: elementwise with broadcasting") {
  check_gradients({"Add", {diff(r({2, 3, 4}, 1)), diff(r({3, 1}, 2))}});
  check_gradients({"Sub", {diff(r({2, 3}, 3)), diff(r({3}, 4))}});
  check_gradients({"Mul", {diff(r({2, 1, 4}, 5)), diff(r({3, 4}, 6))}});
  check_gradients({"Div", {diff(r({2, 3}, 7)), diff(r({1, 3}, 8, -2, 2, 0.5))}});
  check_gradients({"Pow", {diff(r({2, 3}, 9, 0.5, 1.5)), cnst(scalar(3.0))}});
  check_gradients(
      {"Where",
       {cnst(boolean({2, 3}, {1, 0, 1, 1, 0, 0})), diff(r({2, 3}, 10)), diff(r({3}, 11))}});
  check_gradients({"Expand", {diff(r({3, 1}, 12)), cnst(i64_tensor({3}, {2, 3, 4}))}});
  check_gradients({"Tile", {diff(r({2, 3}, 13)), cnst(i64_tensor({2}, {3, 2}))}});
  check_gradients({"Tile", {diff(r({2, 1, 3}, 14)), cnst(i64_tensor({3}, {1, 4, 1}))}});
  check_gradients({"Tile", {diff(r({2, 3}, 15)), cnst(i64_tensor({2}, {1, 1}))}});
}

TEST_CASE("gradcheck: unary ops") {
  for (const char* op : {"Exp", "Neg", "Sigmoid", "Tanh", "Erf", "Identity"})
    check_gradients({op, {diff(r({2, 5}, 20))}});
  check_gradients({"Sqrt", {diff(r({2, 5}, 21, 0.5, 2))}});
  check_gradients({"Log", {diff(r({2, 5}, 22, 0.5, 2))}});
  check_gradients({"Reciprocal", {diff(r({2, 5}, 23, -2, 2, 0.5))}});
  check_gradients({"Relu", {diff(r({3, 4}, 24, -1, 1, 0.1))}});
  check_gradients({"LeakyRelu", {diff(r({3, 4}, 25, -1, 1, 0.1))}, {{"alpha", 0.2f}}});
  check_gradients(
      {"Clip",
       {diff(f64({6}, {-0.9, -0.3, 0.1, 0.4, 0.7, 1.2})), cnst(scalar(-0.5)), cnst(scalar(0.5))}});
  // Both saturated parts and the linear one, off the kinks (HardSigmoid's at (-beta +- {0,1}) /
  // alpha, HardSwish's at +-3).
  check_gradients({"HardSigmoid",
                   {diff(f64({6}, {-4.1, -2.6, -0.7, 0.3, 2.2, 3.7}))},
                   {{"alpha", 0.25f}, {"beta", 0.4f}}});
  check_gradients({"HardSigmoid", {diff(f64({5}, {-3.5, -1.2, 0.4, 2.4, 2.6}))}});
  check_gradients({"HardSwish", {diff(f64({7}, {-4.5, -3.2, -2.1, -0.4, 0.9, 2.8, 3.3}))}});
  check_gradients({"Gelu", {diff(r({3, 4}, 26, -4, 4))}});
  check_gradients({"Gelu", {diff(r({3, 4}, 27, -4, 4))}, {{"approximate", std::string("tanh")}}});
}

TEST_CASE("gradcheck: variadic Max, Min, Mean, Sum") {
  check_gradients({"Sum", {diff(r({2, 3}, 100)), diff(r({3}, 101)), diff(r({2, 1}, 102))}});
  check_gradients({"Sum", {diff(r({2, 3}, 103))}});
  check_gradients({"Mean", {diff(r({2, 3}, 104)), diff(r({1, 3}, 105)), diff(r({}, 106))}});
  check_gradients({"Max", {diff(r({2, 3}, 107)), diff(r({3}, 108)), diff(r({2, 1}, 109))}});
  check_gradients({"Min", {diff(r({3, 4}, 110)), diff(r({4}, 111))}});
  check_gradients({"Max", {diff(r({4}, 112))}});
}

// Ties of Max/Min split the gradient equally (PyTorch's maximum): not a derivative that finite
// differences see, so checked against the values the rule gives.
TEST_CASE("Max/Min gradients split equally between ties") {
  // y = max(a, b, c) = [1, 3, 5]: a, b and c tie at 0, b alone at 1, a and b tie at 2.
  Tensor a = f64({3}, {1, 2, 5}), b = f64({3}, {1, 3, 5}), c = f64({1}, {1});
  for (const char* op : {"Max", "Min"}) {
    CAPTURE(op);
    double s = op[1] == 'a' ? 1 : -1;  // Min on the negated inputs ties the same way
    auto neg = [&](Tensor t) {
      for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] *= s;
      return t;
    };
    GradValues g = analytic_gradients({op, {diff(neg(a)), diff(neg(b)), diff(neg(c))}});
    const std::vector<double>& w = g.w;
    REQUIRE(w.size() == 3);
    const std::vector<std::vector<double>> want = {
        {w[0] / 3, 0, w[2] / 2}, {w[0] / 3, w[1], w[2] / 2}, {w[0] / 3}};
    for (size_t i = 0; i < 3; ++i) {
      CAPTURE(i);
      REQUIRE(g.dx[i].size() == want[i].size());
      for (size_t e = 0; e < want[i].size(); ++e) CHECK(g.dx[i][e] == doctest::Approx(want[i][e]));
    }
  }
}

// ReduceMax/ReduceMin: the gradient splits equally between the slice's ties (PyTorch's amax).
TEST_CASE("ReduceMax/ReduceMin gradients split equally between ties") {
  for (const char* op : {"ReduceMax", "ReduceMin"}) {
    CAPTURE(op);
    double s = op[7] == 'a' ? 1 : -1;
    std::vector<double> v = {1, 3, 3, 2, 2, 2};
    for (double& e : v) e *= s;
    GradValues g =
        analytic_gradients({op,
                            {diff(f64({2, 3}, v))},
                            {{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{0}}}});
    const std::vector<double>& w = g.w;
    REQUIRE(w.size() == 2);
    const std::vector<double> want = {0, w[0] / 2, w[0] / 2, w[1] / 3, w[1] / 3, w[1] / 3};
    REQUIRE(g.dx[0].size() == want.size());
    for (size_t e = 0; e < want.size(); ++e) CHECK(g.dx[0][e] == doctest::Approx(want[e]));
  }
}

TEST_CASE("gradcheck: data movement") {
  check_gradients({"Reshape", {diff(r({2, 3, 4}, 30)), cnst(i64_tensor({2}, {4, 6}))}});
  check_gradients({"Flatten", {diff(r({2, 3, 4}, 31))}, {{"axis", int64_t{2}}}});
  check_gradients({"Unsqueeze", {diff(r({2, 3}, 32)), cnst(i64_tensor({1}, {1}))}});
  check_gradients({"Squeeze", {diff(r({2, 1, 3}, 33)), cnst(i64_tensor({1}, {1}))}});
  check_gradients(
      {"Transpose", {diff(r({2, 3, 4}, 34))}, {{"perm", std::vector<int64_t>{2, 0, 1}}}});
  check_gradients({"Concat", {diff(r({2, 3}, 35)), diff(r({2, 2}, 36))}, {{"axis", int64_t{1}}}});
  check_gradients(
      {"Split", {diff(r({2, 6}, 37)), cnst(i64_tensor({2}, {2, 4}))}, {{"axis", int64_t{1}}}, 2});
  check_gradients(
      {"Slice",
       {diff(r({4, 6}, 38)), cnst(i64_tensor({2}, {1, 0})), cnst(i64_tensor({2}, {4, 6})),
        cnst(i64_tensor({2}, {0, 1})), cnst(i64_tensor({2}, {2, 2}))}});
  check_gradients({"Gather", {diff(r({5, 3}, 39)), cnst(i64_tensor({2, 2}, {4, 0, 4, 2}))}});
  check_gradients({"Pad", {diff(r({2, 3}, 40)), cnst(i64_tensor({4}, {0, 1, 1, 2}))}});
  // reflect and edge fold the padded copies' gradients back; pads wider than the dim; negative
  // pads crop; the axes input.
  check_gradients({"Pad",
                   {diff(r({2, 3, 4}, 41)), cnst(i64_tensor({6}, {0, 2, 3, 1, 1, 2}))},
                   {{"mode", std::string("reflect")}}});
  check_gradients({"Pad",
                   {diff(r({3, 3}, 42)), cnst(i64_tensor({4}, {1, 5, 0, 6}))},
                   {{"mode", std::string("reflect")}},
                   1,
                   1e-5,
                   1e-7,
                   1e-6,
                   9});
  check_gradients({"Pad",
                   {diff(r({3, 4}, 43)), cnst(i64_tensor({4}, {2, 1, 1, 3}))},
                   {{"mode", std::string("edge")}}});
  check_gradients({"Pad", {diff(r({4, 5}, 44)), cnst(i64_tensor({4}, {-1, 1, 1, -2}))}});
  check_gradients({"Pad",
                   {diff(r({2, 3, 4}, 45)), cnst(i64_tensor({2}, {2, 1})), cnst(scalar(0.5)),
                    cnst(i64_tensor({1}, {-1}))},
                   {{"mode", std::string("edge")}}});
}

TEST_CASE("gradcheck: resize") {
  using S = std::string;
  auto resize = [](Tensor x, std::vector<float> scales, std::vector<int64_t> sizes, AttrMap a) {
    std::vector<GradInput> in{diff(std::move(x)), cnst(f32({0}, {}))};
    auto n = static_cast<int64_t>(scales.size() + sizes.size());
    if (!scales.empty())
      in.push_back(cnst(f32({n}, scales)));
    else
      in.insert(in.end(), {cnst(f32({0}, {})), cnst(i64_tensor({n}, sizes))});
    check_gradients({"Resize", in, a, 1, 1e-5, 1e-7, 1e-6, 60});
  };
  resize(r({1, 2, 3, 4}, 140), {1, 1, 2, 1.5}, {},
         {{"mode", S("linear")}, {"coordinate_transformation_mode", S("half_pixel")}});
  resize(r({1, 1, 6, 5}, 141), {}, {1, 1, 4, 3},
         {{"mode", S("linear")}, {"coordinate_transformation_mode", S("align_corners")}});
  resize(r({2, 7}, 142), {}, {2, 4},
         {{"mode", S("linear")}, {"coordinate_transformation_mode", S("pytorch_half_pixel")}});
  resize(r({1, 2, 3, 2, 3}, 143), {1, 2, 1.5, 2, 1}, {},
         {{"mode", S("linear")}, {"coordinate_transformation_mode", S("asymmetric")}});
  resize(r({1, 2, 3, 4}, 144), {1, 1, 2, 3}, {}, {{"mode", S("nearest")}});
  resize(r({1, 2, 4, 5}, 147), {1, 1, 1.5, 0.8}, {}, {{"mode", S("cubic")}});
  resize(r({1, 1, 5, 4}, 148), {}, {1, 1, 3, 6},
         {{"mode", S("cubic")},
          {"exclude_outside", int64_t{1}},
          {"coordinate_transformation_mode", S("asymmetric")}});
  resize(r({1, 1, 7, 6}, 145), {}, {1, 1, 3, 4},
         {{"mode", S("nearest")},
          {"coordinate_transformation_mode", S("asymmetric")},
          {"nearest_mode", S("ceil")}});
}

TEST_CASE("gradcheck: reductions and pooling") {
  check_gradients({"ReduceMean", {diff(r({2, 3, 4}, 50))}, {{"axes", std::vector<int64_t>{1}}}});
  check_gradients({"ReduceSum",
                   {diff(r({2, 3, 4}, 51)), cnst(i64_tensor({2}, {0, 2}))},
                   {{"keepdims", int64_t{0}}}});
  check_gradients(
      {"ReduceSumSquare", {diff(r({2, 3, 4}, 140))}, {{"axes", std::vector<int64_t>{1}}}});
  check_gradients({"ReduceL1",
                   {diff(r({2, 3, 4}, 141, -1, 1, 0.1))},
                   {{"axes", std::vector<int64_t>{0, 2}}, {"keepdims", int64_t{0}}}});
  check_gradients({"ReduceL2", {diff(r({2, 3, 4}, 142))}, {{"axes", std::vector<int64_t>{-1}}}});
  check_gradients({"ReduceL2", {diff(r({3, 2}, 143))}, {{"keepdims", int64_t{0}}}});
  check_gradients(
      {"ReduceLogSum", {diff(r({2, 3, 4}, 144, 0.5, 2))}, {{"axes", std::vector<int64_t>{1}}}});
  check_gradients({"ReduceLogSumExp",
                   {diff(r({2, 3, 4}, 145, -3, 3))},
                   {{"axes", std::vector<int64_t>{0, 2}}, {"keepdims", int64_t{0}}}});
  // Distinct values: the maximum and minimum are unique (ties: the test below).
  check_gradients({"ReduceMax", {diff(r({2, 3, 4}, 146))}, {{"axes", std::vector<int64_t>{1}}}});
  check_gradients({"ReduceMin",
                   {diff(r({2, 3, 4}, 147))},
                   {{"axes", std::vector<int64_t>{0, 2}}, {"keepdims", int64_t{0}}}});
  check_gradients(
      {"ReduceProd", {diff(r({2, 3, 4}, 148, 0.5, 1.5))}, {{"axes", std::vector<int64_t>{1}}}});
  // Zeros: one zero in a slice (its gradient is the product of the others), two (all 0), none.
  check_gradients({"ReduceProd",
                   {diff(f64({3, 3}, {0.5, 0, 2, 0, 1.5, 0, -1.2, 0.8, 1.1}))},
                   {{"axes", std::vector<int64_t>{1}}}});
  check_gradients({"ReduceProd", {diff(f64({4}, {0.7, -1.3, 0, 2}))}, {{"keepdims", int64_t{0}}}});
  check_gradients({"GlobalAveragePool", {diff(r({2, 3, 4, 4}, 52))}});
  check_gradients({"AveragePool",
                   {diff(r({1, 2, 5, 5}, 53))},
                   {{"kernel_shape", std::vector<int64_t>{3, 3}},
                    {"strides", std::vector<int64_t>{2, 2}},
                    {"pads", std::vector<int64_t>{1, 1, 1, 1}}}});
  check_gradients(
      {"MaxPool",
       {diff(r({1, 2, 5, 5}, 54))},
       {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}}});
  // Overlapping windows, ceil_mode (the last window hangs over the end), asymmetric pads.
  check_gradients({"MaxPool",
                   {diff(r({1, 2, 6, 7}, 55))},
                   {{"kernel_shape", std::vector<int64_t>{3, 3}},
                    {"strides", std::vector<int64_t>{2, 2}},
                    {"pads", std::vector<int64_t>{1, 0, 0, 1}},
                    {"ceil_mode", int64_t{1}}},
                   1,
                   1e-5,
                   1e-7,
                   1e-6,
                   84});
  check_gradients(
      {"MaxPool",
       {diff(r({1, 1, 7, 7}, 56))},
       {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"dilations", std::vector<int64_t>{2, 2}}}});
  check_gradients({"MaxPool",
                   {diff(r({1, 2, 4, 5, 4}, 57))},
                   {{"kernel_shape", std::vector<int64_t>{2, 3, 2}},
                    {"strides", std::vector<int64_t>{2, 1, 2}}}});
  check_gradients({"AveragePool",
                   {diff(r({1, 2, 5, 5}, 58))},
                   {{"kernel_shape", std::vector<int64_t>{3, 3}},
                    {"strides", std::vector<int64_t>{2, 2}},
                    {"pads", std::vector<int64_t>{1, 1, 1, 1}},
                    {"count_include_pad", int64_t{1}}}});
  // ceil_mode: the overhang past the end pad counts neither as input nor as padding.
  check_gradients({"AveragePool",
                   {diff(r({1, 2, 6, 6}, 59))},
                   {{"kernel_shape", std::vector<int64_t>{3, 3}},
                    {"strides", std::vector<int64_t>{2, 2}},
                    {"pads", std::vector<int64_t>{1, 1, 1, 1}},
                    {"ceil_mode", int64_t{1}},
                    {"count_include_pad", int64_t{1}}},
                   1,
                   1e-5,
                   1e-7,
                   1e-6,
                   72});
  check_gradients({"AveragePool",
                   {diff(r({2, 3, 9}, 159))},
                   {{"kernel_shape", std::vector<int64_t>{4}},
                    {"strides", std::vector<int64_t>{3}},
                    {"pads", std::vector<int64_t>{2, 1}},
                    {"ceil_mode", int64_t{1}}}});
}

TEST_CASE("gradcheck: matmul, gemm, conv") {
  // A weight shared by every batch index: dB is one product over the rows of every batch index.
  check_gradients({"MatMul", {diff(r({2, 3, 4}, 60)), diff(r({4, 5}, 61))}});
  check_gradients({"MatMul", {diff(r({2, 2, 3, 4}, 64)), diff(r({4, 5}, 65))}});
  check_gradients({"MatMul", {diff(r({2, 1, 3, 4}, 62)), diff(r({3, 4, 2}, 63))}});
  check_gradients({"Gemm",
                   {diff(r({3, 4}, 64)), diff(r({5, 4}, 65)), diff(r({5}, 66))},
                   {{"transB", int64_t{1}}, {"alpha", 2.0f}, {"beta", 0.5f}}});
  check_gradients({"Gemm", {diff(r({4, 3}, 67)), diff(r({4, 5}, 68))}, {{"transA", int64_t{1}}}});
  check_gradients({"Conv",
                   {diff(r({2, 4, 5, 5}, 69)), diff(r({6, 2, 3, 3}, 70)), diff(r({6}, 71))},
                   {{"group", int64_t{2}},
                    {"strides", std::vector<int64_t>{2, 2}},
                    {"pads", std::vector<int64_t>{1, 1, 1, 1}}}});
  check_gradients({"Conv",
                   {diff(r({1, 3, 6, 6}, 72)), diff(r({3, 1, 3, 3}, 73))},
                   {{"group", int64_t{3}}, {"dilations", std::vector<int64_t>{2, 2}}}});
  // 1x1 (X is its own im2col), stride 2 with asymmetric pads, depthwise with a channel
  // multiplier and stride 2, 1-D with dilation, 3-D.
  check_gradients(
      {"Conv", {diff(r({2, 6, 4, 4}, 74)), diff(r({4, 6, 1, 1}, 75)), diff(r({4}, 76))}});
  check_gradients(
      {"Conv",
       {diff(r({2, 3, 7, 6}, 77)), diff(r({4, 3, 3, 3}, 78))},
       {{"strides", std::vector<int64_t>{2, 2}}, {"pads", std::vector<int64_t>{0, 1, 2, 0}}}});
  check_gradients({"Conv",
                   {diff(r({2, 4, 6, 6}, 79)), diff(r({8, 1, 3, 3}, 170)), diff(r({8}, 171))},
                   {{"group", int64_t{4}},
                    {"strides", std::vector<int64_t>{2, 2}},
                    {"pads", std::vector<int64_t>{1, 1, 1, 1}}}});
  check_gradients({"Conv",
                   {diff(r({2, 3, 9}, 172)), diff(r({4, 3, 3}, 173)), diff(r({4}, 174))},
                   {{"strides", std::vector<int64_t>{2}},
                    {"dilations", std::vector<int64_t>{2}},
                    {"pads", std::vector<int64_t>{2, 1}}}});
  check_gradients({"Conv",
                   {diff(r({1, 2, 4, 5, 4}, 175)), diff(r({3, 2, 2, 3, 2}, 176))},
                   {{"strides", std::vector<int64_t>{1, 2, 1}},
                    {"pads", std::vector<int64_t>{1, 0, 1, 0, 1, 0}}}});
}

TEST_CASE("gradcheck: upsample") {
  check_gradients({"Upsample",
                   {diff(r({1, 2, 3, 3}, 146)), cnst(f32({4}, {1, 1, 2, 1.5f}))},
                   {{"mode", std::string("linear")}}});
}

TEST_CASE("gradcheck: conv transpose") {
  using V = std::vector<int64_t>;
  check_gradients({"ConvTranspose",
                   {diff(r({2, 4, 3, 3}, 190)), diff(r({4, 3, 3, 3}, 191)), diff(r({3}, 192))},
                   {{"strides", V{2, 2}}, {"pads", V{1, 0, 0, 1}}, {"output_padding", V{1, 0}}}});
  check_gradients({"ConvTranspose",
                   {diff(r({1, 4, 3, 4}, 193)), diff(r({4, 2, 2, 3}, 194)), diff(r({4}, 195))},
                   {{"group", int64_t{2}}, {"dilations", V{2, 1}}, {"strides", V{1, 2}}}});
  // output_shape past every window (a negative end pad), auto_pad, 1-D, 3-D, depthwise.
  check_gradients({"ConvTranspose",
                   {diff(r({1, 2, 3, 3}, 196)), diff(r({2, 2, 3, 3}, 197)), diff(r({2}, 198))},
                   {{"strides", V{3, 2}}, {"output_shape", V{11, 8}}}});
  check_gradients({"ConvTranspose",
                   {diff(r({1, 2, 3, 4}, 199)), diff(r({2, 1, 3, 3}, 200))},
                   {{"strides", V{2, 2}}, {"auto_pad", std::string("SAME_UPPER")}}});
  check_gradients({"ConvTranspose",
                   {diff(r({2, 3, 5}, 201)), diff(r({3, 2, 3}, 202)), diff(r({2}, 203))},
                   {{"strides", V{2}}, {"dilations", V{2}}, {"pads", V{2, 1}}}});
  check_gradients({"ConvTranspose",
                   {diff(r({1, 2, 2, 3, 2}, 204)), diff(r({2, 2, 2, 2, 2}, 205))},
                   {{"strides", V{2, 1, 2}}, {"pads", V{1, 0, 0, 0, 1, 1}}}});
  check_gradients({"ConvTranspose",
                   {diff(r({1, 3, 3, 3}, 206)), diff(r({3, 1, 3, 3}, 207)), diff(r({3}, 208))},
                   {{"group", int64_t{3}}, {"strides", V{2, 2}}}});
}

TEST_CASE("gradcheck: normalization, softmax, dropout, loss") {
  check_gradients({"BatchNormalization",
                   {diff(r({4, 3, 2, 2}, 80)), diff(r({3}, 81, 0.5, 1.5)), diff(r({3}, 82)),
                    cnst(r({3}, 83)), cnst(r({3}, 84, 0.5, 1.5))},
                   {{"training_mode", int64_t{1}}},
                   1,
                   1e-4,
                   1e-6});
  check_gradients({"LayerNormalization",
                   {diff(r({2, 3, 4}, 85)), diff(r({4}, 86)), diff(r({4}, 87))},
                   {},
                   1,
                   1e-4,
                   1e-6});
  // Negative axis over two dims, scale broadcast along one of them, B of another shape.
  check_gradients({"LayerNormalization",
                   {diff(r({2, 3, 4}, 180)), diff(r({4}, 181)), diff(r({3, 1}, 182))},
                   {{"axis", int64_t{-2}}},
                   1,
                   1e-4,
                   1e-6});
  check_gradients({"BatchNormalization",
                   {diff(r({3, 2, 5}, 183)), diff(r({2}, 184, 0.5, 1.5)), diff(r({2}, 185)),
                    cnst(r({2}, 186)), cnst(r({2}, 187, 0.5, 1.5))},
                   {{"training_mode", int64_t{1}}, {"epsilon", 1e-3f}},
                   1,
                   1e-4,
                   1e-6});
  check_gradients({"Softmax", {diff(r({2, 3, 4}, 88))}, {{"axis", int64_t{1}}}});
  check_gradients({"LogSoftmax", {diff(r({2, 5}, 89))}});
  check_gradients(
      {"Dropout", {diff(r({4, 6}, 90)), cnst(scalar(0.3)), cnst(boolean({}, {1}))}, {}, 2});
  check_gradients(
      {"SoftmaxCrossEntropyLoss", {diff(r({4, 5}, 91)), cnst(i64_tensor({4}, {0, 3, 4, 1}))}});
  check_gradients({"SoftmaxCrossEntropyLoss",  // PyTorch's F.cross_entropy exports ignore_index
                   {diff(r({4, 5}, 92)), cnst(i64_tensor({4}, {2, -100, 4, 1}))},
                   {{"ignore_index", int64_t{-100}}}});
  // Class weights: the mean divides by the weights of the labels not ignored (class 0 here).
  check_gradients(
      {"SoftmaxCrossEntropyLoss",
       {diff(r({5, 4}, 93)), cnst(i64_tensor({5}, {3, 0, 2, 0, 1})), cnst(r({4}, 94, 0.5, 2))},
       {{"ignore_index", int64_t{0}}}});
  // N-D scores [N,C,d1,d2], a negative ignore_index, reduction none.
  check_gradients(
      {"SoftmaxCrossEntropyLoss",
       {diff(r({2, 3, 2, 2}, 95)), cnst(i64_tensor({2, 2, 2}, {0, -1, 2, 1, 1, 2, -1, 0}))},
       {{"ignore_index", int64_t{-1}}, {"reduction", std::string("none")}}});
  // N-D with weights, reduction sum, and log_prob read by the loss with the loss itself.
  check_gradients({"SoftmaxCrossEntropyLoss",
                   {diff(r({2, 4, 3}, 96)), cnst(i64_tensor({2, 3}, {3, 0, 2, 1, 1, 0})),
                    cnst(r({4}, 97, 0.5, 2))},
                   {{"reduction", std::string("sum")}},
                   2,
                   1e-5,
                   1e-7,
                   1e-6,
                   24,
                   {0, 1}});
  // log_prob alone (the loss output unused), N-D mean with weights and ignore_index.
  check_gradients({"SoftmaxCrossEntropyLoss",
                   {diff(r({3, 4, 2}, 98)), cnst(i64_tensor({3, 2}, {1, 2, 2, 0, 3, 2})),
                    cnst(r({4}, 99, 0.5, 2))},
                   {{"ignore_index", int64_t{2}}},
                   2,
                   1e-5,
                   1e-7,
                   1e-6,
                   24,
                   {1}});
  check_gradients({"SoftmaxCrossEntropyLoss",
                   {diff(r({3, 4, 2}, 100)), cnst(i64_tensor({3, 2}, {1, 2, 2, 0, 3, 2})),
                    cnst(r({4}, 101, 0.5, 2))},
                   {{"ignore_index", int64_t{2}}}});
}

// LSTM, GRU and RNN are lowered into MatMul/Add/Mul/Sigmoid/Tanh/Split/Concat over time steps
// (runtime/ops/rnn.cpp); these check the gradients of X, W, R, B, the initial states and P
// through the unrolled graphs, in both directions and both layouts.
TEST_CASE("gradcheck: LSTM, GRU, RNN (lowered)") {
  const std::string bi = "bidirectional";
  // X [T=3,B=2,I=3], H=2, D=2: W [2,8,3], R [2,8,2], B [2,16], h0/c0 [2,2,2], P [2,6].
  check_gradients({"LSTM",
                   {diff(r({3, 2, 3}, 300)), diff(r({2, 8, 3}, 301)), diff(r({2, 8, 2}, 302)),
                    diff(r({2, 16}, 303)), cnst(i64_tensor({2}, {3, 3})), diff(r({2, 2, 2}, 304)),
                    diff(r({2, 2, 2}, 305)), diff(r({2, 6}, 306))},
                   {{"direction", bi}, {"hidden_size", int64_t{2}}},
                   3});
  // Batch-first, no bias or initial state (those terms drop out), coupled input-forget gate.
  check_gradients({"LSTM",
                   {diff(r({2, 3, 3}, 310)), diff(r({1, 8, 3}, 311)), diff(r({1, 8, 2}, 312))},
                   {{"layout", int64_t{1}}, {"input_forget", int64_t{1}}},
                   2});
  // clip bounds every gate's pre-activation (some of these lie outside +-0.8, none at it).
  check_gradients(
      {"LSTM",
       {diff(r({3, 2, 3}, 315, -2, 2)), diff(r({1, 8, 3}, 316)), diff(r({1, 8, 2}, 317))},
       {{"clip", 0.8f}, {"direction", std::string("reverse")}},
       2});
  for (int64_t lbr : {0, 1}) {
    CAPTURE(lbr);
    check_gradients(
        {"GRU",
         {diff(r({3, 2, 3}, 320)), diff(r({2, 6, 3}, 321)), diff(r({2, 6, 2}, 322)),
          diff(r({2, 12}, 323)), cnst(i64_tensor({2}, {3, 3})), diff(r({2, 2, 2}, 324))},
         {{"direction", bi}, {"linear_before_reset", lbr}},
         2});
    check_gradients({"GRU",
                     {diff(r({2, 3, 3}, 325)), diff(r({1, 6, 3}, 326)), diff(r({1, 6, 2}, 327)),
                      diff(r({1, 12}, 328))},
                     {{"direction", std::string("reverse")},
                      {"layout", int64_t{1}},
                      {"linear_before_reset", lbr}},
                     2});
  }
  check_gradients({"RNN",
                   {diff(r({3, 2, 3}, 330)), diff(r({2, 2, 3}, 331)), diff(r({2, 2, 2}, 332)),
                    diff(r({2, 4}, 333)), cnst(i64_tensor({2}, {3, 3})), diff(r({2, 2, 2}, 334))},
                   {{"direction", bi}},
                   2});
}

// Einsum is lowered into ReduceSum/Transpose/Reshape/MatMul (runtime/ops/einsum.cpp).
TEST_CASE("gradcheck: Einsum (lowered)") {
  auto eq = [](const char* e) { return AttrMap{{"equation", std::string(e)}}; };
  check_gradients(
      {"Einsum", {diff(r({2, 2, 3}, 340)), diff(r({2, 3, 4}, 341))}, eq("bij,bjk->bik")});
  check_gradients({"Einsum", {diff(r({2, 3}, 342)), diff(r({4, 3}, 343))}, eq("ij,kj->ik")});
  check_gradients({"Einsum", {diff(r({2, 3, 4}, 344)), diff(r({4, 5}, 345))}, eq("bij,jk->kib")});
  check_gradients({"Einsum", {diff(r({5}, 346)), diff(r({5}, 347))}, eq("i,i")});
  check_gradients({"Einsum", {diff(r({3, 4}, 348))}, eq("ij->i")});
  check_gradients({"Einsum", {diff(r({3, 4}, 349))}, eq("ij->ji")});
  check_gradients({"Einsum", {diff(r({2, 3}, 350)), diff(r({3, 4}, 351))}, eq("ij,jk")});
}
