// MNIST / Fashion-MNIST in their IDX files (1 channel; the Dataset convention is in dataset.h).
//
// A folder holds train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and
// t10k-labels-idx1-ubyte, each optionally gzip-compressed (".gz", read through zlib). Images
// stay uint8 [n,1,rows,cols] (an ImageSet), labels i64 [n]. Every problem (missing
// file, bad magic, truncated data, image and label counts that differ) is a cb::Error naming the
// file.
#pragma once

#include <string>

#include "runtime/data/dataset.h"

namespace cb {

// Reads one IDX pair (images file, labels file): each path as given, or with ".gz" appended.
ImageSet read_idx_pair(const std::string& images_path, const std::string& labels_path);
// Reads the four files of an MNIST-style folder. Throws cb::Error naming a missing/corrupt file.
Dataset load_idx_dataset(const std::string& dir);

}  // namespace cb
