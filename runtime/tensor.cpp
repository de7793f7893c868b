#include "runtime/tensor.h"

#include <bit>
#include <cstring>

#include "runtime/error.h"

namespace cb {

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
      return f16_to_float(data<uint16_t>()[i]);
    case DType::BF16:
      return std::bit_cast<float>(uint32_t(data<uint16_t>()[i]) << 16);
    default:
      return static_cast<double>(int_at(i));
  }
}

}  // namespace cb
