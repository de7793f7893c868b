// CIFAR-10/100 binary reading: fixed-size records, no header, no compression. The files are read
// whole (ifstream), checked (non-empty, a whole number of records, labels in range) and converted
// to uint8 CHW; the pixel planes (R, G, B, each row-major 32x32) already are the NCHW order.
#include "runtime/data/cifar_dataset.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "runtime/error.h"

namespace cb {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kSide = 32, kChannels = 3, kPixels = kChannels * kSide * kSide;  // 3072
const char* const kCifar10Sub = "cifar-10-batches-bin";
const char* const kCifar100Sub = "cifar-100-binary";

// The N of every data_batch_N.bin in `dir`.
std::set<int> data_batch_numbers(const fs::path& dir) {
  std::set<int> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    const std::string pre = "data_batch_", suf = ".bin";
    if (n.size() <= pre.size() + suf.size() || n.compare(0, pre.size(), pre) != 0 ||
        n.compare(n.size() - suf.size(), suf.size(), suf) != 0)
      continue;
    const std::string num = n.substr(pre.size(), n.size() - pre.size() - suf.size());
    if (num.size() > 6 ||
        !std::all_of(num.begin(), num.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    out.insert(std::stoi(num));
  }
  return out;
}

bool has_cifar10(const fs::path& dir) {
  return fs::is_regular_file(dir / "test_batch.bin") || !data_batch_numbers(dir).empty();
}
bool has_cifar100(const fs::path& dir) {
  return fs::is_regular_file(dir / "train.bin") || fs::is_regular_file(dir / "test.bin");
}

struct Found {
  fs::path root;
  bool cifar100 = false;
};

// Where the CIFAR files are: `dir` itself or one of the tarballs' subfolders; exactly one place.
std::vector<Found> find_cifar(const fs::path& dir) {
  std::vector<Found> out;
  for (const fs::path& d : {dir, dir / kCifar10Sub, dir / kCifar100Sub}) {
    if (!fs::is_directory(d)) continue;
    if (has_cifar10(d)) out.push_back({d, false});
    if (has_cifar100(d)) out.push_back({d, true});
  }
  return out;
}

std::string describe(const Found& f) {
  return fmt::format("CIFAR-{} in {}", f.cifar100 ? 100 : 10, f.root.string());
}

// Appends the records of one file to `set`. A record: `header` label bytes (the label used is
// byte `label_at`), then kPixels pixel bytes.
void read_records(const fs::path& path, const char* what, int64_t header, int64_t label_at,
                  int64_t classes, ImageSet& set) {
  const std::string name = path.string();
  if (!fs::is_regular_file(path)) fail("missing data file {}; {}", name, what);
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) fail("{}: cannot open the file (check its permissions)", name);
  const auto size = static_cast<uint64_t>(f.tellg());
  const auto record = static_cast<uint64_t>(header + kPixels);
  if (size == 0) fail("{}: empty file (0 bytes); download or copy it again", name);
  if (size % record != 0)
    fail(
        "{}: its size, {} bytes, is not a multiple of the record size, {} bytes ({} label "
        "byte{} + {} pixel bytes): not a CIFAR-{} binary file or truncated; use the binary "
        "version (cifar-{}-binary.tar.gz) and download or copy it again",
        name, size, record, header, header == 1 ? "" : "s", kPixels, classes, classes);
  std::vector<uint8_t> b(size);
  f.seekg(0);
  if (!f.read(reinterpret_cast<char*>(b.data()), static_cast<std::streamsize>(size)))
    fail("{}: read error after {} of {} bytes", name, f.gcount(), size);
  const auto n = static_cast<int64_t>(size / record);
  const auto first = static_cast<size_t>(set.count);
  set.pixels.resize((first + static_cast<size_t>(n)) * kPixels);
  set.labels.resize(first + static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* rec = b.data() + static_cast<size_t>(r) * record;
    const int64_t label = rec[label_at];
    if (label >= classes)
      fail(
          "{}: record {} has label {}, outside 0..{}: the file is corrupt or not a CIFAR-{} "
          "file",
          name, r, label, classes - 1, classes);
    set.labels[first + static_cast<size_t>(r)] = label;
    std::copy_n(rec + header, kPixels,
                set.pixels.data() + (first + static_cast<size_t>(r)) * kPixels);
  }
  set.count += n;
  set.source = set.source.empty() ? name : set.source + ", " + name;
}

ImageSet empty_set() {
  ImageSet s;
  s.channels = kChannels;
  s.rows = s.cols = kSide;
  return s;
}

}  // namespace

bool looks_like_cifar(const std::string& dir) { return !find_cifar(dir).empty(); }

Dataset load_cifar_dataset(const std::string& dir) {
  if (!fs::is_directory(dir))
    fail("data folder {} does not exist (or is not a folder); pass --data DIR with the CIFAR files",
         dir);
  const std::vector<Found> found = find_cifar(dir);
  if (found.empty())
    fail(
        "data folder {}: no CIFAR binaries (CIFAR-10: data_batch_1.bin ... data_batch_5.bin and "
        "test_batch.bin; CIFAR-100: train.bin and test.bin; in the folder or its {}/ or {}/ "
        "subfolder)",
        dir, kCifar10Sub, kCifar100Sub);
  if (found.size() > 1)
    fail("data folder {} holds more than one data set ({} and {}); point --data at one of them",
         dir, describe(found[0]), describe(found[1]));
  const Found& f = found[0];
  Dataset d;
  d.dir = dir;
  d.format = DataFormat::Cifar;
  ImageSet train = empty_set(), test = empty_set();
  auto done = [&] {
    d.train = std::make_shared<ImageSet>(std::move(train));
    d.test = std::make_shared<ImageSet>(std::move(test));
    return d;
  };
  if (f.cifar100) {
    const char* what =
        "a CIFAR-100 binary folder holds train.bin and test.bin (from cifar-100-binary.tar.gz)";
    d.description = "CIFAR-100 binaries";
    read_records(f.root / "train.bin", what, 2, 1, 100, train);  // coarse, fine label bytes
    read_records(f.root / "test.bin", what, 2, 1, 100, test);
    return done();
  }
  d.description = "CIFAR-10 binaries";
  const char* what =
      "a CIFAR-10 binary folder holds data_batch_1.bin ... data_batch_5.bin and test_batch.bin "
      "(from cifar-10-binary.tar.gz; a subset data_batch_1.bin ... data_batch_N.bin will do)";
  const std::set<int> nums = data_batch_numbers(f.root);
  if (!nums.count(1))
    fail("missing data file {}; {}", (f.root / "data_batch_1.bin").string(), what);
  for (int i = 1; i <= *nums.rbegin(); ++i)
    if (!nums.count(i))
      fail(
          "missing data file {}: {} is there, the batches must be numbered from 1 without gaps; "
          "{}",
          (f.root / fmt::format("data_batch_{}.bin", i)).string(),
          (f.root / fmt::format("data_batch_{}.bin", *nums.rbegin())).string(), what);
  for (int i : nums)
    read_records(f.root / fmt::format("data_batch_{}.bin", i), what, 1, 0, 10, train);
  read_records(f.root / "test_batch.bin", what, 1, 0, 10, test);
  return done();
}

}  // namespace cb
