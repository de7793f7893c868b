// What the two halves of the checkpoint code share (sma/checkpoint.cpp writes and prunes,
// sma/checkpoint_read.cpp reads a checkpoint and fits it to a layout): the format's name and
// version, where a process's part lives, and how the processes agree on an outcome. Internal to
// cb_sma.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <vector>

#include "sma/checkpoint.h"

namespace cb::checkpoint_format {

inline constexpr const char* kMagic = "crossbow-checkpoint";
// 2 added model_path, loss and model_is; 3 the weight average (ema<d>.params, ema<d>.state, one
// per device, present with --ema); 4 the job's layout ("job PROCESSES DEVICES") and the parts of
// a job of several processes (tensors-<r>.bin, "part R BYTES CRC", a tensor's part after its
// checksum); versions 1 to 3 are still read.
inline constexpr int kVersion = 4;

// A part of a checkpoint: tensors.bin (part 0) or tensors-<r>.bin, each process's.
inline std::string part_file(int64_t r) {
  return r == 0 ? std::string("tensors.bin") : fmt::format("tensors-{}.bin", r);
}

// What every process of `job` reports, as one outcome: "" when all are "", else the first
// failure, naming its rank (the same text on every process).
inline std::string agreed(const CheckpointJob& job, const std::string& mine) {
  if (job.ranks <= 1) return mine;
  const std::vector<std::string> all = job.all_gather(mine);
  for (size_t r = 0; r < all.size(); ++r)
    if (!all[r].empty()) return fmt::format("rank {}: {}", r, all[r]);
  return "";
}

}  // namespace cb::checkpoint_format
