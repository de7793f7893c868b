// The SkipLog, image examples as sources (their image and label columns), the in-memory ImageSet,
// and the epoch order.
#include "runtime/data/dataset.h"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/error.h"

namespace cb {

bool SkipLog::add(const std::string& name, const std::string& why) {
  std::lock_guard lock(m_);
  auto it = std::lower_bound(sorted_names_.begin(), sorted_names_.end(), name);
  if (it != sorted_names_.end() && *it == name) return false;
  sorted_names_.insert(it, name);
  entries_.push_back({name, why});
  return true;
}

int64_t SkipLog::count() const {
  std::lock_guard lock(m_);
  return static_cast<int64_t>(entries_.size());
}

std::vector<SkipLog::Entry> SkipLog::since(size_t* cursor) const {
  std::lock_guard lock(m_);
  std::vector<Entry> out;
  for (size_t i = std::min(*cursor, entries_.size()); i < entries_.size(); ++i)
    out.push_back(entries_[i]);
  *cursor = entries_.size();
  return out;
}

std::string skip_summary(const std::vector<SkipLog::Entry>& entries, size_t shown) {
  std::string s =
      fmt::format("{} file{} skipped: ", entries.size(), entries.size() == 1 ? "" : "s");
  for (size_t i = 0; i < std::min(shown, entries.size()); ++i)
    s += fmt::format("{}{} ({})", i ? ", " : "", entries[i].name, entries[i].why);
  if (entries.size() > shown) s += fmt::format(" and {} more", entries.size() - shown);
  return s;
}

std::string ExampleDims::str() const {
  return fixed() ? fmt::format("{}x{}x{}", channels, rows, cols)
                 : fmt::format("{} channel{}, sizes vary", channels, channels == 1 ? "" : "s");
}

int64_t Examples::label_max() const {
  int64_t m = -1;
  for (int64_t i = 0; i < size(); ++i) m = std::max(m, label(i));
  return m;
}

std::vector<ColumnInfo> Examples::columns() const {
  const ExampleDims d = dims();
  ColumnInfo image;
  image.name = "image";
  image.dtype = DType::U8;
  image.dims = {d.channels, d.rows, d.cols};
  image.image = true;
  image.source = origin();
  ColumnInfo label;
  label.name = "label";
  label.dtype = DType::I64;
  label.source = origin();
  return {image, label};
}

bool Examples::read(int64_t i, size_t c, const ReadOptions& o, ColumnValue& out,
                    std::string& why) const {
  CB_CHECK(c < 2);
  out.data = nullptr;
  if (c == 1) {
    out.scalar = label(i);
    out.data = reinterpret_cast<const std::byte*>(&out.scalar);
    return true;
  }
  if (o.stored)
    if (const uint8_t* p = chw(i)) {
      out.data = reinterpret_cast<const std::byte*>(p);
      return true;
    }
  return load(i, o.decode, out.image, why);
}

ExampleDims image_dims(const Source& s) {
  const int c = s.image_column();
  if (c < 0) return {};
  const std::vector<int64_t> d = s.columns()[static_cast<size_t>(c)].dims;
  CB_CHECK(d.size() == 3);
  return {static_cast<int>(d[0]), static_cast<int>(d[1]), static_cast<int>(d[2])};
}

int64_t label_max(const Source& s) {
  if (const auto* e = dynamic_cast<const Examples*>(&s)) return e->label_max();
  const int c = s.column("label");
  if (c < 0) return -1;
  const DType t = s.columns()[static_cast<size_t>(c)].dtype;
  int64_t m = -1;
  ColumnValue v;
  std::string why;
  for (int64_t i = 0; i < s.size(); ++i)
    if (s.read(i, static_cast<size_t>(c), {}, v, why)) m = std::max(m, load_int(t, v.data));
  return m;
}

std::string ImageSet::image_shape() const { return fmt::format("{}x{}x{}", channels, rows, cols); }

std::string ImageSet::name(int64_t i) const {
  return fmt::format("example {} of {}", i, source.empty() ? std::string("the data") : source);
}

ExampleDims ImageSet::dims() const {
  return {static_cast<int>(channels), static_cast<int>(rows), static_cast<int>(cols)};
}

bool ImageSet::load(int64_t i, const DecodeOptions& o, Image& out, std::string& why) const {
  if (i < 0 || i >= count) {
    why = "no such example";
    return false;
  }
  if (o.channels != 1 && o.channels != 3) {
    why = fmt::format("cannot convert {} channels to {}", channels, o.channels);
    return false;
  }
  // CHW planes -> HWC, then the channel conversion decode_image applies (grey <-> RGB).
  const uint8_t* p = chw(i);
  const auto plane = static_cast<size_t>(rows * cols);
  const auto c = static_cast<size_t>(channels);
  thread_local std::vector<uint8_t> hwc;
  hwc.resize(plane * c);
  for (size_t k = 0; k < plane; ++k)
    for (size_t ch = 0; ch < c; ++ch) hwc[k * c + ch] = p[ch * plane + k];
  out.rows = static_cast<int>(rows);
  out.cols = static_cast<int>(cols);
  out.channels = o.channels;
  if (o.channels == channels) {
    out.px.swap(hwc);
  } else {
    out.px.resize(plane * static_cast<size_t>(o.channels));
    convert_channels(hwc.data(), static_cast<int>(channels), out.px.data(), o.channels, plane);
  }
  return true;
}

ImageSet ImageSet::head(int64_t n) const {
  if (n <= 0 || n >= count) return *this;
  ImageSet s;
  s.count = n;
  s.channels = channels;
  s.rows = rows;
  s.cols = cols;
  s.source = source;
  s.pixels.assign(pixels.begin(), pixels.begin() + n * image_elems());
  s.labels.assign(labels.begin(), labels.begin() + n);
  return s;
}

void ImageSet::slice(int64_t begin, int64_t n, Tensor& img, Tensor& lab) const {
  CB_CHECK(begin >= 0 && n >= 0 && begin + n <= count);
  img.dtype = DType::F32;
  img.dims = {n, channels, rows, cols};
  img.bytes.resize(static_cast<size_t>(n * image_elems()) * sizeof(float));
  const uint8_t* src = pixels.data() + begin * image_elems();
  float* dst = img.data<float>();
  for (int64_t k = 0; k < n * image_elems(); ++k) dst[k] = static_cast<float>(src[k]) / 255.0f;
  lab.dtype = DType::I64;
  lab.dims = {n};
  lab.bytes.resize(static_cast<size_t>(n) * sizeof(int64_t));
  std::copy_n(labels.data() + begin, n, lab.data<int64_t>());
}

DataFormat parse_data_format(const std::string& s) {
  if (s == "auto") return DataFormat::Auto;
  if (s == "idx") return DataFormat::Idx;
  if (s == "cifar") return DataFormat::Cifar;
  if (s == "folder") return DataFormat::Folder;
  if (s == "pack") return DataFormat::Pack;
  if (s == "npz") return DataFormat::Npz;
  fail("unknown --data-format '{}' (choices: auto, idx, cifar, folder, pack, npz)", s);
}

const char* data_format_name(DataFormat f) {
  switch (f) {
    case DataFormat::Auto:
      return "auto";
    case DataFormat::Idx:
      return "idx";
    case DataFormat::Cifar:
      return "cifar";
    case DataFormat::Folder:
      return "folder";
    case DataFormat::Pack:
      return "pack";
    case DataFormat::Npz:
      return "npz";
  }
  return "?";
}

// ---- batches -----------------------------------------------------------------------------------

BatchOrder::BatchOrder(int64_t count, int64_t batch, bool shuffle, uint64_t seed)
    : count_(count), batch_(batch), shuffle_(shuffle), seed_(seed), rng_(seed) {
  epoch_batches(count, batch);  // checks them
  order_.resize(static_cast<size_t>(count));
  start_epoch();
}

int64_t BatchOrder::epoch_batches(int64_t count, int64_t batch) {
  if (batch <= 0) fail("batch size must be positive, got {}", batch);
  if (batch > count) fail("batch size {} is larger than the {} training examples", batch, count);
  return count / batch;
}

void BatchOrder::start_epoch() {
  ++epoch_;
  pos_ = 0;
  for (size_t i = 0; i < order_.size(); ++i) order_[i] = static_cast<int64_t>(i);
  if (!shuffle_) return;
  // Fisher-Yates; j uniform in [0, i] by a 64x64->128 multiply (same result on every platform,
  // unlike std::uniform_int_distribution).
  for (size_t i = order_.size(); i-- > 1;) {
    auto j = static_cast<size_t>((static_cast<unsigned __int128>(rng_()) * (i + 1)) >> 64);
    std::swap(order_[i], order_[j]);
  }
}

void BatchOrder::seek(int64_t batches) {
  CB_CHECK(batches >= 0);
  rng_.seed(seed_);
  epoch_ = -1;
  start_epoch();
  const int64_t spe = batches_per_epoch();
  for (int64_t e = 0; e < batches / spe; ++e) start_epoch();
  pos_ = (batches % spe) * batch_;
}

void BatchOrder::next(int64_t* indices) {
  std::copy_n(order_.data() + pos_, batch_, indices);
  pos_ += batch_;
  if (pos_ + batch_ > count_) start_epoch();  // drop the last partial batch
}

}  // namespace cb
