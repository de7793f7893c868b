#include "importer/tensor_io.h"

#include <onnx/onnx_pb.h>

#include <cctype>
#include <cstdio>
#include <fstream>

#include "runtime/checksum.h"
#include "runtime/error.h"

namespace cb {

void write_tensor_file(const std::string& path, const Tensor& t, const std::string& name) {
  onnx::TensorProto p;
  p.set_name(name);
  p.set_data_type(dtype_to_onnx(t.dtype));
  for (int64_t d : t.dims) p.add_dims(d);
  p.set_raw_data(t.bytes.data(), t.bytes.size());
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f || !p.SerializeToOstream(&f) || !f.flush())
      fail("{}: cannot write the tensor (is the folder writable, is the disk full?)", tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    fail("{}: cannot rename {} into place", path, tmp);
  }
}

std::string output_file_name(const std::string& name) {
  std::string out;
  for (unsigned char c : name) {
    bool safe = (c < 0x80 && std::isalnum(c)) || c == '.' || c == '_' || c == '-';
    out += safe ? std::string(1, static_cast<char>(c)) : fmt::format("%{:02X}", c);
  }
  if (out.size() > 200)
    out = fmt::format("{}~{:016x}", out.substr(0, 180), fnv1a(name.data(), name.size()));
  return out + ".pb";
}

}  // namespace cb
