// Checkpoints: a TrainState (sma/train_loop.h) on disk, so that a run that stops for any reason
// continues where it stopped, bit for bit.
//
// A checkpoint is a directory DIR/ckpt-<step, 10 digits> holding
//  - tensors.bin: every float tensor of the state, one after another (z, z_prev, then each
//    learner's params, opt1, opt2, BN state, then each device's part of the weight average),
//    little-endian; in a job of several processes (MPI) this is rank 0's part, and
//    tensors-<r>.bin holds rank r's learners and average parts (learners and devices numbered
//    globally: rank r's come after rank r-1's);
//  - MANIFEST: text, one item per line: the format version, what the run was (model hash and
//    path, loss, data, batch size, command line), whether the model is z or the learners'
//    average, the layout (processes x devices per process), the loop position (step, batches
//    consumed, learning-rate decays, previous rate, the auto-tuner's state and measuring window),
//    each learner's step count, each tensor's part, offset, length and CRC-32, each part's size
//    and CRC-32, and a last line with the CRC-32 of every line before it. Doubles are written as
//    hex floats (%a): exact.
// Written to ckpt-<step>.tmp, every file fsynced, renamed, and the parent directory fsynced: a
// crash at any moment leaves either the complete checkpoint or none (a .tmp left behind is
// ignored and replaced); in a job, the MANIFEST is written only after every part is durable.
// Reading checks every checksum and size; a checkpoint that fails is refused with the reason, and
// load_checkpoint() on a --checkpoint-dir falls back to the newest one that passes (in a job: that
// passes on every process). The learners are the state: a checkpoint resumes on any layout with
// the same number of learners in all.
//
// One run writes a folder at a time: CheckpointPolicy holds a CheckpointLock on DIR/.lock for the
// whole run. The lock file is not a checkpoint (only ckpt-NNNNNNNNNN/ folders are), and reading a
// folder (load_checkpoint, cb-export, --resume into another folder) takes no lock.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "sma/train_loop.h"

namespace cb {

struct CheckpointMeta {
  std::string model_hash;  // of the ONNX file's bytes (file_hash)
  std::string data;        // what the data set was: path, kind, sizes
  int64_t batch = 0;       // per learner
  std::string command;     // the command line, for the record
  std::string model_path;  // the model file, absolute (cb-export finds it there); "" unknown
  std::string loss;        // "KIND OUTPUT" (loss_kind_name, the output's name); "" unknown
  // A classifier replaced before training (cb-train --num-classes, runtime/replace_head.h):
  // "CLASSES SEED OUTPUT" (OUTPUT "" for the graph's first); "" none. cb-export replaces it the
  // same way (the draw of the new head follows from the seed), so the checkpoint's tensors fit.
  std::string head;
  std::vector<std::string> freeze;  // --freeze patterns (their parameters are not in the state)
};

// The loss as a checkpoint records it: "KIND[;key=value...] OUTPUT", KIND one of cb-train's
// --loss names cross-entropy|mse|l1|huber|bce|model, the keys the settings that differ from
// LossSpec's defaults (class_axis, ignore_index (none: no ignored label), label_smoothing,
// huber_delta), then the output it reads; and back (throws cb::Error naming `where` when it
// cannot be read). Records without settings read as before.
std::string loss_record(const LossSpec& l);
LossSpec parse_loss_record(const std::string& s, const std::string& where);

// FNV-1a 64 of a file's bytes, in hex. Throws cb::Error naming the file when it cannot be read.
std::string file_hash(const std::string& path);

// A job of several processes (MPI, sma/mpi_job.h) writing or reading one checkpoint: this
// process's place among them and how they meet. Process r's state holds global learners
// [r x L, (r + 1) x L) and devices [r x D, (r + 1) x D) (L its learners, D its devices).
struct CheckpointJob {
  int rank = 0, ranks = 1;  // processes
  // Reading: this process's devices, so that each takes its learners of the job's K (a layout
  // other than the checkpoint's: K must be a multiple of the job's devices); 0 reads the state
  // as it was saved (every learner and every part of the average: cb-export).
  int devices = 0;
  // Every process's `text` on every process, in rank order (MPI_Allgather); ranks > 1.
  std::function<std::vector<std::string>(const std::string&)> all_gather;
  // What every process reports, as one outcome: "" when all are "", else the first failure,
  // naming its rank (the same text on every process). `mine` as it is with one process.
  std::string agreed(const std::string& mine) const;
};

// Writes `s` into dir/ckpt-<step> (creating dir) and returns that path. Throws cb::Error naming
// the file and the system's reason (a full disk, a read-only folder); nothing partial is left
// under the final name. With a job of several processes every process calls it with its state:
// rank 0 makes the folder, each writes its part (tensors.bin is rank 0's, with z; tensors-<r>.bin
// the others') and reports its size and CRC-32, and rank 0 writes the MANIFEST listing every part
// last, once every part is durable, then renames the folder into place. A process that dies or
// fails before that leaves no checkpoint under the final name (a failure is thrown on every
// process, naming its rank).
std::string write_checkpoint(const std::string& dir, const TrainState& s, const CheckpointMeta& m,
                             const CheckpointJob& job = {});

struct LoadedCheckpoint {
  std::string path;
  TrainState state;
  CheckpointMeta meta;
  std::vector<std::string> refused;  // newer checkpoints that failed their checks, with why
  // The layout the checkpoint was saved from: K learners in all, processes x devices per process.
  struct Layout {
    int64_t learners = 0, processes = 1, devices = 1;
  } saved;
};

// `path` is one checkpoint (it holds a MANIFEST) or a --checkpoint-dir (its newest checkpoint
// that passes every check). Throws cb::Error when there is none, naming each one refused.
// With `job`: this process's part of the state for the job's layout (its learners, and the
// weight average's parts of its devices; see CheckpointJob). Every process checks the parts it
// reads (size and CRC-32) and that the others are there at their size, and a checkpoint is used
// only when every process can read it, so all take the same one.
LoadedCheckpoint load_checkpoint(const std::string& path, const CheckpointJob& job = {});

// Removes all but the newest `keep` checkpoints in dir (keep >= 1), each renamed to its .tmp name
// first, and the .tmp folders a crash left. Call it only while holding the folder's lock, with no
// write in progress (as CheckpointPolicy::save does).
void prune_checkpoints(const std::string& dir, int keep);

// The checkpoints in dir, oldest first (complete ones only: no .tmp).
std::vector<std::string> list_checkpoints(const std::string& dir);

// When a run writes checkpoints (--checkpoint-every): every N steps ("N"), every N epochs ("Ne",
// N may be a fraction) or every N minutes ("Nm").
struct CheckpointEvery {
  double n = 1;
  char unit = 'e';  // s(teps), e(pochs), m(inutes)
  // Throws cb::Error naming --checkpoint-every and the forms it takes.
  static CheckpointEvery parse(const std::string& s);
};

// One run per checkpoint folder: an advisory flock(LOCK_EX | LOCK_NB) on DIR/.lock, held while
// this object lives. Without it two runs on one folder interleave their checkpoints, prune each
// other's (--keep) and --resume takes whichever wrote last. The kernel drops the lock when the
// process ends, however it ends (a crash, SIGKILL): a lock is never stale. The file stays (its
// text names the last holder; only the kernel's lock says whether one is alive). Advisory: it
// stops other CheckpointLocks, not a process that writes the folder without one, and on a network
// folder it holds across machines only where the filesystem's locks work across them.
class CheckpointLock {
 public:
  static constexpr const char* kFileName = ".lock";
  // Creates dir and DIR/.lock when missing, takes the lock without waiting and writes "pid PID on
  // HOST since TIME, command: COMMAND" into the file. Throws cb::Error naming the folder and, from
  // the file, the process and host that hold it; or, on a filesystem without working locks
  // (ENOLCK, EOPNOTSUPP: a network folder without a lock service), naming it and the system's
  // reason: such a folder is refused rather than written unguarded.
  CheckpointLock(const std::string& dir, const std::string& command);
  ~CheckpointLock();
  CheckpointLock(CheckpointLock&& o) noexcept;
  CheckpointLock& operator=(CheckpointLock&& o) noexcept;
  CheckpointLock(const CheckpointLock&) = delete;
  CheckpointLock& operator=(const CheckpointLock&) = delete;
  const std::string& path() const { return path_; }  // DIR/.lock

