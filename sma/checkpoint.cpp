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
#include <map>
#include <optional>
#include <set>
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
// per device, present with --ema); 4 the job's layout ("job PROCESSES DEVICES") and the parts of
// a job of several processes (tensors-<r>.bin, "part R BYTES CRC", a tensor's part after its
// checksum); versions 1 to 3 are still read.
constexpr int kVersion = 4;

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

// A part of a checkpoint: tensors.bin (part 0) or tensors-<r>.bin, each process's.
std::string part_file(int64_t r) {
  return r == 0 ? std::string("tensors.bin") : fmt::format("tensors-{}.bin", r);
}

// A checkpoint's MANIFEST, read and checked; the tensors not yet.
struct Manifest {
  fs::path dir, file;
  int64_t version = 0;
  TrainState s;                        // everything but the tensors: each learner's steps, the loop
  int64_t processes = 1, devices = 0;  // devices per process (0: not recorded, version < 4)
  struct T {
    std::string name;
    uint64_t offset, count;
    uint32_t crc;
    int64_t part;
  };
  std::vector<T> tensors;
  std::map<int64_t, std::pair<uint64_t, uint32_t>> parts;  // part: bytes, CRC-32
};

Manifest parse_manifest(const fs::path& dir, CheckpointMeta& meta) {
  Manifest mf;
  mf.dir = dir;
  mf.file = dir / "MANIFEST";
  const std::string where = mf.file.string();
  const std::vector<std::string> lines = manifest_lines(mf.file);
  ModelState& m = mf.s.model;
  LoopState& lp = mf.s.loop;
  std::optional<TunerOptions> topts;
  AutoTuner::State tstate;
  bool have_tuner = false;
  for (const std::string& l : lines) {
    const size_t sp = l.find(' ');
    const std::string key = l.substr(0, sp);
    const std::string rest = sp == std::string::npos ? "" : l.substr(sp + 1);
    Reader r{where, split(rest)};
    if (key == kMagic) {
      const int64_t v = r.integer("the version");
      if (v < 1 || v > kVersion)
        fail("{}: checkpoint format {}, this crossbow reads 1 to {}", where, rest, kVersion);
      mf.version = v;
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
      if (w != "mean" && w != "z") fail("{}: model_is '{}': expected mean or z", where, w);
      m.model_is_mean = w == "mean";
    } else if (key == "model_hash") {
      meta.model_hash = rest;
    } else if (key == "data") {
      meta.data = rest;
    } else if (key == "command") {
      meta.command = rest;
    } else if (key == "batch") {
      meta.batch = r.integer("batch");
    } else if (key == "job") {
      mf.processes = r.integer("the processes");
      mf.devices = r.integer("the devices per process");
      if (mf.processes < 1 || mf.processes > 1 << 20 || mf.devices < 1 || mf.devices > 1 << 16)
        fail("{}: job {}: out of range", where, rest);
    } else if (key == "learners_per_device") {
      m.learners_per_device = static_cast<int>(r.integer(key.c_str()));
    } else if (key == "model_steps") {
      m.steps = r.integer(key.c_str());
    } else if (key == "learner") {
      const int64_t i = r.integer("the learner");
      r.expect("steps");
      if (i < 0 || i > 1 << 20) fail("{}: learner index {} out of range", where, i);
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
      if (n < 0 || n > 1 << 20) fail("{}: {} tuner windows", where, n);
      for (int64_t i = 0; i < n; ++i) tstate.windows.push_back(r.real("a window"));
    } else if (key == "tensor") {
      Manifest::T t;
      t.name = r.next("the tensor's name");
      t.offset = static_cast<uint64_t>(r.integer("its offset"));
      t.count = static_cast<uint64_t>(r.integer("its length"));
      t.crc = r.hex32("its checksum");
      t.part = r.at < r.tokens.size() ? r.integer("its part") : 0;
      mf.tensors.push_back(t);
    } else if (key == "tensors_bin") {
      const uint64_t bytes = static_cast<uint64_t>(r.integer("its size"));
      mf.parts[0] = {bytes, r.hex32("its checksum")};
    } else if (key == "part") {
      const int64_t p = r.integer("the part");
      const uint64_t bytes = static_cast<uint64_t>(r.integer("its size"));
      if (p < 1 || p > 1 << 20) fail("{}: part {} out of range", where, p);
      mf.parts[p] = {bytes, r.hex32("its checksum")};
    } else {
      fail("{}: unknown manifest line '{}'", where, l.substr(0, 60));
    }
  }
  if (have_tuner) {
    if (!topts) fail("{}: tuner state without its options", where);
    AutoTuner t(*topts, std::max(1, tstate.k));
    t.restore(tstate);
    lp.tuner.emplace(std::move(t));
  }
  if (!lp.started || m.learners_per_device < 1 || m.learners.empty())
    fail("{}: the manifest lacks the loop position or the model", where);
  for (const Manifest::T& t : mf.tensors)
    if (!mf.parts.count(t.part))
      fail("{}: tensor {} lies in part {}, which the manifest does not list", where, t.name,
           t.part);
  // Version 1 did not say; alpha is 0 by default only with one learner in all.
  if (mf.version == 1) m.model_is_mean = m.learners.size() == 1;
  return mf;
}

