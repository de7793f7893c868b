// Constant and ConstantOfShape: nodes whose output is data known at import time. The importer
// folds them away; their outputs become constant values of the graph.
#include "runtime/copy_bytes.h"
#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"

namespace cb::ops {

namespace {
std::any parse_constant(ParseCtx& c) {
  int set = 0;
  TensorPtr t;
  if (auto v = c.tensor("value")) t = v, ++set;
  auto make = [](DType d, std::vector<int64_t> dims, const void* src, size_t n) {
    auto out = std::make_shared<Tensor>();
    out->dtype = d;
    out->dims = std::move(dims);
    out->bytes.resize(n);
    copy_bytes(out->bytes.data(), src, n);  // value_ints may be empty
    return out;
  };
  if (auto v = c.opt_f("value_float")) t = make(DType::F32, {}, &*v, 4), ++set;
  if (auto v = c.opt_i("value_int")) t = make(DType::I64, {}, &*v, 8), ++set;
  if (c.has("value_floats")) {
    ++set;
    c.fail("value_floats is not supported; use 'value' with a tensor");
  }
  if (auto v = c.opt_ints("value_ints"))
    t = make(DType::I64, {static_cast<int64_t>(v->size())}, v->data(), v->size() * 8), ++set;
  for (const char* unsupported : {"value_string", "value_strings", "sparse_value"})
    if (c.has(unsupported))
      c.fail("{} is not supported: crossbow has no string or sparse tensors", unsupported);
  if (set != 1) c.fail("must have exactly one value attribute, has {}", set);
  return ConstantParams{t};
}
void infer_constant(InferCtx& c) { c.set_data(0, c.p<ConstantParams>().value); }

std::any parse_constant_of_shape(ParseCtx& c) {
  auto v = c.tensor("value");
  if (v && v->numel() != 1) c.fail("'value' must hold one element, has {}", v->numel());
  if (!v) {
    auto z = std::make_shared<Tensor>();
    z->dims = {1};
    z->bytes.resize(4);
    v = z;
  }
  return ConstantParams{v};
}
void infer_constant_of_shape(InferCtx& c) {
  auto dims = c.known_dims(0, "shape");
  const Tensor& v = *c.p<ConstantParams>().value;
  c.set(0, v.dtype, dims);
  if (!shape_is_static(dims) || !(dtype_is_int(v.dtype) || v.dtype == DType::Bool)) return;
  auto n = shape_numel(dims)->value;
  if (n <= kKnownMaxElems) c.set_known(0, std::vector<Dim>(n, Dim::of(v.int_at(0))));
}
}  // namespace

const OpDef kConstant{.kind = OpKind::Constant,
                      .name = "Constant",
                      .inputs_min = 0,
                      .inputs_max = 0,
                      .outputs_min = 1,
                      .outputs_max = 1,
                      .parse = parse_constant,
                      .infer = infer_constant};
const OpDef kConstantOfShape{.kind = OpKind::ConstantOfShape,
                             .name = "ConstantOfShape",
                             .inputs_min = 1,
                             .inputs_max = 1,
                             .outputs_min = 1,
                             .outputs_max = 1,
                             .parse = parse_constant_of_shape,
                             .infer = infer_constant_of_shape,
                             .value_inputs = bit(0)};

}  // namespace cb::ops