 private:
  int fd_ = -1;
  std::string path_;
};

// A run's checkpoint settings, as cb-train's flags give them.
struct CheckpointOptions {
  std::string dir;     // --checkpoint-dir; "" writes none
  std::string every;   // --checkpoint-every; "" is 1e (with a dir)
  int keep = 3;        // --keep: the newest kept in dir
  std::string resume;  // --resume: a checkpoint, or a folder of them (its newest valid one)
  // Throws cb::Error naming the flag at fault; reads nothing on disk.
  void validate() const;
};

// Writes a run's checkpoints when they are due: after the steps, epochs or minutes of `every`
// (counted from the position the run starts or resumes at), keeping the newest `keep`.
class CheckpointPolicy {
 public:
  // Creates dir (when set), checks that it is writable and locks it for as long as the policy
  // lives (CheckpointLock, its file naming `command`); throws cb::Error naming it. Construct it
  // before anything expensive, and before --resume reads the folder.
  // In a job of several processes every process makes one with `job`: rank 0 makes, checks and
  // locks the folder and prunes it; save() writes each process's part.
  explicit CheckpointPolicy(const CheckpointOptions& o, const std::string& command = "",
                            CheckpointJob job = {});
  bool enabled() const { return !o_.dir.empty(); }
  // Counts from `loop` (a fresh or a resumed position) with epochs of `batches_per_epoch`; the
  // checkpoints record `meta`. Call once before training. `batches_per_epoch` 0: a stream of
  // unknown length (the API's caller batches), which has no epochs: an explicit `Ne` interval is
  // refused naming the forms that work, and the default (1e) becomes every 10 minutes.
  void start(const LoopState& loop, int64_t batches_per_epoch, CheckpointMeta meta);
  static constexpr double kUnknownLengthMinutes = 10;
  // After a step: whether a checkpoint is due at the position `loop` reached. By steps and epochs
  // the same on every process; by minutes (by_clock()) each process's own clock says.
  bool due(const LoopState& loop);
  bool by_clock() const { return every_.unit == 'm'; }
  // Writes the trainer's state at `loop`, prunes to `keep` and returns the checkpoint's path.
  std::string save(const Trainer& t, const LoopState& loop);

 private:
  CheckpointOptions o_;
  CheckpointEvery every_;
  CheckpointMeta meta_;
  CheckpointJob job_;
  std::optional<CheckpointLock> lock_;  // with a dir, on rank 0
  int64_t per_epoch_ = 1;               // batches
  int64_t last_epochs_ = 0;  // the last whole `every` of epochs a checkpoint was written at
  double last_time_s_ = 0;   // steady clock, seconds
};

// --resume: the checkpoint at `path` (or the newest valid one in that folder), refused with every
// difference named when it was not written by a run of this model, data and batch size (`now`),
// quoting the checkpoint's own command line. `job` as load_checkpoint's.
LoadedCheckpoint load_for_resume(const std::string& path, const CheckpointMeta& now,
                                 const CheckpointJob& job = {});

}  // namespace cb