// A part's bytes, checked against the manifest's size and CRC-32.
std::vector<char> read_part(const Manifest& mf, int64_t part) {
  const fs::path file = mf.dir / part_file(part);
  require_file(file);
  std::ifstream f(file, std::ios::binary);
  if (!f) fail("{}: missing or unreadable", file.string());
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), {});
  const auto [want_bytes, want_crc] = mf.parts.at(part);
  if (bytes.size() != want_bytes)
    fail("{}: {} bytes, the manifest says {}: the checkpoint is truncated or corrupt",
         file.string(), bytes.size(), want_bytes);
  if (crc32_of(bytes.data(), bytes.size()) != want_crc)
    fail("{}: fails its checksum: the checkpoint is corrupt", file.string());
  return bytes;
}

// "learner12.params" -> 12 and "params"; "ema3.state" -> 3 and "state" (prefix "ema"); -1 else.
int64_t indexed(const std::string& name, const char* prefix, std::string* part) {
  const size_t n = std::strlen(prefix), dot = name.find('.');
  if (name.rfind(prefix, 0) != 0 || dot == std::string::npos || dot <= n) return -1;
  for (size_t i = n; i < dot; ++i)
    if (name[i] < '0' || name[i] > '9') return -1;
  *part = name.substr(dot + 1);
  return dot - n > 7 ? -1 : std::stoll(name.substr(n, dot - n));
}

