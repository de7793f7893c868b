#include "importer/tensor_proto.h"

#include <filesystem>
#include <fstream>
#include <limits>

#include "runtime/copy_bytes.h"
#include "runtime/error.h"

namespace cb {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kMaxTensorBytes = int64_t{1} << 40;  // 1 TiB: anything above is a broken file

// Copies typed repeated fields into `out`, converting each element to the tensor's storage.
template <typename Src, typename Dst>
void copy_typed(const google::protobuf::RepeatedField<Src>& src, std::vector<std::byte>& out) {
  out.resize(static_cast<size_t>(src.size()) * sizeof(Dst));
  auto* d = reinterpret_cast<Dst*>(out.data());
  for (int i = 0; i < src.size(); ++i) d[i] = static_cast<Dst>(src.Get(i));
}

void read_external(const onnx::TensorProto& t, const std::string& what, const std::string& dir,
                   size_t expected, std::vector<std::byte>& out) {
  std::string location;
  int64_t offset = 0, length = -1;
  bool has_length = false;
  for (const auto& kv : t.external_data()) {
    try {
      if (kv.key() == "location")
        location = kv.value();
      else if (kv.key() == "offset")
        offset = std::stoll(kv.value());
      else if (kv.key() == "length")
        length = std::stoll(kv.value()), has_length = true;
    } catch (const std::exception&) {
      fail("{}: external data '{}' has a non-numeric value '{}'", what, kv.key(), kv.value());
    }
  }
  if (location.empty()) fail("{}: external data has no 'location'", what);
  if (dir.empty())
    fail("{}: external data '{}' cannot be read: model has no folder", what, location);
  fs::path rel(location);
  std::error_code ec;
  fs::path base = fs::weakly_canonical(fs::path(dir), ec);
  fs::path full = fs::weakly_canonical(base / rel, ec);
  auto [b_end, f_it] = std::mismatch(base.begin(), base.end(), full.begin(), full.end());
  if (rel.is_absolute() || b_end != base.end() || full == base)
    fail(
        "{}: external data path '{}' points outside the model's folder '{}'; crossbow only "
        "reads external data next to the model (move the file there and use a relative path)",
        what, location, dir);
  if (fs::exists(full, ec) && !fs::is_regular_file(full, ec))
    fail("{}: external data '{}' is not a regular file (a folder, pipe or device?)", what,
         full.string());
  std::ifstream f(full, std::ios::binary);
  if (!f) fail("{}: cannot open external data file '{}'", what, full.string());
  f.seekg(0, std::ios::end);
  auto size = static_cast<int64_t>(f.tellg());
  if (offset < 0 || (has_length && length < 0))
    fail("{}: external data offset {} / length {} must not be negative", what, offset, length);
  if (!has_length) length = size - offset;
  if (offset > size || length > size - offset)
    fail("{}: external data range [{}, {}+{}) lies beyond the end of '{}' ({} bytes)", what, offset,
         offset, length, full.string(), size);
  if (static_cast<size_t>(length) != expected)
    fail("{}: external data holds {} bytes, the shape needs {}", what, length, expected);
  out.resize(expected);
  f.seekg(offset);
  f.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(expected));
  if (!f)
    fail("{}: reading {} bytes of external data from '{}' failed", what, expected, full.string());
}

}  // namespace

TensorPtr tensor_from_proto(const onnx::TensorProto& t, const std::string& what,
                            const std::string& dir) {
  auto dt = dtype_from_onnx(t.data_type());
  if (!dt)
    fail(
        "{}: element type {} ({}) is not supported; crossbow tensors are f32, f16, bf16, f64, "
        "i64, i32, i8, u8 or bool",
        what, onnx_dtype_name(t.data_type()), t.data_type());
  auto out = std::make_shared<Tensor>();
  out->dtype = *dt;
  // Every dim and the byte count stay <= 1 TiB (also with a zero dim elsewhere), which keeps all
  // later shape arithmetic far from int64 overflow.
  int64_t numel = 1;
  bool overflow = false;
  size_t esize = dtype_size(*dt);
  for (int i = 0; i < t.dims_size(); ++i) {
    int64_t d = t.dims(i);
    if (d < 0)
      fail("{}: dims [{}] have a negative dimension {} at axis {}; the file is corrupt", what,
           fmt::join(t.dims(), ","), d, i);
    overflow |= d > kMaxTensorBytes || (d != 0 && numel > kMaxTensorBytes / d);
    if (!overflow) numel *= d;
    out->dims.push_back(d);
  }
  if (overflow || numel > kMaxTensorBytes / static_cast<int64_t>(esize))
    fail("{}: dims [{}] overflow: the tensor would be larger than 1 TiB; the file is corrupt", what,
         fmt::join(t.dims(), ","));
  size_t expected = static_cast<size_t>(numel) * esize;
  auto mismatch = [&](std::string_view src, size_t have) {
    fail(
        "{}: {} holds {} bytes but dims [{}] of {} need {} bytes; the file is corrupt or was "
        "written with a different shape",
        what, src, have, fmt::join(t.dims(), ","), dtype_name(*dt), expected);
  };
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    read_external(t, what, dir, expected, out->bytes);
    return out;
  }
  if (t.has_raw_data()) {
    if (t.raw_data().size() != expected) mismatch("raw_data", t.raw_data().size());
    out->bytes.resize(expected);
    copy_bytes(out->bytes.data(), t.raw_data().data(), expected);
    return out;
  }
  auto typed_count = [&](int n, std::string_view field) {
    if (static_cast<int64_t>(n) != numel)
      fail("{}: {} holds {} values but dims [{}] need {}", what, field, n, fmt::join(t.dims(), ","),
           numel);
  };
  switch (*dt) {
    case DType::F32:
      typed_count(t.float_data_size(), "float_data");
      copy_typed<float, float>(t.float_data(), out->bytes);
      break;
    case DType::F64:
      typed_count(t.double_data_size(), "double_data");
      copy_typed<double, double>(t.double_data(), out->bytes);
      break;
    case DType::I64:
      typed_count(t.int64_data_size(), "int64_data");
      copy_typed<int64_t, int64_t>(t.int64_data(), out->bytes);
      break;
    case DType::I32:
      typed_count(t.int32_data_size(), "int32_data");
      copy_typed<int32_t, int32_t>(t.int32_data(), out->bytes);
      break;
    case DType::I8:
      typed_count(t.int32_data_size(), "int32_data");
      copy_typed<int32_t, int8_t>(t.int32_data(), out->bytes);
      break;
    case DType::U8:
    case DType::Bool:
      typed_count(t.int32_data_size(), "int32_data");
      copy_typed<int32_t, uint8_t>(t.int32_data(), out->bytes);
      break;
    case DType::F16:
    case DType::BF16:
      typed_count(t.int32_data_size(), "int32_data");
      copy_typed<int32_t, uint16_t>(t.int32_data(), out->bytes);
      break;
  }
  return out;
}

}  // namespace cb
