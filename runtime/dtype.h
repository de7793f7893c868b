// Element types of the IR. The enum is ours; the importer maps ONNX's TensorProto codes onto it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace cb {

enum class DType : uint8_t { F32, F16, BF16, F64, I64, I32, I8, U8, Bool };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);  // "f32", "i64", ...
bool dtype_is_float(DType t);
bool dtype_is_int(DType t);  // signed or unsigned integer, not bool

// ONNX TensorProto.DataType code <-> DType; nullopt for types the IR does not carry.
std::optional<DType> dtype_from_onnx(int32_t code);
int32_t dtype_to_onnx(DType t);
std::string_view onnx_dtype_name(int32_t code);  // "FLOAT", "STRING", ... for messages

}  // namespace cb
