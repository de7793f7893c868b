// Checkpoints (see checkpoint.h).
#include "sma/checkpoint.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "runtime/checksum.h"
#include "runtime/copy_bytes.h"
#include "runtime/error.h"

namespace cb {

namespace fs = std::filesystem;

namespace {

constexpr const char* kMagic = "crossbow-checkpoint";
// 2 added model_path, loss and model_is; 3 the weight average (ema<d>.params, ema<d>.state, one
// per device, present with --ema); versions 1 and 2 are still read.
constexpr int kVersion = 3;

std::string hexf(double v) { return fmt::format("{:a}", v); }

// One line of free text (no newlines).
std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\r', ' ');
  return s;
}

// Writes `data` to `path` and fsyncs it; throws naming the file and the reason.
void write_synced(const fs::path& path, const void* data, size_t n) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("{}: cannot create the file: {}", path.string(), std::strerror(errno));
  const auto* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < n) {
    const ssize_t w = ::write(fd, p + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int e = w < 0 ? errno : ENOSPC;
      ::close(fd);
      fail("{}: write failed after {} of {} bytes: {}", path.string(), done, n, std::strerror(e));
    }
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    fail("{}: fsync failed: {}", path.string(), std::strerror(e));
  }
  if (::close(fd) != 0) fail("{}: close failed: {}", path.string(), std::strerror(errno));
}

void fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open the folder to sync it: {}", dir.string(), std::strerror(errno));
  const int r = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  if (r != 0) fail("{}: fsync failed: {}", dir.string(), std::strerror(e));
}

std::string name_of(int64_t step) { return fmt::format("ckpt-{:010d}", step); }

// Puts the complete folder `tmp` at `final_path`. A checkpoint of the same step already there (a
// run resumed at its end writes its last one again) is swapped out in one step (renameat2
// RENAME_EXCHANGE) and only then removed, from under its .tmp name: removing it first left, to a
// crash in between, a half-removed newest checkpoint, or with --keep 1 none at all. Where the
// filesystem cannot exchange, it is removed first.
void put_in_place(const fs::path& tmp, const fs::path& final_path) {
  std::error_code ec;
  if (fs::exists(final_path, ec)) {
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_path.c_str(), RENAME_EXCHANGE) == 0) {
      fs::remove_all(tmp, ec);  // the old one; a crash here leaves a .tmp, ignored
      return;
    }
    fs::remove_all(final_path, ec);
  }
  fs::rename(tmp, final_path, ec);
  if (ec) fail("{}: cannot rename {} to it: {}", final_path.string(), tmp.string(), ec.message());
}

struct Reader {
  std::string path;  // for messages
  std::vector<std::string> tokens;
  size_t at = 0;
  const std::string& next(const char* what) {
    if (at >= tokens.size()) fail("{}: the manifest ends before {}", path, what);
    return tokens[at++];
  }
  int64_t integer(const char* what) {
    const std::string& t = next(what);
    try {
      size_t pos = 0;
      const long long v = std::stoll(t, &pos);
      if (pos == t.size()) return v;
    } catch (const std::exception&) {
    }
    fail("{}: {} is '{}', not an integer", path, what, t);
  }
  double real(const char* what) {
    const std::string& t = next(what);
    char* end = nullptr;
    const double v = std::strtod(t.c_str(), &end);
    if (t.empty() || end != t.c_str() + t.size())
      fail("{}: {} is '{}', not a number", path, what, t);
    return v;
  }
  uint32_t hex32(const char* what) {  // a CRC-32: exactly 8 hex digits
    const std::string& t = next(what);
    if (t.size() == 8 && t.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos)
      return static_cast<uint32_t>(std::stoul(t, nullptr, 16));
    fail("{}: {} is '{}', not 8 hex digits", path, what, t);
  }
  void expect(const char* word) {
    const std::string& t = next(word);
    if (t != word) fail("{}: expected '{}' in the manifest, found '{}'", path, word, t);
  }
};

