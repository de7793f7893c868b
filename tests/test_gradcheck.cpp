// Every vjp against central finite differences in fp64 (tests/gradcheck.h): broadcasting,
// groups, strides/pads/dilations, training-mode batchnorm, embeddings, dropout with its mask.
#include <doctest/doctest.h>

#include <cstring>

#include "tests/gradcheck.h"

using namespace cb;
using namespace cb::testing;

namespace {
Tensor f64(std::vector<int64_t> dims, std::vector<double> v) {
  Tensor t;
  t.dtype = DType::F64;
  t.dims = std::move(dims);
  t.bytes.resize(v.size() * 8);
  std::memcpy(t.bytes.data(), v.data(), v.size() * 8);
  return t;
}
Tensor scalar(double v) { return f64({}, {v}); }
Tensor f32(std::vector<int64_t> dims, std::vector<float> v) {
  Tensor t;
  t.dtype = DType::F32;
  t.dims = std::move(dims);
  t.bytes.resize(v.size() * 4);
  std::memcpy(t.bytes.data(), v.data(), v.size() * 4);
  return t;
}
Tensor boolean(std::vector<int64_t> dims, std::vector<uint8_t> v) {
  Tensor t;
  t.dtype = DType::Bool;
  t.dims = std::move(dims);
  t.bytes.resize(v.size());
  std::memcpy(t.bytes.data(), v.data(), v.size());
  return t;
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
  check_gradients({"MatMul", {diff(r({2, 3, 4}, 60)), diff(r({4, 5}, 61))}});
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
}
