// Element types of the IR. The enum is ours; the importer maps ONNX's TensorProto codes onto it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace cb {

enum class DType : uint8_t { F32, F16, BF16, F64, I64, I32, I8, U8, Bool };

size_t dtype_size(DType t);
// Bytes an element of a `t` tensor takes in memory: 2 for an f32 activation stored as bf16
// (Value::bf16_storage), else dtype_size(t).
inline size_t stored_size(DType t, bool bf16_storage) { return bf16_storage ? 2 : dtype_size(t); }
std::string_view dtype_name(DType t);  // "f32", "i64", ...
bool dtype_is_float(DType t);
bool dtype_is_int(DType t);  // signed or unsigned integer, not bool

// ONNX TensorProto.DataType code <-> DType; nullopt for types the IR does not carry.
std::optional<DType> dtype_from_onnx(int32_t code);
int32_t dtype_to_onnx(DType t);
std::string_view onnx_dtype_name(int32_t code);  // "FLOAT", "STRING", ... for messages

// One element at `p` of type `t`: as a double (any type), as an int64 (integers and bool).
double load_real(DType t, const void* p);
int64_t load_int(DType t, const void* p);
float f16_to_float(uint16_t h);
uint16_t float_to_f16(float f);  // round to nearest even
// Whether every value of `from` converts to `to` as a cast would, without loss of what a data
// set means by it: same type; integer or bool -> any integer or float; float -> float. (Float ->
// integer is not: its fractions would be dropped silently.)
bool dtype_converts(DType from, DType to);
// n elements of `from` at src to `to` at dst (dtype_converts(from, to) must hold).
void convert_elements(DType from, const void* src, DType to, void* dst, int64_t n);

}  // namespace cb
