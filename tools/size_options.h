// --dim NAME=N and --input-shape NAME=AxBxC, shared by cb-run and cb-inspect: concrete sizes for a
// model's symbolic dimensions (ImportOptions::dims / input_shapes).
#pragma once

#include <charconv>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "importer/onnx_importer.h"
#include "runtime/error.h"

namespace cb::tools {

// "NAME=VALUE" of a repeated option.
inline std::pair<std::string, std::string> split_pair(const std::string& s, std::string_view option,
                                                      std::string_view form) {
  auto eq = s.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == s.size())
    fail("{} '{}': expected {}", option, s, form);
  return {s.substr(0, eq), s.substr(eq + 1)};
}

inline int64_t parse_size(const std::string& text, std::string_view option,
                          const std::string& arg) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v <= 0)
    fail("{} '{}': '{}' is not a positive size", option, arg, text);
  return v;
}

inline void add_size_options(ImportOptions& opts, const std::vector<std::string>& dims,
                             const std::vector<std::string>& shapes) {
  for (const std::string& s : dims) {
    auto [name, v] = split_pair(s, "--dim", "NAME=N");
    opts.dims[name] = parse_size(v, "--dim", s);
  }
  for (const std::string& s : shapes) {
    auto [name, v] = split_pair(s, "--input-shape", "NAME=AxBxC");
    std::vector<int64_t> out;
    for (size_t at = 0;;) {
      size_t x = v.find('x', at);
      out.push_back(
          parse_size(v.substr(at, x == std::string::npos ? x : x - at), "--input-shape", s));
      if (x == std::string::npos) break;
      at = x + 1;
    }
    opts.input_shapes[name] = out;
  }
  opts.sizes_hint = "with --dim NAME=N or --input-shape INPUT=AxBxC";
}

}  // namespace cb::tools