// The state `mf` describes for `want` (see load_checkpoint), its tensors read from the parts that
// hold them (each part's size and CRC-32 checked, then each tensor's); the other parts must be
// there at their recorded size.
TrainState load_state(const Manifest& mf, const CheckpointJob& want) {
  TrainState s = mf.s;
  ModelState& m = s.model;
  const std::string where = mf.file.string();
  const int64_t K = static_cast<int64_t>(m.learners.size());
  const int64_t k = m.learners_per_device;
  if (K % k != 0) fail("{}: {} learners are not whole devices of {}", where, K, k);
  const int64_t saved_devices = K / k;
  if (mf.devices > 0 && mf.processes * mf.devices != saved_devices)
    fail("{}: {} learners of {} per device, but job {} x {} devices", where, K, k, mf.processes,
         mf.devices);
  // The learners and devices this process takes.
  int64_t first = 0, count = K, first_dev = 0, devs = saved_devices, per_device = k;
  if (want.devices > 0) {
    const int64_t all_devices = static_cast<int64_t>(want.ranks) * want.devices;
    if (K % all_devices != 0)
      fail(
          "{}: the checkpoint has {} learners in all ({} process{} x {} device{} x {}); {} "
          "process{} x {} device{} cannot hold them evenly: resume with a layout whose devices "
          "divide {}",
          where, K, mf.processes, mf.processes == 1 ? "" : "es", saved_devices / mf.processes,
          saved_devices / mf.processes == 1 ? "" : "s", k, want.ranks, want.ranks == 1 ? "" : "es",
          want.devices, want.devices == 1 ? "" : "s", K);
    per_device = K / all_devices;
    devs = want.devices;
    first_dev = static_cast<int64_t>(want.rank) * want.devices;
    count = per_device * devs;
    first = first_dev * per_device;
  }
  const bool relayout = devs * (want.devices > 0 ? want.ranks : 1) != saved_devices;
  // Which tensors are needed, and from which parts.
  std::set<int64_t> needed_parts;
  std::vector<const Manifest::T*> needed;
  bool has_ema = false;
  for (const Manifest::T& t : mf.tensors) {
    std::string what;
    bool need = t.name == "z" || t.name == "z_prev";
    if (const int64_t i = indexed(t.name, "learner", &what); i >= 0) {
      if (i >= K) fail("{}: unknown tensor {}", where, t.name);
      need = i >= first && i < first + count;
    } else if (const int64_t d = indexed(t.name, "ema", &what); d >= 0) {
      if (d >= saved_devices || (what != "params" && what != "state"))
        fail("{}: unknown tensor {}", where, t.name);
      has_ema = true;
      need = relayout || (d >= first_dev && d < first_dev + devs);
    } else if (!need) {
      fail("{}: unknown tensor {}", where, t.name);
    }
    if (need) {
      needed.push_back(&t);
      needed_parts.insert(t.part);
    }
  }
  for (const auto& [part, size] : mf.parts) {
    if (needed_parts.count(part)) continue;
    const fs::path file = mf.dir / part_file(part);
    std::error_code ec;
    require_file(file);
    const uintmax_t got = fs::file_size(file, ec);
    if (ec || got != size.first)
      fail("{}: {} bytes, the manifest says {}: the checkpoint is truncated or corrupt",
           file.string(), ec ? 0 : got, size.first);
  }
  std::map<int64_t, std::vector<char>> bytes;
  for (int64_t part : needed_parts) bytes[part] = read_part(mf, part);
  m.learners.assign(m.learners.begin() + first, m.learners.begin() + first + count);
  m.learners_per_device = static_cast<int>(per_device);
  std::vector<std::vector<float>> ema(static_cast<size_t>(saved_devices)),
      ema_state(static_cast<size_t>(saved_devices));
  std::vector<uint8_t> have_ema(static_cast<size_t>(saved_devices)),
      have_ema_state(static_cast<size_t>(saved_devices));
  for (const Manifest::T* t : needed) {
    const std::vector<char>& b = bytes.at(t->part);
    const std::string file = (mf.dir / part_file(t->part)).string();
    if (t->offset > b.size() || t->count > (b.size() - t->offset) / sizeof(float))
      fail("{}: tensor {} lies outside {}", where, t->name, part_file(t->part));
    const char* p = b.data() + t->offset;
    if (crc32_of(p, t->count * sizeof(float)) != t->crc)
      fail("{}: tensor {} fails its checksum: the checkpoint is corrupt", file, t->name);
    std::vector<float> v(t->count);
    copy_bytes(v.data(), p, t->count * sizeof(float));  // v.data() is null when t->count == 0
    std::string what;
    if (t->name == "z") {
      m.z = std::move(v);
    } else if (t->name == "z_prev") {
      m.z_prev = std::move(v);
    } else if (const int64_t d = indexed(t->name, "ema", &what); d >= 0) {
      (what == "params" ? ema : ema_state)[static_cast<size_t>(d)] = std::move(v);
      (what == "params" ? have_ema : have_ema_state)[static_cast<size_t>(d)] = 1;
    } else {
      const int64_t i = indexed(t->name, "learner", &what);
      LearnerState& ls = m.learners[static_cast<size_t>(i - first)];
      if (what == "params")
        ls.params = std::move(v);
      else if (what == "opt1")
        ls.opt1 = std::move(v);
      else if (what == "opt2")
        ls.opt2 = std::move(v);
      else if (what == "state")
        ls.state = std::move(v);
      else
        fail("{}: unknown tensor {}", where, t->name);
    }
  }
  if (m.z.empty()) fail("{}: the manifest lacks the model", where);
  if (has_ema) {
    for (int64_t d = 0; d < saved_devices; ++d)
      if ((relayout || (d >= first_dev && d < first_dev + devs)) &&
          !(have_ema[static_cast<size_t>(d)] && have_ema_state[static_cast<size_t>(d)]))
        fail("{}: the weight average lacks device {}'s part", where, d);
    if (!relayout) {
      m.ema.assign(ema.begin() + first_dev, ema.begin() + first_dev + devs);
      m.ema_state.assign(ema_state.begin() + first_dev, ema_state.begin() + first_dev + devs);
    } else {
      // Another layout: the average of z is the same on every device; the averages of means (the
      // BN statistics, and with model_is_mean the parameters) are per-device shares that sum to
      // the average, so their sum (in device order, as evaluation sums them) goes to the job's
      // first device and zeros to the others: the same average, its later updates rounded in
      // another order.
      auto shares = [&](const std::vector<std::vector<float>>& parts, bool same_everywhere) {
        std::vector<std::vector<float>> out(static_cast<size_t>(devs));
        for (int64_t d = 0; d < devs; ++d) {
          if (same_everywhere) {
            out[static_cast<size_t>(d)] = parts[0];
          } else {
            std::vector<float>& o = out[static_cast<size_t>(d)];
            o.assign(parts[0].size(), 0.0f);
            if (first_dev + d != 0) continue;
            o = parts[0];
            for (size_t q = 1; q < parts.size(); ++q)
              for (size_t i = 0; i < o.size(); ++i) o[i] = o[i] + parts[q][i];
          }
        }
        return out;
      };
      m.ema = shares(ema, !m.model_is_mean);
      m.ema_state = shares(ema_state, false);
    }
  }
  if (relayout && s.loop.tuner) {
    // The tuner's learners and measurements belong to the old layout: a search still running
    // starts again from the restored learners; a finished one stays finished.
    const bool done = s.loop.tuner->done();
    AutoTuner t(s.loop.tuner->options(), static_cast<int>(per_device));
    if (done) {
      AutoTuner::State st = t.state();
      st.done = true;
      st.best_k = st.k;
      t.restore(st);
    }
    s.loop.tuner.emplace(std::move(t));
    s.loop.since_change = 0;
    s.loop.tune_s = 0;
    s.loop.tune_images = 0;
  }
  return s;
}

