#include "runtime/tensor.h"

#include <bit>
#include <cstring>

#include "runtime/error.h"

namespace cb {

namespace {
float half_to_float(uint16_t h) {
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
}  // namespace

int64_t Tensor::int_at(int64_t i) const {
  switch (dtype) {
    case DType::I64:
      return data<int64_t>()[i];
    case DType::I32:
      return data<int32_t>()[i];
    case DType::I8:
      return data<int8_t>()[i];
    case DType::U8:
      return data<uint8_t>()[i];
    case DType::Bool:
      return data<uint8_t>()[i] != 0;
    default:
      break;
  }
  throw InternalError(fmt::format("int_at on a {} tensor", dtype_name(dtype)));
}

double Tensor::real_at(int64_t i) const {
  switch (dtype) {
    case DType::F32:
      return data<float>()[i];
    case DType::F64:
      return data<double>()[i];
    case DType::F16:
      return half_to_float(data<uint16_t>()[i]);
    case DType::BF16:
      return std::bit_cast<float>(uint32_t(data<uint16_t>()[i]) << 16);
    default:
      return static_cast<double>(int_at(i));
  }
}

}  // namespace cb
