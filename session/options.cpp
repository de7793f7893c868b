// Session settings: their text forms and their validation (see options.h).
#include "session/options.h"

#include <fmt/format.h>

#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <string_view>

#include "autodiff/autodiff.h"
#include "runtime/error.h"
#include "session/devices.h"

namespace cb {

namespace {

int64_t parse_size(const std::string& text, std::string_view option, const std::string& arg) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v <= 0)
    fail("{} '{}': '{}' is not a positive size", option, arg, text);
  return v;
}

}  // namespace

std::pair<std::string, std::string> split_pair(const std::string& s, std::string_view option,
                                               std::string_view form) {
  auto eq = s.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == s.size())
    fail("{} '{}': expected {}", option, s, form);
  return {s.substr(0, eq), s.substr(eq + 1)};
}

void add_size_options(ImportOptions& o, const std::vector<std::string>& dims,
                      const std::vector<std::string>& shapes) {
  for (const std::string& s : dims) {
    auto [name, v] = split_pair(s, "--dim", "NAME=N");
    o.dims[name] = parse_size(v, "--dim", s);
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
    o.input_shapes[name] = out;
  }
  o.sizes_hint = "with --dim NAME=N or --input-shape INPUT=AxBxC";
}

std::optional<int> parse_learners(const std::string& s) {
  if (s == "auto") return std::nullopt;
  int n = 0;
  try {
    size_t pos = 0;
    n = std::stoi(s, &pos);
    if (pos != s.size()) throw std::invalid_argument(s);
  } catch (const std::exception&) {
    fail("--learners '{}': expected a number or auto", s);
  }
  if (n < 1) fail("--learners must be at least 1, got {}", n);
  return n;
}

int64_t parse_bytes(const std::string& s) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (const std::exception&) {
    fail("--memory-budget '{}' is not a size (bytes, or with K, M, G)", s);
  }
  std::string unit = s.substr(pos);
  double mult = 1;
  if (unit == "K" || unit == "k" || unit == "KiB")
    mult = 1 << 10;
  else if (unit == "M" || unit == "MiB")
    mult = 1 << 20;
  else if (unit == "G" || unit == "GiB")
    mult = 1 << 30;
  else if (!unit.empty())
    fail("--memory-budget '{}': unknown unit '{}' (K, M, G)", s, unit);
  if (!(v > 0)) fail("--memory-budget must be positive, got '{}'", s);
  return static_cast<int64_t>(v * mult);
}

std::pair<int64_t, int64_t> parse_image_size(const std::string& s) {
  int64_t h = 0, w = 0;
  char x = 0, extra = 0;
  if (std::sscanf(s.c_str(), "%" SCNd64 "%c%" SCNd64 "%c", &h, &x, &w, &extra) != 3 || x != 'x' ||
      h <= 0 || w <= 0 || h > 65536 || w > 65536)
    fail("--image-size '{}': expected HxW, e.g. 224x224", s);
  return {h, w};
}

LossSpec SessionOptions::loss_settings() const {
  LossSpec s;
  s.class_axis = class_axis;
  s.ignore_index = ignore_index;
  s.label_smoothing = label_smoothing;
  s.huber_delta = huber_delta;
  return s;
}

void SessionOptions::validate() const {
  if (model.empty()) fail("no model given");
  RunOptions r = run;
  r.auto_tune = auto_learners;
  r.validate();
  trainer.validate();
  checkpoint.validate();
  if (!is_loss_choice(loss)) fail("unknown --loss '{}' (choices: {})", loss, kLossChoices);
  if (!(label_smoothing >= 0 && label_smoothing < 1))
    fail("--label-smoothing must be in [0, 1), got {}", label_smoothing);
  if (!(huber_delta > 0)) fail("--huber-delta must be positive, got {}", huber_delta);
  if (class_axis != -1 && class_axis < 1)
    fail("--class-axis must be -1 (by the output's rank) or an axis >= 1, got {}", class_axis);
  if (threads < 0) fail("--threads must be positive, got {}", threads);
  if (num_classes < 0 || num_classes == 1)
    fail(
        "--num-classes must be at least 2, got {} (for one output, a regression or a score, keep "
        "the model's head and train it with --loss mse or bce; two classes are --num-classes 2)",
        num_classes);
  if (num_classes && loss == "model")
    fail("--num-classes replaces a classifier; --loss model trains on the model's own loss output");
  if (!(collective_timeout > 0))
    fail("--collective-timeout must be positive, got {}", collective_timeout);
  count_devices(devices);  // a malformed --devices is named here, before anything loads
  if (output_training && output.empty()) fail("--output-training needs --output");
}

}  // namespace cb
