#include "runtime/dtype.h"

#include <bit>
#include <cmath>
#include <cstring>

#include "runtime/error.h"

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

float f16_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t float_to_f16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u)
    return static_cast<uint16_t>(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to infinity
  if (ax < 0x38800000u) {  // subnormal (or zero) in f16: add as a float to align the bits
    const float r = std::bit_cast<float>(ax) + 0.5f;
    return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(r) - 0x3f000000u));
  }
  const uint32_t odd = (ax >> 13) & 1u;
  return static_cast<uint16_t>(sign | ((ax + 0xc8000fffu + odd) >> 13));
}

double load_real(DType t, const void* p) {
  switch (t) {
    case DType::F32: {
      float v;
      std::memcpy(&v, p, sizeof v);
      return v;
    }
    case DType::F64: {
      double v;
      std::memcpy(&v, p, sizeof v);
      return v;
    }
    case DType::F16:
    case DType::BF16: {
      uint16_t h;
      std::memcpy(&h, p, sizeof h);
      return t == DType::F16 ? f16_to_float(h) : std::bit_cast<float>(uint32_t(h) << 16);
    }
    default:
      return static_cast<double>(load_int(t, p));
  }
}

int64_t load_int(DType t, const void* p) {
  switch (t) {
    case DType::I64: {
      int64_t v;
      std::memcpy(&v, p, sizeof v);
      return v;
    }
    case DType::I32: {
      int32_t v;
      std::memcpy(&v, p, sizeof v);
      return v;
    }
    case DType::I8:
      return *static_cast<const int8_t*>(p);
    case DType::U8:
      return *static_cast<const uint8_t*>(p);
    case DType::Bool:
      return *static_cast<const uint8_t*>(p) != 0;
    default:
      break;
  }
  throw InternalError(
      fmt::format("load_int of a non-integer element (dtype {})", static_cast<int>(t)));
}

bool dtype_converts(DType from, DType to) {
  if (from == to) return true;
  const bool from_int = dtype_is_int(from) || from == DType::Bool;
  if (from_int) return dtype_is_int(to) || dtype_is_float(to);
  return dtype_is_float(from) && dtype_is_float(to);
}

void convert_elements(DType from, const void* src, DType to, void* dst, int64_t n) {
  CB_CHECK(dtype_converts(from, to));
  const size_t fs = dtype_size(from), ts = dtype_size(to);
  const auto* s = static_cast<const std::byte*>(src);
  auto* d = static_cast<std::byte*>(dst);
  if (from == to) {
    if (n > 0) std::memcpy(d, s, static_cast<size_t>(n) * fs);
    return;
  }
  for (int64_t i = 0; i < n; ++i, s += fs, d += ts) {
    switch (to) {
      case DType::F32: {
        const float v = static_cast<float>(load_real(from, s));
        std::memcpy(d, &v, sizeof v);
        break;
      }
      case DType::F64: {
        const double v = load_real(from, s);
        std::memcpy(d, &v, sizeof v);
        break;
      }
      case DType::F16: {
        const uint16_t v = float_to_f16(static_cast<float>(load_real(from, s)));
        std::memcpy(d, &v, sizeof v);
        break;
      }
      case DType::BF16: {  // round to nearest even
        const uint32_t x = std::bit_cast<uint32_t>(static_cast<float>(load_real(from, s)));
        const uint16_t v = static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
        std::memcpy(d, &v, sizeof v);
        break;
      }
      case DType::I64: {
        const int64_t v = load_int(from, s);
        std::memcpy(d, &v, sizeof v);
        break;
      }
      case DType::I32: {
        const auto v = static_cast<int32_t>(load_int(from, s));
        std::memcpy(d, &v, sizeof v);
        break;
      }
      case DType::I8:
      case DType::U8:
      case DType::Bool: {
        const int64_t v = load_int(from, s);
        const auto b = static_cast<uint8_t>(to == DType::Bool ? v != 0 : v);
        std::memcpy(d, &b, 1);
        break;
      }
    }
  }
}

}  // namespace cb
