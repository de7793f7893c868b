// NumPy data sets: .npz files as tensor sets (runtime/data/tensor_set.h), their arrays
// memory-mapped where the archive stores them uncompressed.
#pragma once

#include <string>

#include "runtime/data/dataset.h"

namespace cb {

// NumPy data: `path` is a .npz file (its examples split by o.val_split: a fixed pseudo-random
// choice of rows, the same on every run) or a folder holding train.npz and val.npz (or
// test.npz). Arrays are memory-mapped where the archive stores them uncompressed.
Dataset load_npz_dataset(const std::string& path, const DataOptions& o = {});

}  // namespace cb
