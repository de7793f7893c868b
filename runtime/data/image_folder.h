// Image folders: JPEG and PNG files in one folder per class, as torchvision's ImageFolder reads.
//
// Layouts (detected by looks_like_image_folder, or forced by --data-format folder):
//  - DIR/train/<class>/... and DIR/val/<class>/... (ImageNet's): the classes are train/'s
//    folders; a val/ folder that train/ lacks is an error;
//  - DIR/<class>/...: each class split into training and test examples by --val-split, each file
//    by a hash of its name (stable as files come and go, the same in every run).
// Class index = the position of the class folder's name in sorted order; files are found in the
// class folder and its subfolders (symlinks followed, at most 8 levels deep) and sorted by path.
// Extensions: .jpg .jpeg .png in any case. Other files, and empty (0-byte) ones, are skipped and
// recorded in the data set's SkipLog; a file that fails to decode is skipped when it is met (see
// runtime/data/feed.h). A folder without images, a class folder without images, or a split
// left empty is a cb::Error naming it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/data/dataset.h"

namespace cb {

struct ImageFile {
  std::string path;
  int64_t label = 0;
  uint64_t size = 0;  // bytes
  int64_t mtime = 0;  // ns since the epoch: with the size, what tells a pack it is stale
};

struct FolderListing {
  std::string dir, layout;  // layout: "train/ and val/ class folders" or "class folders"
  std::vector<std::string> classes;
  std::vector<ImageFile> train, test;
  std::vector<SkipLog::Entry> skipped;  // files that are not images, or empty
  // A hash of every image's path (relative to dir), label, size and mtime, and of the split.
  uint64_t fingerprint() const;
};

bool looks_like_image_folder(const std::string& dir);
FolderListing list_image_folder(const std::string& dir, double val_split);
Dataset load_image_folder(const std::string& dir, double val_split);

// Image files read and decoded on demand (one split of a folder).
class FileExamples final : public Examples {
 public:
  explicit FileExamples(std::vector<ImageFile> files) : files_(std::move(files)) {}
  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  int64_t label(int64_t i) const override { return files_[static_cast<size_t>(i)].label; }
  std::string name(int64_t i) const override { return files_[static_cast<size_t>(i)].path; }
  ExampleDims dims() const override { return {3, 0, 0}; }
  bool load(int64_t i, const DecodeOptions& o, Image& out, std::string& why) const override;

 private:
  std::vector<ImageFile> files_;
};

// Reads a whole file. False and `why` (the system's reason) when it cannot.
bool read_file(const std::string& path, std::vector<uint8_t>& out, std::string& why);

}  // namespace cb
