// NumPy data sets: .npz files as tensor sets (see npz_dataset.h).
#include "runtime/data/npz_dataset.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <random>

#include "runtime/data/npy.h"
#include "runtime/error.h"

namespace cb {

namespace fs = std::filesystem;

namespace {

std::shared_ptr<TensorSet> read_set(const std::string& file, const DataOptions& o) {
  NpyOptions no;
  no.temp_dir = o.temp_dir;
  no.unaligned_ok = true;  // batches copy rows out with memcpy
  std::vector<NpyArray> arrays = read_npz(file, no);
  if (arrays.empty())
    fail("{} holds no arrays; save the data with np.savez(file, x=..., y=...)", file);
  std::vector<TensorColumn> cols;
  for (NpyArray& a : arrays) {
    if (a.shape.empty())
      fail(
          "{}: array '{}' is a scalar; the arrays of a data set hold one row per example (shape "
          "[N, ...])",
          file, a.name);
    TensorColumn c;
    c.name = a.name;
    c.source = a.source;
    c.dtype = a.dtype;
    c.count = a.shape[0];
    c.dims.assign(a.shape.begin() + 1, a.shape.end());
    c.row_bytes = static_cast<size_t>(c.row_elems()) * dtype_size(c.dtype);
    c.data = a.data();
    c.keep = a.keep;
    cols.push_back(std::move(c));
  }
  auto set = std::make_shared<TensorSet>(std::move(cols), file);
  if (set->size() == 0) fail("{} holds no examples (its arrays have 0 rows)", file);
  return set;
}

}  // namespace

Dataset load_npz_dataset(const std::string& path, const DataOptions& o) {
  const fs::path p(path);
  std::error_code ec;
  Dataset d;
  d.dir = path;
  d.format = DataFormat::Npz;
  if (fs::is_directory(p, ec)) {
    const fs::path train = p / "train.npz";
    fs::path test = p / "val.npz";
    if (!fs::exists(test, ec)) test = p / "test.npz";
    if (!fs::exists(train, ec))
      fail("data folder {}: no train.npz (NumPy data is train.npz with val.npz or test.npz)", path);
    if (!fs::exists(test, ec))
      fail(
          "data folder {}: train.npz but no val.npz or test.npz to evaluate on; add one, or pass "
          "{} itself to hold out --val-split of it",
          path, train.string());
    d.train = read_set(train.string(), o);
    d.test = read_set(test.string(), o);
    d.description =
        fmt::format("NumPy arrays ({}, {})", train.filename().string(), test.filename().string());
    return d;
  }
  if (!fs::is_regular_file(p, ec)) fail("data file {} does not exist", path);
  std::shared_ptr<TensorSet> all = read_set(path, o);
  const int64_t n = all->size();
  const auto held = static_cast<int64_t>(std::llround(static_cast<double>(n) * o.val_split));
  if (!(o.val_split > 0) || held < 1 || held >= n)
    fail(
        "{}: one .npz of {} examples with --val-split {} leaves {} for testing and {} for "
        "training; give a split that leaves both some examples, or a folder with train.npz and "
        "val.npz",
        path, n, o.val_split, held, n - held);
  // A fixed pseudo-random choice of the held-out rows (the same on every run, whatever --seed):
  // files are often sorted by target or class.
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(0x6e707a5f73706c74ull);
  for (size_t i = order.size(); i-- > 1;) {
    auto j = static_cast<size_t>((static_cast<unsigned __int128>(rng()) * (i + 1)) >> 64);
    std::swap(order[i], order[j]);
  }
  std::vector<int64_t> test(order.begin(), order.begin() + held),
      train(order.begin() + held, order.end());
  std::sort(test.begin(), test.end());
  std::sort(train.begin(), train.end());
  d.train = std::make_shared<TensorSet>(
      all->subset(std::move(train), fmt::format("{} (training rows)", path)));
  d.test = std::make_shared<TensorSet>(
      all->subset(std::move(test), fmt::format("{} (held-out rows)", path)));
  d.description = fmt::format(
      "NumPy arrays, {:.0f}% of the rows held out for testing (--val-split)", 100 * o.val_split);
  return d;
}

}  // namespace cb
