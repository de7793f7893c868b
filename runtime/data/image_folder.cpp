// Image folders (see image_folder.h).
#include "runtime/data/image_folder.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include "runtime/checksum.h"
#include "runtime/error.h"

namespace cb {

namespace fs = std::filesystem;

namespace {

constexpr int kMaxDepth = 8;  // subfolders followed inside a class folder (symlink loops end here)

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool image_extension(const fs::path& p) {
  const std::string e = lower(p.extension().string());
  return e == ".jpg" || e == ".jpeg" || e == ".png";
}

std::vector<fs::path> subfolders(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e2;
    if (it->is_directory(e2)) out.push_back(it->path());
  }
  if (ec) fail("{}: cannot list the folder: {}", dir.string(), ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

// The image files under one class folder, sorted by path; everything else goes to `skipped`.
std::vector<ImageFile> class_files(const fs::path& dir, int64_t label,
                                   std::vector<SkipLog::Entry>& skipped) {
  std::vector<ImageFile> files;
  std::error_code ec;
  const auto opts = fs::directory_options::follow_directory_symlink |
                    fs::directory_options::skip_permission_denied;
  fs::recursive_directory_iterator it(dir, opts, ec), end;
  if (ec) fail("{}: cannot list the class folder: {}", dir.string(), ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) {
      skipped.push_back({dir.string(), "cannot list part of the folder: " + ec.message()});
      break;
    }
    std::error_code e2;
    const fs::path& p = it->path();
    if (it->is_directory(e2)) {
      if (it.depth() >= kMaxDepth) {
        it.disable_recursion_pending();
        skipped.push_back({p.string(), fmt::format("folder more than {} levels deep", kMaxDepth)});
      }
      continue;
    }
    if (!it->is_regular_file(e2)) {
      skipped.push_back({p.string(), e2 ? e2.message() : "not a regular file"});
      continue;
    }
    if (!image_extension(p)) {
      skipped.push_back({p.string(), "not a .jpg, .jpeg or .png file"});
      continue;
    }
    ImageFile f;
    f.path = p.string();
    f.label = label;
    f.size = it->file_size(e2);
    if (e2) {
      skipped.push_back({f.path, e2.message()});
      continue;
    }
    if (f.size == 0) {
      skipped.push_back({f.path, "empty file (0 bytes)"});
      continue;
    }
    auto t = it->last_write_time(e2);
    f.mtime =
        e2 ? 0 : std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
    files.push_back(std::move(f));
  }
  std::sort(files.begin(), files.end(),
            [](const ImageFile& a, const ImageFile& b) { return a.path < b.path; });
  return files;
}

bool has_image_files(const fs::path& dir) {
  std::error_code ec;
  int seen = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end && seen < 64;
       it.increment(ec), ++seen)
    if (image_extension(it->path())) return true;
  return false;
}

}  // namespace

uint64_t FolderListing::fingerprint() const {
  uint64_t h = fnv1a(layout.data(), layout.size());
  for (const auto* split : {&train, &test}) {
    const char sep = '|';
    h = fnv1a(&sep, 1, h);
    for (const ImageFile& f : *split) {
      const std::string rel = fs::path(f.path).lexically_relative(dir).string();
      h = fnv1a(rel.data(), rel.size(), h);
      h = fnv1a(&f.label, sizeof f.label, h);
      h = fnv1a(&f.size, sizeof f.size, h);
      h = fnv1a(&f.mtime, sizeof f.mtime, h);
    }
  }
  return h;
}

bool looks_like_image_folder(const std::string& dir) {
  const fs::path p(dir);
  std::error_code ec;
  if (fs::is_directory(p / "train", ec) && fs::is_directory(p / "val", ec)) return true;
  try {
    for (const fs::path& c : subfolders(p))
      if (has_image_files(c)) return true;
  } catch (const Error&) {
  }
  return false;
}