// The manifest's lines (without the last "end CRC" line), after checking that CRC.
// A checkpoint's file: regular (a FIFO would block the reader).
void require_file(const fs::path& file) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec))
    fail("{}: missing or not a regular file: the checkpoint is incomplete", file.string());
}

std::vector<std::string> manifest_lines(const fs::path& file) {
  require_file(file);
  std::ifstream f(file, std::ios::binary);
  if (!f) fail("{}: cannot open the manifest", file.string());
  std::string text((std::istreambuf_iterator<char>(f)), {});
  const size_t last = text.rfind("\nend ");
  if (last == std::string::npos)
    fail("{}: no final checksum line: the checkpoint is incomplete or corrupt", file.string());
  const std::string body = text.substr(0, last + 1);
  const std::string tail = text.substr(last + 5);
  // Exactly "end XXXXXXXX\n": anything shorter is a cut file.
  uint32_t want = 0;
  size_t used = 0;
  try {
    want = static_cast<uint32_t>(std::stoul(tail, &used, 16));
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != 8 || tail.size() != 9 || tail[8] != '\n')
    fail(
        "{}: the final checksum line is cut or unreadable: the checkpoint is incomplete or corrupt",
        file.string());
  if (crc32_of(body.data(), body.size()) != want)
    fail("{}: the manifest fails its checksum: the checkpoint is corrupt", file.string());
  std::vector<std::string> lines;
  std::istringstream in(body);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

std::vector<std::string> split(const std::string& l) {
  std::vector<std::string> t;
  std::istringstream in(l);
  for (std::string w; in >> w;) t.push_back(w);
  return t;
}

TrainState read_one(const fs::path& dir, CheckpointMeta& meta) {
  const fs::path mf = dir / "MANIFEST";
  const std::vector<std::string> lines = manifest_lines(mf);
  TrainState s;
  ModelState& m = s.model;
  LoopState& lp = s.loop;
  struct T {
    std::string name;
    uint64_t offset, count;
    uint32_t crc;
  };
  std::vector<T> tensors;
  uint64_t bin_bytes = 0;
  uint32_t bin_crc = 0;
  std::optional<TunerOptions> topts;
  AutoTuner::State tstate;
  bool have_tuner = false;
  int64_t version = 0;
  for (const std::string& l : lines) {
    const size_t sp = l.find(' ');
    const std::string key = l.substr(0, sp);
    const std::string rest = sp == std::string::npos ? "" : l.substr(sp + 1);
    Reader r{mf.string(), split(rest)};
    if (key == kMagic) {
      const int64_t v = r.integer("the version");
      if (v < 1 || v > kVersion)
        fail("{}: checkpoint format {}, this crossbow reads 1 to {}", mf.string(), rest, kVersion);
      version = v;
    } else if (key == "model_path") {
      meta.model_path = rest;
    } else if (key == "loss") {
      meta.loss = rest;
    } else if (key == "head") {
      meta.head = rest;
    } else if (key == "freeze") {
      meta.freeze.push_back(rest);
    } else if (key == "model_is") {
      const std::string& w = r.next("mean or z");
      if (w != "mean" && w != "z") fail("{}: model_is '{}': expected mean or z", mf.string(), w);
      m.model_is_mean = w == "mean";
    } else if (key == "model_hash") {
      meta.model_hash = rest;
    } else if (key == "data") {
      meta.data = rest;
    } else if (key == "command") {
      meta.command = rest;
    } else if (key == "batch") {
      meta.batch = r.integer("batch");
    } else if (key == "learners_per_device") {
      m.learners_per_device = static_cast<int>(r.integer(key.c_str()));
    } else if (key == "model_steps") {
      m.steps = r.integer(key.c_str());
    } else if (key == "learner") {
      const int64_t i = r.integer("the learner");
      r.expect("steps");
      if (i < 0 || i > 1 << 20) fail("{}: learner index {} out of range", mf.string(), i);
      if (m.learners.size() <= static_cast<size_t>(i))
        m.learners.resize(static_cast<size_t>(i) + 1);
      m.learners[static_cast<size_t>(i)].steps = r.integer("its steps");
    } else if (key == "loop") {
      lp.started = true;
      lp.step = r.integer("step");
      lp.consumed = r.integer("consumed");
      lp.decays = r.integer("decays");
      lp.prev_lr = r.real("prev_lr");
      lp.since_change = r.integer("since_change");
      lp.tune_s = r.real("tune_s");
      lp.tune_images = r.integer("tune_images");
    } else if (key == "tuner_options") {
      TunerOptions o;
      o.threshold = r.real("threshold");
      o.noise_factor = r.real("noise_factor");
      o.warmup_steps = r.integer("warmup");
      o.window_steps = r.integer("window");
      o.windows = static_cast<int>(r.integer("windows"));
      o.max_learners = static_cast<int>(r.integer("max_learners"));
      topts = o;
    } else if (key == "tuner") {
      have_tuner = true;
      tstate.k = static_cast<int>(r.integer("k"));
      tstate.best_k = static_cast<int>(r.integer("best_k"));
      tstate.best = r.real("best");
      tstate.best_spread = r.real("best_spread");
      tstate.done = r.integer("done") != 0;
      const int64_t n = r.integer("windows");
      if (n < 0 || n > 1 << 20) fail("{}: {} tuner windows", mf.string(), n);
      for (int64_t i = 0; i < n; ++i) tstate.windows.push_back(r.real("a window"));
    } else if (key == "tensor") {
      T t;
      t.name = r.next("the tensor's name");
      t.offset = static_cast<uint64_t>(r.integer("its offset"));
      t.count = static_cast<uint64_t>(r.integer("its length"));
      t.crc = r.hex32("its checksum");
      tensors.push_back(t);
    } else if (key == "tensors_bin") {
      bin_bytes = static_cast<uint64_t>(r.integer("its size"));
      bin_crc = r.hex32("its checksum");
    } else {
      fail("{}: unknown manifest line '{}'", mf.string(), l.substr(0, 60));
    }
  }
  if (have_tuner) {
    if (!topts) fail("{}: tuner state without its options", mf.string());
    AutoTuner t(*topts, std::max(1, tstate.k));
    t.restore(tstate);
    lp.tuner.emplace(std::move(t));
  }
  // The tensors.
  const fs::path bin = dir / "tensors.bin";
  require_file(bin);
  std::ifstream f(bin, std::ios::binary);
  if (!f) fail("{}: missing or unreadable", bin.string());
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), {});
  if (bytes.size() != bin_bytes)
    fail("{}: {} bytes, the manifest says {}: the checkpoint is truncated or corrupt", bin.string(),
         bytes.size(), bin_bytes);
  if (crc32_of(bytes.data(), bytes.size()) != bin_crc)
    fail("{}: fails its checksum: the checkpoint is corrupt", bin.string());
  for (const T& t : tensors) {
    if (t.offset > bytes.size() || t.count > (bytes.size() - t.offset) / sizeof(float))
      fail("{}: tensor {} lies outside tensors.bin", mf.string(), t.name);
    const char* p = bytes.data() + t.offset;
    if (crc32_of(p, t.count * sizeof(float)) != t.crc)
      fail("{}: tensor {} fails its checksum: the checkpoint is corrupt", bin.string(), t.name);
    std::vector<float> v(t.count);
    copy_bytes(v.data(), p, t.count * sizeof(float));  // v.data() is null when t.count == 0
    if (t.name == "z") {
      m.z = std::move(v);
    } else if (t.name == "z_prev") {
      m.z_prev = std::move(v);
    } else if (t.name.rfind("ema", 0) == 0) {
      const size_t dot = t.name.find('.');
      int64_t d = -1;
      try {
        if (dot != std::string::npos && dot > 3) d = std::stoll(t.name.substr(3, dot - 3));
      } catch (const std::exception&) {
      }
      const std::string part = dot == std::string::npos ? "" : t.name.substr(dot + 1);
      if (d < 0 || d > 1 << 16 || (part != "params" && part != "state"))
        fail("{}: unknown tensor {}", mf.string(), t.name);
      auto& parts = part == "params" ? m.ema : m.ema_state;
      if (parts.size() <= static_cast<size_t>(d)) parts.resize(static_cast<size_t>(d) + 1);
      parts[static_cast<size_t>(d)] = std::move(v);
    } else {
      const size_t dot = t.name.find('.');
      int64_t i = -1;
      try {
        if (t.name.rfind("learner", 0) == 0 && dot != std::string::npos)
          i = std::stoll(t.name.substr(7, dot - 7));
      } catch (const std::exception&) {
      }
      if (i < 0 || static_cast<size_t>(i) >= m.learners.size())
        fail("{}: unknown tensor {}", mf.string(), t.name);
      LearnerState& ls = m.learners[static_cast<size_t>(i)];
      const std::string part = t.name.substr(dot + 1);
      if (part == "params")
        ls.params = std::move(v);
      else if (part == "opt1")
        ls.opt1 = std::move(v);
      else if (part == "opt2")
        ls.opt2 = std::move(v);
      else if (part == "state")
        ls.state = std::move(v);
      else
        fail("{}: unknown tensor {}", mf.string(), t.name);
    }
  }
  if (!lp.started || m.learners_per_device < 1 || m.learners.empty() || m.z.empty())
    fail("{}: the manifest lacks the loop position or the model", mf.string());
  if (m.ema.size() != m.ema_state.size())
    fail("{}: the weight average has {} parameter parts and {} statistics parts", mf.string(),
         m.ema.size(), m.ema_state.size());
  // Version 1 did not say; alpha is 0 by default only with one learner in all.
  if (version == 1) m.model_is_mean = m.learners.size() == 1;
  return s;
}

}  // namespace

