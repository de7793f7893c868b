// Opening a --data path: its format detected from the content (or forced), then read by that
// format's reader (runtime/data/idx_dataset.h, cifar_dataset.h, image_folder.h, pack.h,
// npz_dataset.h). The one place that knows every reader, so that the readers (which give
// runtime/data/dataset.h's types) and the data set types know none of them.
#pragma once

#include <string>

#include "runtime/data/dataset.h"

namespace cb {

// Reads the data set at `path`, its format detected from the content (or forced by o.format):
// IDX files (train-images-idx3-ubyte[.gz], ...), CIFAR-10/100 binaries (data_batch_N.bin +
// test_batch.bin, or train.bin + test.bin, also inside cifar-10-batches-bin/ or
// cifar-100-binary/), an image folder (train/ and val/ of class folders, or class folders), or
// a .cbpack file, NumPy files (a folder with train.npz and val.npz or test.npz, or one .npz split
// by --val-split: load_npz_dataset). Throws cb::Error naming the folder or file and what was
// looked for.
Dataset load_dataset(const std::string& path, const DataOptions& o = {});

}  // namespace cb
