// Why bytes are not a model (see why_unparsable.h).
#include "importer/why_unparsable.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <string>

#include <fmt/format.h>

namespace cb {

std::string why_unparsable(const std::string& bytes) {
  // Text: only printable ASCII and whitespace in the first KiB.
  size_t head = std::min<size_t>(bytes.size(), 1024), printable = 0;
  for (size_t i = 0; i < head; ++i) {
    auto c = static_cast<unsigned char>(bytes[i]);
    if ((c >= 0x20 && c < 0x7f) || c == '\n' || c == '\r' || c == '\t') ++printable;
  }
  if (printable == head) {
    std::string first = bytes.substr(0, std::min(bytes.find('\n'), size_t{40}));
    return fmt::format(
        "this is a text file, not an ONNX model (it starts with \"{}\"); ONNX models "
        "are binary protobuf files written by an exporter such as "
        "torch.onnx.export or onnx.save",
        first);
  }
  struct Field {
    int number, wire;
    const char* name;
  };
  static constexpr Field kFields[] = {
      {1, 0, "ir_version"},     {2, 2, "producer_name"}, {3, 2, "producer_version"},
      {4, 2, "domain"},         {5, 0, "model_version"}, {6, 2, "doc_string"},
      {7, 2, "graph"},          {8, 2, "opset_import"},  {14, 2, "metadata_props"},
      {20, 2, "training_info"}, {25, 2, "functions"}};
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t size = bytes.size(), pos = 0;
  auto varint = [&](uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos >= size) return false;
      unsigned char b = p[pos++];
      v |= uint64_t{static_cast<unsigned char>(b & 0x7f)} << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  };
  auto truncated = [&](std::string_view where, std::string_view detail) {
    return fmt::format(
        "the file is truncated: it ends {} after {} bytes{}; copy or export the "
        "model again",
        where, size, detail);
  };
  while (pos < size) {
    size_t at = pos;
    uint64_t tag = 0;
    if (!varint(tag)) return truncated("inside a field tag", "");
    const Field* f = nullptr;
    for (const auto& k : kFields)
      if (static_cast<uint64_t>(k.number) == (tag >> 3)) f = &k;
    if (!f || f->wire != static_cast<int>(tag & 7))
      return fmt::format(
          "not an ONNX model: the bytes do not have the layout of an ONNX "
          "ModelProto (at byte {}: field {} with wire type {}); is this the right "
          "file?",
          at, tag >> 3, tag & 7);
    std::string where = fmt::format("inside the model's '{}' field", f->name);
    uint64_t v = 0;
    if (!varint(v)) return truncated(where, "");
    if (f->wire == 2) {
      if (v > size - pos)
        return truncated(where, fmt::format(" ({} of its {} bytes are present)", size - pos, v));
      std::string sub = bytes.substr(pos, v);
      bool ok = true;
      if (f->number == 7)
        ok = onnx::GraphProto().ParseFromString(sub);
      else if (f->number == 8)
        ok = onnx::OperatorSetIdProto().ParseFromString(sub);
      else if (f->number == 20)
        ok = onnx::TrainingInfoProto().ParseFromString(sub);
      else if (f->number == 25)
        ok = onnx::FunctionProto().ParseFromString(sub);
      if (!ok)
        return fmt::format("not a valid ONNX model: its '{}' field (bytes {} to {}) is corrupt",
                           f->name, pos, pos + v);
      pos += v;
    }
  }
  return "not a valid ONNX model: the protobuf does not parse (the file is corrupt or not ONNX)";
}

}  // namespace cb
