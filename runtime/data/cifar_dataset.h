// CIFAR-10 and CIFAR-100 in their binary version (3 channels; the Dataset convention is in
// dataset.h).
//
// CIFAR-10 ("cifar-10-binary.tar.gz"): data_batch_1.bin ... data_batch_N.bin (N >= 1 consecutive;
// the official set has 5) and test_batch.bin; a record is 1 label byte (0-9) then 3072 pixel bytes,
// 1024 R, 1024 G, 1024 B, each plane row-major 32x32. CIFAR-100 ("cifar-100-binary.tar.gz"):
// train.bin and test.bin; a record is a coarse label byte, a fine label byte (0-99, the one we
// use), then the same 3072 pixel bytes. The files may sit in the folder itself or in the tarball's
// subfolder (cifar-10-batches-bin/, cifar-100-binary/). Images stay uint8 [n,3,32,32]
// (the planes are already channel-major), labels i64 [n]. Every problem (missing or empty file, a
// size that is not a whole number of records, a label out of range) is a cb::Error naming the file.
#pragma once

#include <string>

#include "runtime/data/dataset.h"

namespace cb {

// True when `dir` (or its cifar-10-batches-bin/ or cifar-100-binary/ subfolder) holds any
// CIFAR-10/100 binary file: the detection used by load_dataset.
bool looks_like_cifar(const std::string& dir);
// Reads a CIFAR-10 or CIFAR-100 binary folder. Throws cb::Error naming a missing/corrupt file.
Dataset load_cifar_dataset(const std::string& dir);

}  // namespace cb
