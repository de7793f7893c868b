// The format detection of a --data path and the factory that opens it with its reader (see
// load_dataset.h). Detection looks at file names only; the reader of the detected format then
// checks the content and names whatever is wrong.
#include "runtime/data/load_dataset.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "runtime/data/cifar_dataset.h"
#include "runtime/data/idx_dataset.h"
#include "runtime/data/image_folder.h"
#include "runtime/data/npz_dataset.h"
#include "runtime/data/pack.h"
#include "runtime/error.h"

namespace cb {

namespace fs = std::filesystem;

// ---- detection ---------------------------------------------------------------------------------

namespace {

bool has_file(const fs::path& dir, const char* name) {
  return fs::is_regular_file(dir / name) || fs::is_regular_file(dir / (std::string(name) + ".gz"));
}

// A few of the folder's entries, for the message when nothing is recognised.
std::string listing(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    names.push_back(e.path().filename().string() + (e.is_directory() ? "/" : ""));
  if (names.empty()) return "it is empty";
  std::sort(names.begin(), names.end());
  std::string s = "it holds ";
  const size_t shown = std::min<size_t>(names.size(), 8);
  for (size_t i = 0; i < shown; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > shown) s += fmt::format(" and {} more", names.size() - shown);
  return s;
}

}  // namespace

Dataset load_dataset(const std::string& path, const DataOptions& o) {
  const fs::path p(path);
  std::error_code ec;
  const bool npz_file = p.extension() == ".npz" && fs::is_regular_file(p, ec);
  if (o.format == DataFormat::Npz ||
      (o.format == DataFormat::Auto && (npz_file || has_file(p, "train.npz"))))
    return load_npz_dataset(path, o);
  if (o.format == DataFormat::Pack || (o.format == DataFormat::Auto && fs::is_regular_file(p, ec)))
    return load_pack_dataset(path);
  if (!fs::is_directory(p, ec))
    fail(
        "data folder {} does not exist (or is not a folder); pass --data DIR with IDX files "
        "(MNIST, Fashion-MNIST: Debian's dataset-fashion-mnist installs "
        "/usr/share/datasets/fashion-mnist), CIFAR-10/100 binaries, an image folder "
        "(train/ and val/ of class folders, or class folders), a .cbpack file, or NumPy arrays "
        "(a .npz file, or a folder with train.npz and val.npz)",
        path);
  switch (o.format) {
    case DataFormat::Idx:
      return load_idx_dataset(path);
    case DataFormat::Cifar:
      return load_cifar_dataset(path);
    case DataFormat::Folder:
      return load_image_folder(path, o.val_split);
    default:
      break;
  }
  const char* const idx_files[] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                   "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
  bool idx = false;
  for (const char* f : idx_files) idx = idx || has_file(p, f);
  const bool cifar = looks_like_cifar(path);
  if (idx && cifar)
    fail(
        "data folder {} holds both IDX files (train-images-idx3-ubyte, ...) and CIFAR binaries; "
        "keep one data set per folder (or force one with --data-format idx|cifar)",
        path);
  if (idx) return load_idx_dataset(path);
  if (cifar) return load_cifar_dataset(path);
  if (looks_like_image_folder(path)) return load_image_folder(path, o.val_split);
  fail(
      "data folder {}: no data set recognised ({}); looked for IDX files "
      "(train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, "
      "t10k-labels-idx1-ubyte, optionally .gz), CIFAR-10 binaries (data_batch_1.bin ... "
      "data_batch_5.bin, test_batch.bin, also in cifar-10-batches-bin/), CIFAR-100 binaries "
      "(train.bin, test.bin, also in cifar-100-binary/) and image folders (train/ and val/ of "
      "class folders, or class folders, of .jpg/.jpeg/.png files), and NumPy files (train.npz "
      "with val.npz or test.npz); --data-format forces one",
      path, listing(p));
}

}  // namespace cb