namespace {
constexpr std::pair<LossKind, const char*> kLossNames[] = {
    {LossKind::SoftmaxCrossEntropy, "cross-entropy"},
    {LossKind::MeanSquaredError, "mse"},
    {LossKind::L1, "l1"},
    {LossKind::Huber, "huber"},
    {LossKind::BinaryCrossEntropy, "bce"},
    {LossKind::ModelOutput, "model"},
};
}  // namespace

std::string loss_record(const LossSpec& l) {
  std::string kind;
  for (const auto& [k, name] : kLossNames)
    if (k == l.kind) kind = name;
  const LossSpec d;
  if (l.class_axis != d.class_axis) kind += fmt::format(";class_axis={}", l.class_axis);
  if (l.ignore_index != d.ignore_index)
    kind +=
        l.ignore_index ? fmt::format(";ignore_index={}", *l.ignore_index) : ";ignore_index=none";
  // {} prints the shortest form that reads back exactly.
  if (l.label_smoothing != d.label_smoothing)
    kind += fmt::format(";label_smoothing={}", l.label_smoothing);
  if (l.huber_delta != d.huber_delta) kind += fmt::format(";huber_delta={}", l.huber_delta);
  return l.output.empty() ? kind : fmt::format("{} {}", kind, l.output);
}

