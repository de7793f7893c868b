// Packed caches (.cbpack): an image folder's samples decoded and resized once, in one file that
// later epochs and runs memory-map instead of decoding JPEG again (CROSSBOW's record files; FFCV's
// and DALI's caches do the same).
//
// Made by `cb-pack DIR --out FILE --size S` or `cb-train --cache FILE`: every image of both splits,
// decoded to RGB (JPEG at the DCT scale that keeps the shorter side >= S) and resized so that its
// shorter side is S (smaller images are kept as they are), stored as uint8 HWC. Files that fail to
// decode are left out and named. The file is written to FILE.tmp and renamed when complete, so a
// stopped cb-pack never leaves a partial FILE.
//
// Layout (little-endian): a 128-byte header (magic "CBPACK", version, S, counts, where the index
// is, the source folder's fingerprint, the file size, CRC-32s of the index and of the header);
// the records, each at a 64-byte boundary; the index (per record: offset, rows, cols, label, split,
// CRC-32 of its pixels), the class names and the source folder's path.
//
// Checks: opening verifies the header, the file size, the index's CRC and every record's bounds
// and label; each record's CRC is verified the first time it is read in a process. When the
// source folder still exists it is listed again and its fingerprint (paths, sizes, mtimes, split)
// compared: a pack of a folder that has changed since is stale and refused. Every failure is a
// cb::Error naming the file and what to do (rebuild it with cb-pack).
#pragma once

#include <functional>
#include <string>

#include "runtime/data/dataset.h"

namespace cb {

struct PackOptions {
  int size = 256;          // the shorter side of the stored images
  double val_split = 0.1;  // flat class folders (see image_folder.h)
  int workers = 1;         // decoding threads
  // Called after every chunk of images with (done, total).
  std::function<void(int64_t, int64_t)> on_progress;
};

struct PackSummary {
  int64_t train = 0, test = 0, bytes = 0;
  std::vector<SkipLog::Entry> skipped;  // left out: not images, empty, or failed to decode
};

// Packs the image folder `dir` into `out`.
PackSummary write_pack(const std::string& dir, const std::string& out, const PackOptions& o);

// Opens a pack (the checks above). `source` non-empty: the pack must have been made from that
// folder (cb-train --cache).
Dataset load_pack_dataset(const std::string& path, const std::string& source = "");

}  // namespace cb