FolderListing list_image_folder(const std::string& dir, double val_split) {
  const fs::path root(dir);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) fail("image folder {} does not exist or is not a folder", dir);
  FolderListing l;
  l.dir = dir;
  const bool split_layout =
      fs::is_directory(root / "train", ec) && fs::is_directory(root / "val", ec);
  const fs::path train_dir = split_layout ? root / "train" : root;
  l.layout = split_layout ? "train/ and val/ class folders" : "class folders";
  const std::vector<fs::path> class_dirs = subfolders(train_dir);
  if (class_dirs.empty())
    fail(
        "image folder {}: no class folders in {}; expected {}/<class>/*.jpg (or .jpeg, .png), "
        "one folder per class",
        dir, train_dir.string(), train_dir.string());
  std::map<std::string, int64_t> index;
  for (const fs::path& c : class_dirs) {
    index.emplace(c.filename().string(), static_cast<int64_t>(l.classes.size()));
    l.classes.push_back(c.filename().string());
  }
  {  // files directly in the split folder belong to no class
    for (fs::directory_iterator it(train_dir, ec), end; !ec && it != end; it.increment(ec)) {
      std::error_code e2;
      if (!it->is_directory(e2))
        l.skipped.push_back({it->path().string(), "not inside a class folder"});
    }
  }
  for (size_t c = 0; c < class_dirs.size(); ++c) {
    std::vector<ImageFile> files = class_files(class_dirs[c], static_cast<int64_t>(c), l.skipped);
    if (files.empty())
      fail(
          "image folder {}: class folder {} holds no images (.jpg, .jpeg or .png files that are "
          "not empty); remove it or add its images",
          dir, class_dirs[c].string());
    if (split_layout) {
      l.train.insert(l.train.end(), files.begin(), files.end());
    } else {
      // Held out by a hash of the file name: the same split in every run, and adding or removing
      // files moves no other file between the splits.
      for (ImageFile& f : files) {
        const std::string base = fs::path(f.path).filename().string();
        const uint64_t h = fnv1a(base.data(), base.size()) % 1000000;
        (static_cast<double>(h) < val_split * 1e6 ? l.test : l.train).push_back(std::move(f));
      }
    }
  }
  if (split_layout) {
    const fs::path val_dir = root / "val";
    for (const fs::path& c : subfolders(val_dir)) {
      auto it = index.find(c.filename().string());
      if (it == index.end())
        fail(
            "image folder {}: val/{} is not a class of train/ (train/ has {} classes: {}{}); the "
            "two must have the same class folders",
            dir, c.filename().string(), l.classes.size(), l.classes.front(),
            l.classes.size() > 1 ? ", ..." : "");
      std::vector<ImageFile> files = class_files(c, it->second, l.skipped);
      l.test.insert(l.test.end(), files.begin(), files.end());
    }
    for (fs::directory_iterator it(val_dir, ec), end; !ec && it != end; it.increment(ec)) {
      std::error_code e2;
      if (!it->is_directory(e2))
        l.skipped.push_back({it->path().string(), "not inside a class folder"});
    }
    if (l.test.empty())
      fail("image folder {}: val/ holds no images in class folders (val/<class>/*.jpg)", dir);
  } else {
    if (l.test.empty() || l.train.empty())
      fail(
          "image folder {}: --val-split {} leaves the {} set empty ({} images in all); use a "
          "split between 0 and 1 that keeps both, or the train/ and val/ layout",
          dir, val_split, l.test.empty() ? "test" : "training", l.train.size() + l.test.size());
  }
  return l;
}

Dataset load_image_folder(const std::string& dir, double val_split) {
  if (!(val_split > 0 && val_split < 1))
    fail("--val-split must be between 0 and 1 (exclusive), got {}", val_split);
  FolderListing l = list_image_folder(dir, val_split);
  Dataset d;
  d.dir = dir;
  d.format = DataFormat::Folder;
  d.description = "image folder (" + l.layout + ")";
  d.photos = true;
  d.classes = l.classes;
  for (const SkipLog::Entry& e : l.skipped) d.skipped->add(e.name, e.why);
  d.train = std::make_shared<FileExamples>(std::move(l.train));
  d.test = std::make_shared<FileExamples>(std::move(l.test));
  return d;
}

bool read_file(const std::string& path, std::vector<uint8_t>& out, std::string& why) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    why = std::string("cannot open: ") + std::strerror(errno);
    return false;
  }
  out.clear();
  uint8_t buf[1 << 16];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
    out.insert(out.end(), buf, buf + n);
    if (out.size() > (size_t{1} << 30)) {
      std::fclose(f);
      why = "larger than 1 GiB: not an image this loader takes";
      return false;
    }
  }
  const bool err = std::ferror(f) != 0;
  const int e = errno;
  std::fclose(f);
  if (err) {
    why = std::string("read error: ") + std::strerror(e);
    return false;
  }
  return true;
}

bool FileExamples::load(int64_t i, const DecodeOptions& o, Image& out, std::string& why) const {
  thread_local std::vector<uint8_t> bytes;
  if (!read_file(files_[static_cast<size_t>(i)].path, bytes, why)) return false;
  return decode_image(bytes.data(), bytes.size(), o, out, why);
}

}  // namespace cb