LossSpec parse_loss_record(const std::string& s, const std::string& where) {
  const size_t sp = s.find(' ');
  const std::string head = s.substr(0, sp);
  const std::string kind = head.substr(0, head.find(';'));
  LossSpec l;
  bool known = false;
  for (const auto& [k, name] : kLossNames)
    if (kind == name) {
      l.kind = k;
      known = true;
    }
  if (!known) fail("{}: loss '{}': expected cross-entropy, mse, l1, huber, bce or model", where, s);
  for (size_t at = head.find(';'); at != std::string::npos;) {
    const size_t next = head.find(';', at + 1);
    const std::string kv = head.substr(at + 1, next == std::string::npos ? next : next - at - 1);
    at = next;
    const size_t eq = kv.find('=');
    const std::string key = kv.substr(0, eq),
                      value = eq == std::string::npos ? "" : kv.substr(eq + 1);
    try {
      if (key == "class_axis")
        l.class_axis = std::stoll(value);
      else if (key == "ignore_index")
        l.ignore_index = value == "none" ? std::nullopt : std::optional<int64_t>(std::stoll(value));
      else if (key == "label_smoothing")
        l.label_smoothing = std::stod(value);
      else if (key == "huber_delta")
        l.huber_delta = std::stod(value);
      else
        fail("{}: loss '{}': unknown setting '{}'", where, s, key);
    } catch (const std::logic_error&) {  // std::stoll / std::stod: not a number
      fail("{}: loss '{}': setting '{}' is not a number", where, s, kv);
    }
  }
  if (sp != std::string::npos) l.output = s.substr(sp + 1);
  return l;
}

