// Checkpoints: writing, listing and pruning (see checkpoint.h; reading: checkpoint_read.cpp).
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
    for (double w : t.windows) {
      text += ' ';
      text += hexf(w);
    }
    text += "\n";
  }
  return text;
}

}  // namespace

std::string CheckpointJob::agreed(const std::string& mine) const {
  if (ranks <= 1) return mine;
  const std::vector<std::string> all = all_gather(mine);
  for (size_t r = 0; r < all.size(); ++r)
    if (!all[r].empty()) return fmt::format("rank {}: {}", r, all[r]);
  return "";
}

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
  if (err = job.agreed(err); !err.empty()) fail("{}", err);
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
  if (err = job.agreed(err); !err.empty()) fail("{}", err);
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
