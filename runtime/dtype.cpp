#include "runtime/dtype.h"

namespace cb {

namespace {
struct DTypeInfo {
  DType type;
  std::string_view name;
  size_t size;
  int32_t onnx;  // TensorProto.DataType
};
constexpr DTypeInfo kInfo[] = {
    {DType::F32, "f32", 4, 1},  {DType::F16, "f16", 2, 10}, {DType::BF16, "bf16", 2, 16},
    {DType::F64, "f64", 8, 11}, {DType::I64, "i64", 8, 7},  {DType::I32, "i32", 4, 6},
    {DType::I8, "i8", 1, 3},    {DType::U8, "u8", 1, 2},    {DType::Bool, "bool", 1, 9},
};
static_assert(sizeof(kInfo) / sizeof(kInfo[0]) == static_cast<size_t>(DType::Bool) + 1);
const DTypeInfo& info(DType t) { return kInfo[static_cast<size_t>(t)]; }
}  // namespace

size_t dtype_size(DType t) { return info(t).size; }
std::string_view dtype_name(DType t) { return info(t).name; }
bool dtype_is_float(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64;
}
bool dtype_is_int(DType t) {
  return t == DType::I64 || t == DType::I32 || t == DType::I8 || t == DType::U8;
}

std::optional<DType> dtype_from_onnx(int32_t code) {
  for (const auto& i : kInfo)
    if (i.onnx == code) return i.type;
  return std::nullopt;
}
int32_t dtype_to_onnx(DType t) { return info(t).onnx; }

std::string_view onnx_dtype_name(int32_t code) {
  constexpr std::string_view kNames[] = {"UNDEFINED",  "FLOAT",   "UINT8",  "INT8",   "UINT16",
                                         "INT16",      "INT32",   "INT64",  "STRING", "BOOL",
                                         "FLOAT16",    "DOUBLE",  "UINT32", "UINT64", "COMPLEX64",
                                         "COMPLEX128", "BFLOAT16"};
  if (code >= 0 && code < static_cast<int32_t>(std::size(kNames))) return kNames[code];
  return "UNKNOWN";
}

}  // namespace cb
