// Checkpoints: reading one, checking it, and fitting its state to the layout asked for (see
// checkpoint.h; writing: checkpoint.cpp).
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

#include "sma/checkpoint_format.h"

namespace cb {

namespace fs = std::filesystem;
using namespace checkpoint_format;

namespace {

// A manifest line's words, read one at a time, each checked and named in the error.
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
    err = job.agreed(err);
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

}  // namespace cb