std::string file_hash(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot read the file to hash it", path);
  uint64_t h = kFnv1aStart;
  char buf[1 << 16];
  while (f.read(buf, sizeof buf) || f.gcount() > 0)
    h = fnv1a(buf, static_cast<size_t>(f.gcount()), h);
  return fmt::format("{:016x}", h);
}

std::string write_checkpoint(const std::string& dir_s, const TrainState& s,
                             const CheckpointMeta& meta) {
  const fs::path dir(dir_s);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("{}: cannot create the checkpoint folder: {}", dir_s, ec.message());
  const ModelState& m = s.model;
  const LoopState& lp = s.loop;
  const fs::path final_path = dir / name_of(lp.step);
  const fs::path tmp = dir / (name_of(lp.step) + ".tmp");
  fs::remove_all(tmp, ec);
  fs::create_directory(tmp, ec);
  if (ec) fail("{}: cannot create the folder: {}", tmp.string(), ec.message());

  std::vector<char> bin;
  std::string text = fmt::format("{} {}\n", kMagic, kVersion);
  text += fmt::format("model_hash {}\ndata {}\nbatch {}\ncommand {}\n", meta.model_hash,
                      one_line(meta.data), meta.batch, one_line(meta.command));
  if (!meta.model_path.empty()) text += fmt::format("model_path {}\n", one_line(meta.model_path));
  if (!meta.loss.empty()) text += fmt::format("loss {}\n", one_line(meta.loss));
  if (!meta.head.empty()) text += fmt::format("head {}\n", one_line(meta.head));
  for (const std::string& f : meta.freeze) text += fmt::format("freeze {}\n", one_line(f));
  text += fmt::format("model_is {}\n", m.model_is_mean ? "mean" : "z");
  text += fmt::format("learners_per_device {}\nmodel_steps {}\n", m.learners_per_device, m.steps);
  text += fmt::format("loop {} {} {} {} {} {} {}\n", lp.step, lp.consumed, lp.decays,
                      hexf(lp.prev_lr), lp.since_change, hexf(lp.tune_s), lp.tune_images);
  if (lp.tuner) {
    const TunerOptions& o = lp.tuner->options();
    text +=
        fmt::format("tuner_options {} {} {} {} {} {}\n", hexf(o.threshold), hexf(o.noise_factor),
                    o.warmup_steps, o.window_steps, o.windows, o.max_learners);
    const AutoTuner::State t = lp.tuner->state();
    text += fmt::format("tuner {} {} {} {} {} {}", t.k, t.best_k, hexf(t.best), hexf(t.best_spread),
                        t.done ? 1 : 0, t.windows.size());
    for (double w : t.windows) text += " " + hexf(w);
    text += "\n";
  }
  auto add = [&](const std::string& name, const std::vector<float>& v) {
    const size_t off = bin.size();
    const auto* p = reinterpret_cast<const char*>(v.data());
    bin.insert(bin.end(), p, p + v.size() * sizeof(float));
    text += fmt::format("tensor {} {} {} {:08x}\n", name, off, v.size(),
                        crc32_of(v.data(), v.size() * sizeof(float)));
  };
  add("z", m.z);
  add("z_prev", m.z_prev);
  for (size_t i = 0; i < m.learners.size(); ++i) {
    const LearnerState& l = m.learners[i];
    text += fmt::format("learner {} steps {}\n", i, l.steps);
    add(fmt::format("learner{}.params", i), l.params);
    add(fmt::format("learner{}.opt1", i), l.opt1);
    if (!l.opt2.empty()) add(fmt::format("learner{}.opt2", i), l.opt2);
    add(fmt::format("learner{}.state", i), l.state);
  }
  for (size_t d = 0; d < m.ema.size(); ++d) {
    add(fmt::format("ema{}.params", d), m.ema[d]);
    add(fmt::format("ema{}.state", d), m.ema_state[d]);
  }
  text += fmt::format("tensors_bin {} {:08x}\n", bin.size(), crc32_of(bin.data(), bin.size()));
  text += fmt::format("end {:08x}\n", crc32_of(text.data(), text.size()));

  try {
    write_synced(tmp / "tensors.bin", bin.data(), bin.size());
    write_synced(tmp / "MANIFEST", text.data(), text.size());
    fsync_dir(tmp);
  } catch (const Error&) {
    fs::remove_all(tmp, ec);  // give the space back; the previous checkpoints are untouched
    throw;
  }
  put_in_place(tmp, final_path);
  fsync_dir(dir);
  return final_path.string();
}

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.rfind("ckpt-", 0) == 0 && n.size() == 15 && it->is_directory())
      out.push_back(it->path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

LoadedCheckpoint load_checkpoint(const std::string& path) {
  LoadedCheckpoint r;
  std::error_code ec;
  if (fs::is_regular_file(fs::path(path) / "MANIFEST", ec)) {
    r.path = path;
    r.state = read_one(path, r.meta);
    return r;
  }
  if (!fs::is_directory(path, ec)) fail("{}: no such checkpoint or checkpoint folder", path);
  std::vector<std::string> all = list_checkpoints(path);
  if (all.empty()) fail("{}: no checkpoint in this folder (ckpt-NNNNNNNNNN/ folders)", path);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      r.state = read_one(*it, r.meta);
      r.path = *it;
      return r;
    } catch (const Error& e) {
      r.refused.push_back(e.what());
    }
  }
  std::string why;
  for (const std::string& w : r.refused) why += "\n  " + w;
  fail("{}: every checkpoint fails its checks:{}", path, why);
}

void prune_checkpoints(const std::string& dir, int keep) {
  CB_CHECK(keep >= 1);
  std::vector<std::string> all = list_checkpoints(dir);
  std::error_code ec;
  // Each is renamed to its .tmp name before it is removed: a crash while removing leaves a .tmp
  // (ignored), never a half-removed folder under a checkpoint's name.
  for (size_t i = 0; i + static_cast<size_t>(keep) < all.size(); ++i) {
    fs::rename(all[i], all[i] + ".tmp", ec);
    const std::string gone = ec ? all[i] : all[i] + ".tmp";
    fs::remove_all(gone, ec);
  }
  // .tmp folders left by a crash (in a write or here): the run that prunes holds the folder's
  // lock and has no write in progress, so none of them is being written.
  std::vector<fs::path> stale;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.rfind("ckpt-", 0) == 0 && n.size() == 19 && n.ends_with(".tmp"))
      stale.push_back(it->path());
  }
  for (const fs::path& p : stale) fs::remove_all(p, ec);
}

}  // namespace cb
