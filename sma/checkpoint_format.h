// What the two halves of the checkpoint code share (sma/checkpoint.cpp writes and prunes,
// sma/checkpoint_read.cpp reads a checkpoint and fits it to a layout): the format's name and
// version, and where a process's part lives. Internal to cb_sma.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>


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

}  // namespace cb::checkpoint_format
