#include "importer/onnx_exporter.h"

#include <onnx/onnx_pb.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "importer/tensor_proto.h"
#include "runtime/error.h"
#include "runtime/shape.h"

namespace cb {

namespace fs = std::filesystem;

namespace {

// Sets `p`'s contents to `bytes` as raw_data, dropping every other way of holding data.
void set_raw(onnx::TensorProto& p, const void* bytes, size_t n) {
  p.clear_float_data();
  p.clear_int32_data();
  p.clear_string_data();
  p.clear_int64_data();
  p.clear_double_data();
  p.clear_uint64_data();
  p.clear_external_data();
  p.clear_data_location();
  p.set_raw_data(bytes, n);
}

}  // namespace

void export_trained(const std::string& original_model_path, const std::string& out_path,
                    const std::map<std::string, Tensor>& trained) {
  std::ifstream f(original_model_path, std::ios::binary);
  if (!f) fail("{}: cannot open the original model to export from", original_model_path);
  std::stringstream ss;
  ss << f.rdbuf();
  onnx::ModelProto m;
  if (!m.ParseFromString(ss.str()))
    fail("{}: not a readable ONNX model (was it changed since training started?)",
         original_model_path);
  fs::path src(original_model_path);
  std::string dir = src.has_parent_path() ? src.parent_path().string() : ".";

  std::set<std::string> done;
  onnx::GraphProto* g = m.mutable_graph();
  for (onnx::TensorProto& init : *g->mutable_initializer()) {
    auto it = trained.find(init.name());
    if (it == trained.end()) {
      if (init.data_location() == onnx::TensorProto::EXTERNAL) {
        TensorPtr t = tensor_from_proto(
            init, fmt::format("initializer '{}' in {}", init.name(), original_model_path), dir);
        set_raw(init, t->bytes.data(), t->bytes.size());
      }
      continue;
    }
    const Tensor& t = it->second;
    auto dt = dtype_from_onnx(init.data_type());
    std::vector<int64_t> dims(init.dims().begin(), init.dims().end());
    if (!dt || *dt != t.dtype)
      fail("{}: initializer '{}' is {} in the model but the trained tensor is {}",
           original_model_path, init.name(), onnx_dtype_name(init.data_type()),
           dtype_name(t.dtype));
    if (dims != t.dims)
      fail("{}: initializer '{}' has shape {} in the model but the trained tensor has {}",
           original_model_path, init.name(), to_string(shape_of(dims)),
           to_string(shape_of(t.dims)));
    if (t.bytes.size() != static_cast<size_t>(t.numel()) * dtype_size(t.dtype))
      throw InternalError(fmt::format("trained tensor '{}' has {} bytes for {} elements",
                                      init.name(), t.bytes.size(), t.numel()));
    set_raw(init, t.bytes.data(), t.bytes.size());
    done.insert(init.name());
  }
  for (const auto& [name, t] : trained)
    if (!done.count(name))
      fail("{}: the model has no initializer '{}' to hold the trained tensor", original_model_path,
           name);

  std::string tmp = out_path + ".tmp";
  {
    std::ofstream o(tmp, std::ios::binary | std::ios::trunc);
    if (!o || !m.SerializeToOstream(&o) || !o.flush()) {
      o.close();
      std::remove(tmp.c_str());
      fail("{}: cannot write the model (is the folder writable, is the disk full?)", tmp);
    }
  }
  if (std::rename(tmp.c_str(), out_path.c_str()) != 0) {
    std::remove(tmp.c_str());
    fail("{}: cannot rename {} into place", out_path, tmp);
  }
}

}  // namespace cb