TrainState read_one(const fs::path& dir, CheckpointMeta& meta, const CheckpointJob& want,
                    LoadedCheckpoint::Layout& layout) {
  const Manifest mf = parse_manifest(dir, meta);
  layout.learners = static_cast<int64_t>(mf.s.model.learners.size());
  layout.processes = mf.processes;
  layout.devices = layout.learners / mf.s.model.learners_per_device / mf.processes;
  return load_state(mf, want);
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

namespace {

// One process's part of a checkpoint: its bytes and the manifest lines of its learners and
// tensors (global learner and device numbers; `part` after each checksum unless 0).
struct Part {
  std::vector<char> bin;
  std::string lines;
};

Part make_part(const ModelState& m, int64_t part, bool shared, int64_t first_learner,
               int64_t first_device) {
  Part p;
  auto add = [&](const std::string& name, const std::vector<float>& v) {
    const size_t off = p.bin.size();
    const auto* b = reinterpret_cast<const char*>(v.data());
    p.bin.insert(p.bin.end(), b, b + v.size() * sizeof(float));
    p.lines += fmt::format("tensor {} {} {} {:08x}{}\n", name, off, v.size(),
                           crc32_of(v.data(), v.size() * sizeof(float)),
                           part ? fmt::format(" {}", part) : std::string());
  };
  if (shared) {
    add("z", m.z);
    add("z_prev", m.z_prev);
  }
  for (size_t i = 0; i < m.learners.size(); ++i) {
    const LearnerState& l = m.learners[i];
    const int64_t g = first_learner + static_cast<int64_t>(i);
    p.lines += fmt::format("learner {} steps {}\n", g, l.steps);
    add(fmt::format("learner{}.params", g), l.params);
    add(fmt::format("learner{}.opt1", g), l.opt1);
    if (!l.opt2.empty()) add(fmt::format("learner{}.opt2", g), l.opt2);
    add(fmt::format("learner{}.state", g), l.state);
  }
  for (size_t d = 0; d < m.ema.size(); ++d) {
    const int64_t g = first_device + static_cast<int64_t>(d);
    add(fmt::format("ema{}.params", g), m.ema[d]);
    add(fmt::format("ema{}.state", g), m.ema_state[d]);
  }
  return p;
}

// The manifest's lines before the parts' (the run, the model's shape, the loop position).
std::string manifest_head(const TrainState& s, const CheckpointMeta& meta, int64_t processes,
                          int64_t devices) {
  const ModelState& m = s.model;
  const LoopState& lp = s.loop;
  std::string text = fmt::format("{} {}\n", kMagic, kVersion);
  text += fmt::format("model_hash {}\ndata {}\nbatch {}\ncommand {}\n", meta.model_hash,
                      one_line(meta.data), meta.batch, one_line(meta.command));
  if (!meta.model_path.empty()) text += fmt::format("model_path {}\n", one_line(meta.model_path));
  if (!meta.loss.empty()) text += fmt::format("loss {}\n", one_line(meta.loss));
  if (!meta.head.empty()) text += fmt::format("head {}\n", one_line(meta.head));
  for (const std::string& f : meta.freeze) text += fmt::format("freeze {}\n", one_line(f));
  text += fmt::format("model_is {}\n", m.model_is_mean ? "mean" : "z");
  text += fmt::format("job {} {}\n", processes, devices);
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
  return text;
}

// What every process of `job` reports, as one outcome: "" when all are "", else the first
// failure, naming its rank (the same text on every process).
std::string agreed(const CheckpointJob& job, const std::string& mine) {
  if (job.ranks <= 1) return mine;
  const std::vector<std::string> all = job.all_gather(mine);
  for (size_t r = 0; r < all.size(); ++r)
    if (!all[r].empty()) return fmt::format("rank {}: {}", r, all[r]);
  return "";
}

}  // namespace

std::string write_checkpoint(const std::string& dir_s, const TrainState& s,
                             const CheckpointMeta& meta, const CheckpointJob& job) {
  const fs::path dir(dir_s);
  const ModelState& m = s.model;
  CB_CHECK(m.learners_per_device >= 1 && job.ranks >= 1 && (job.ranks == 1 || job.all_gather));
  const int64_t L = static_cast<int64_t>(m.learners.size()), D = L / m.learners_per_device;
  const fs::path final_path = dir / name_of(s.loop.step);
  const fs::path tmp = dir / (name_of(s.loop.step) + ".tmp");
  std::error_code ec;
  // 1. Rank 0 makes the folder the parts go into.
  std::string err;
  if (job.rank == 0) {
    fs::create_directories(dir, ec);
    if (ec) err = fmt::format("{}: cannot create the checkpoint folder: {}", dir_s, ec.message());
    fs::remove_all(tmp, ec);
    if (err.empty() && (fs::create_directory(tmp, ec), ec))
      err = fmt::format("{}: cannot create the folder: {}", tmp.string(), ec.message());
  }
  if (err = agreed(job, err); !err.empty()) fail("{}", err);
  // 2. Every process writes its part and reports its size and checksum.
  const Part part = make_part(m, job.rank, job.rank == 0, job.rank * L, job.rank * D);
  std::string report;
  try {
    write_synced(tmp / part_file(job.rank), part.bin.data(), part.bin.size());
    report = fmt::format("{} {:08x}\n{}", part.bin.size(),
                         crc32_of(part.bin.data(), part.bin.size()), part.lines);
  } catch (const Error& e) {
    report = std::string("!") + e.what() +
             (job.rank != 0 ? " (the checkpoint folder must be one every rank sees)" : "");
  }
  const std::vector<std::string> reports =
      job.ranks > 1 ? job.all_gather(report) : std::vector<std::string>{report};
  for (size_t r = 0; r < reports.size(); ++r)
    if (reports[r].rfind('!', 0) == 0) {
      if (job.rank == 0) fs::remove_all(tmp, ec);  // the previous checkpoints are untouched
      fail("{}{}", job.ranks > 1 ? fmt::format("rank {}: ", r) : std::string(),
           reports[r].substr(1));
    }
  // 3. Rank 0 writes the manifest last, once every part is durable, and puts the folder in place.
  if (job.rank == 0) {
    try {
      std::string text = manifest_head(s, meta, job.ranks, D), lines;
      for (size_t r = 0; r < reports.size(); ++r) {
        const size_t nl = reports[r].find('\n');
        text += r == 0 ? fmt::format("tensors_bin {}\n", reports[r].substr(0, nl))
                       : fmt::format("part {} {}\n", r, reports[r].substr(0, nl));
        lines += reports[r].substr(nl + 1);
      }
      text += lines;
      text += fmt::format("end {:08x}\n", crc32_of(text.data(), text.size()));
      write_synced(tmp / "MANIFEST", text.data(), text.size());
      fsync_dir(tmp);
      put_in_place(tmp, final_path);
      fsync_dir(dir);
    } catch (const Error& e) {
      fs::remove_all(tmp, ec);
      err = e.what();
    }
  }
  if (err = agreed(job, err); !err.empty()) fail("{}", err);
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

LoadedCheckpoint load_checkpoint(const std::string& path, const CheckpointJob& job) {
  CB_CHECK(job.ranks >= 1 && (job.ranks == 1 || job.all_gather));
  LoadedCheckpoint r;
  std::error_code ec;
  std::vector<std::string> all;
  const bool one = fs::is_regular_file(fs::path(path) / "MANIFEST", ec);
  if (one) {
    all.push_back(path);
  } else {
    if (!fs::is_directory(path, ec)) fail("{}: no such checkpoint or checkpoint folder", path);
    all = list_checkpoints(path);
    if (job.ranks > 1) {  // the candidates as rank 0 sees them, on every rank
      std::string names;
      for (const std::string& a : all) names += a + "\n";
      names = job.all_gather(names)[0];
      all.clear();
      std::istringstream in(names);
      for (std::string l; std::getline(in, l);) all.push_back(l);
    }
    if (all.empty()) fail("{}: no checkpoint in this folder (ckpt-NNNNNNNNNN/ folders)", path);
  }
  // Newest first; one is used only when every process can read its part of it.
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    std::string err;
    try {
      r.meta = CheckpointMeta{};
      r.state = read_one(*it, r.meta, job, r.saved);
    } catch (const Error& e) {
      err = e.what();
    }
    err = agreed(job, err);
    if (err.empty()) {
      r.path = *it;
      return r;
    }
    if (one) fail("{}", err);
    r.refused.push_back(err);
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
