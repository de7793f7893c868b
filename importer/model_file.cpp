// Model and tensor files read from disk: import_model and read_tensor_file (onnx_importer.h).
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "importer/onnx_importer.h"
#include "importer/tensor_proto.h"
#include "runtime/error.h"

namespace cb {

namespace fs = std::filesystem;

ImportResult import_model(const std::string& path, const ImportOptions& opts) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) fail("{}: is a folder, expected an .onnx file", path);
  // Not a FIFO, socket or device: reading one would block or never end.
  if (fs::exists(path, ec) && !fs::is_regular_file(path, ec))
    fail("{}: not a regular file (a pipe, socket or device?); expected an .onnx file", path);
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open the file (does it exist and is it readable?)", path);
  std::stringstream ss;
  ss << f.rdbuf();
  fs::path p(path);
  std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  return import_model_bytes(ss.str(), path, dir, opts);
}

TensorPtr read_tensor_file(const std::string& path) {
  std::error_code ec;
  if (fs::exists(path, ec) && !fs::is_regular_file(path, ec))
    fail("{}: not a regular file (a folder, pipe or device?); expected a TensorProto file", path);
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open the tensor file", path);
  std::stringstream ss;
  ss << f.rdbuf();
  onnx::TensorProto t;
  if (!t.ParseFromString(ss.str())) fail("{}: not a valid ONNX TensorProto", path);
  fs::path p(path);
  return tensor_from_proto(t, path, p.has_parent_path() ? p.parent_path().string() : ".");
}

}  // namespace cb
