// Transforms and the batch pipeline (see pipeline.h).
#include "runtime/data/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "runtime/copy_bytes.h"
#include "runtime/error.h"

namespace cb {

namespace {

// splitmix64: the seed of example i's generator in epoch e (independent streams per example).
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t example_seed(uint64_t seed, int64_t epoch, int64_t i) {
  return mix(mix(mix(seed) ^ static_cast<uint64_t>(epoch)) ^ static_cast<uint64_t>(i));
}

// --augment auto's thresholds (see pipeline.h): inputs or data at most this long on their longer
// side get CIFAR's recipe; square inputs at least this big ImageNet's; others the mild scale.
// 0.25 rather than 0.5: PaddleOCR's direction classifier (48x192) on 400 text strips, one epoch,
// three seeds, reached 100/100/100% with 0.25 and 86/90/100% with 0.5 (ImageNet's 0.08 with the
// centred aspect 46/84/100%).
constexpr int kSmallSide = 64, kImageNetSide = 160;
constexpr double kMildScale = 0.25;

const float kImageNetMean[3] = {0.485f, 0.456f, 0.406f};
const float kImageNetStd[3] = {0.229f, 0.224f, 0.225f};

std::string dims_text(const std::vector<int64_t>& d) {
  std::string s = "[N";
  for (int64_t v : d) s += fmt::format(",{}", v);
  return s + "]";
}

void write_chw(const Image& img, const TransformSpec& s, void* out) {
  CB_CHECK(img.rows == s.rows && img.cols == s.cols && img.channels == s.channels);
  if (s.dtype == DType::U8) {
    auto* o = static_cast<uint8_t*>(out);
    const size_t plane = static_cast<size_t>(s.rows) * static_cast<size_t>(s.cols);
    for (size_t k = 0; k < plane; ++k)
      for (int c = 0; c < s.channels; ++c)
        o[static_cast<size_t>(c) * plane + k] = img.px[k * static_cast<size_t>(s.channels) + c];
    return;
  }
  to_chw_f32(img, s.mean.data(), s.std.data(), static_cast<float*>(out));
}

// What a few training images (up to 9, spread over the set) say about the data, for the choice
// of augmentation, at the cost of a few decodes: their median longer side (0 when none loads)
// and whether they are all grey (R = G = B everywhere, or decoded to the model's one channel).
struct SampledImages {
  int side = 0;
  bool grey = false;
};

SampledImages sample_images(const Examples& ex, int channels) {
  const ExampleDims dd = ex.dims();
  const int64_t n = std::min<int64_t>(ex.size(), 9);
  std::vector<int> sides;
  bool grey = true;
  DecodeOptions o;
  o.channels = channels;
  Image img;
  std::string why;
  for (int64_t k = 0; k < n; ++k) {
    if (!ex.load(k * ex.size() / n, o, img, why)) continue;
    sides.push_back(std::max(img.rows, img.cols));
    for (size_t p = 0; grey && img.channels == 3 && p + 2 < img.px.size(); p += 3)
      grey = img.px[p] == img.px[p + 1] && img.px[p] == img.px[p + 2];
  }
  SampledImages out;
  out.grey = !sides.empty() && grey;
  if (dd.fixed()) {
    out.side = std::max(dd.rows, dd.cols);
  } else if (!sides.empty()) {
    std::nth_element(sides.begin(), sides.begin() + sides.size() / 2, sides.end());
    out.side = sides[sides.size() / 2];
  }
  return out;
}

// --augment auto (and crop): which augmentation, and the evaluation margin (see pipeline.h).
void choose_augmentation(TransformSpec& s, const Dataset& data, const TransformOptions& o) {
  const int H = s.rows, W = s.cols;
  const double aspect = static_cast<double>(W) / H;
  const bool squarish = aspect >= 3.0 / 4.0 && aspect <= 4.0 / 3.0;
  const bool imagenet_size = squarish && std::min(H, W) >= kImageNetSide;
  // Evaluation: torchvision's 256/224 margin for ImageNet-size inputs only, however training is
  // augmented (a pretrained model is evaluated as it was measured).
  s.eval_margin = imagenet_size && data.photos ? 256.0 / 224.0 : 1.0;
  if (!s.augment) return;
  const bool wide = W >= 2 * H;
  s.flip = o.flip && !(o.augment == AugmentMode::Auto && wide);
  std::string no_flip = !o.flip ? "--no-flip" : "wide input: mirrored text is no text";
  if (o.augment == AugmentMode::Crop) {  // the ImageNet recipe, as asked
    s.why = !s.flip ? fmt::format("--augment crop: ImageNet's recipe; {}", no_flip)
                    : std::string("--augment crop: ImageNet's recipe");
    return;
  }
  const SampledImages sampled = sample_images(*data.train, s.channels);
  const int data_side = sampled.side;
  std::vector<std::string> why;
  if (std::max(H, W) <= kSmallSide || (data_side > 0 && data_side <= kSmallSide)) {
    const std::string small = std::max(H, W) <= kSmallSide
                                  ? std::string("small")
                                  : fmt::format("small (about {} px)", data_side);
    if (sampled.grey) {
      // Grey scans (digits, garments), centred by construction: a milder shift on half the
      // examples, no flip (see pipeline.h for the measurements).
      s.pad_rows = std::max(1, static_cast<int>(std::lround(H / 16.0)));
      s.pad_cols = std::max(1, static_cast<int>(std::lround(W / 16.0)));
      s.pad_prob = 0.5;
      s.flip = false;
      why.push_back(fmt::format("{} grey images: CIFAR's recipe, milder", small));
      if (o.flip) no_flip = "grey scans (digits, garments): a flip costs accuracy";
    } else {
      s.pad_rows = std::max(1, H / 8);
      s.pad_cols = std::max(1, W / 8);
      why.push_back(fmt::format("{} images: CIFAR's recipe", small));
    }
  } else {
    s.scale_lo = imagenet_size ? 0.08 : kMildScale;
    s.ratio_lo = 3.0 / 4.0 * aspect;
    s.ratio_hi = 4.0 / 3.0 * aspect;
    why.push_back(imagenet_size ? std::string("photos at ImageNet's size")
                                : std::string("a milder scale: not a square input >= 160"));
  }
  if (!s.flip) why.push_back(no_flip);
  s.why = fmt::format("{}", fmt::join(why, "; "));
}

}  // namespace

int TransformSpec::eval_resize() const {
  return static_cast<int>(std::lround(std::max(rows, cols) * eval_margin));
}

std::pair<int, int> TransformSpec::eval_size(int img_rows, int img_cols) const {
  return cover_size(img_rows, img_cols, rows, cols, eval_margin);
}

std::string TransformSpec::describe() const {
  std::string norm = dtype == DType::U8 ? std::string("uint8 pixels as they are")
                                        : fmt::format("(x/255 - mean) / std, mean {} std {}",
                                                      fmt::join(mean, ","), fmt::join(std, ","));
  std::string aug = "no augmentation (the evaluation transform)";
  if (augment) {
    if (pad_rows > 0) {
      aug = pad_rows == pad_cols ? fmt::format("pad {}", pad_rows)
                                 : fmt::format("pad {}x{}", pad_rows, pad_cols);
      aug += fmt::format(" + random crop {}x{}", rows, cols);
      if (pad_prob < 1.0)
        aug += pad_prob == 0.5 ? std::string(" on half the examples")
                               : fmt::format(" with probability {:.3g}", pad_prob);
    } else {
      const double aspect = static_cast<double>(cols) / rows;
      aug = fmt::format("random-resized crop scale {:.3g}-{:.3g}, ratio {:.3g}-{:.3g}", scale_lo,
                        scale_hi, ratio_lo, ratio_hi);
      const double mid = std::sqrt(ratio_lo * ratio_hi);
      if (std::abs(mid - 1.0) > 1e-6)
        aug += fmt::format(" around {}x{}'s {:.3g}", rows, cols, aspect);
    }
    aug += flip ? " + flip" : ", no flip";
    if (!why.empty()) aug += fmt::format(" ({})", why);
  }
  const std::string eval =
      eval_margin > 1.0
          ? fmt::format("{}x{} as is, else shorter side to {} + centre crop", rows, cols,
                        eval_resize())
          : fmt::format("{}x{} as is, else resized to cover it (aspect kept) + centre crop", rows,
                        cols);
  return fmt::format("{}x{}x{}; training {}; evaluation: {}; {}", channels, rows, cols, aug, eval,
                     norm);
}

AugmentMode parse_augment(const std::string& s) {
  if (s == "auto") return AugmentMode::Auto;
  if (s == "none") return AugmentMode::None;
  if (s == "crop") return AugmentMode::Crop;
  fail("unknown --augment '{}' (choices: auto, none, crop)", s);
}

TransformSpec plan_transforms(const Dataset& data, const ModelInput& in,
                              const TransformOptions& o) {
  const ExampleDims dd = data.train->dims();
  for (int64_t d : in.dims)
    if (d <= 0)
      fail("model input '{}' has a size that is not fixed ({}): give the model fixed sizes",
           in.name, dims_text(in.dims));
  if (in.dtype != DType::F32 && in.dtype != DType::U8)
    fail("model input '{}' is {}: images are fed as float32 (or uint8 pixels)", in.name,
         dtype_name(in.dtype));
  TransformSpec s;
  s.dtype = in.dtype;
  const bool image_model =
      in.dims.size() == 3 && (in.dims[0] == 1 || in.dims[0] == 3) && in.dims[1] > 0;
  int64_t want = 1;
  for (int64_t d : in.dims) want *= d;
  const int64_t have = dd.fixed() ? static_cast<int64_t>(dd.channels) * dd.rows * dd.cols : -1;
  if (data.photos && image_model) {
    // Photographs are resized and converted to whatever the model takes.
    s.channels = static_cast<int>(in.dims[0]);
    s.rows = static_cast<int>(in.dims[1]);
    s.cols = static_cast<int>(in.dims[2]);
  } else if (!data.photos && have == want) {
    // IDX/CIFAR: the data's own pixels, reshaped to the input (a flat [N,784] takes 1x28x28).
    s.channels = dd.channels;
    s.rows = dd.rows;
    s.cols = dd.cols;
  } else {
    fail(
        "model input '{}' is {} but the images of the {} are {} ({} values each); this model does "
        "not fit this data set{}",
        in.name, dims_text(in.dims), data.description, dd.str(),
        have >= 0 ? fmt::format("{}", have) : std::string("varying"),
        data.photos ? " (image folders and packs are resized to a model of images, which takes "
                      "[N,C,H,W] with C = 1 or 3)"
                    : " (IDX and CIFAR images are fed as they are: the model must take their "
                      "size)");
  }
  s.augment = o.augment == AugmentMode::Crop || (o.augment == AugmentMode::Auto && data.photos);
  if (s.augment && !image_model)
    fail("--augment crop needs a model that takes images [N,C,H,W]; model input '{}' is {}",
         in.name, dims_text(in.dims));
  choose_augmentation(s, data, o);
  auto per_channel = [&](const std::vector<float>& v, const char* flag) {
    if (v.size() == 1) return std::vector<float>(static_cast<size_t>(s.channels), v[0]);
    if (v.size() != static_cast<size_t>(s.channels))
      fail("{} has {} values; give 1, or one per channel ({})", flag, v.size(), s.channels);
    return v;
  };
  if (!o.mean.empty()) {
    s.mean = per_channel(o.mean, "--mean");
  } else if (data.photos) {
    s.mean = s.channels == 3 ? std::vector<float>(kImageNetMean, kImageNetMean + 3)
                             : std::vector<float>{0.449f};  // ImageNet's, for grey images
  } else {
    s.mean.assign(static_cast<size_t>(s.channels), 0.0f);
  }
  if (!o.std.empty()) {
    s.std = per_channel(o.std, "--std");
  } else if (data.photos) {
    s.std = s.channels == 3 ? std::vector<float>(kImageNetStd, kImageNetStd + 3)
                            : std::vector<float>{0.226f};
  } else {
    s.std.assign(static_cast<size_t>(s.channels), 1.0f);
  }
  for (float v : s.std)
    if (!(v > 0)) fail("--std values must be positive, got {}", v);
  for (float v : s.mean)
    if (!std::isfinite(v)) fail("--mean values must be finite, got {}", v);
  return s;
}

namespace {

// The evaluation transform's geometry: `img` resized to cover HxW, centre-cropped.
Image eval_image(const Image& img, const TransformSpec& s) {
  if (img.rows == s.rows && img.cols == s.cols) return img;
  const auto [r, c] = s.eval_size(img.rows, img.cols);
  const Image big = resize(img, r, c);
  return crop(big, center_crop_box(r, c, s.rows, s.cols));
}

}  // namespace

Image augment_image(const Image& img, const TransformSpec& s, std::mt19937_64& rng, CropBox* box,
                    bool* flipped) {
  Image t;
  CropBox b;
  if (s.pad_rows > 0 || s.pad_cols > 0) {
    // torchvision's RandomCrop(padding): the top, then the left offset, in the padded image.
    const Image fit = eval_image(img, s);
    b.height = s.rows;
    b.width = s.cols;
    // With pad_prob < 1, first whether the example is moved at all (else the centre, as is).
    if (s.pad_prob >= 1.0 || std::uniform_real_distribution<double>(0.0, 1.0)(rng) < s.pad_prob) {
      b.top = std::uniform_int_distribution<int>(0, 2 * s.pad_rows)(rng) - s.pad_rows;
      b.left = std::uniform_int_distribution<int>(0, 2 * s.pad_cols)(rng) - s.pad_cols;
    }
    t = crop_padded(fit, b);
  } else {
    b = random_resized_crop_box(img.rows, img.cols, rng, s.scale_lo, s.scale_hi, s.ratio_lo,
                                s.ratio_hi);
    t = crop_resize(img, b, s.rows, s.cols);
  }
  const bool f = s.flip && (rng() >> 63);
  if (f) flip_horizontal(t);
  if (box) *box = b;
  if (flipped) *flipped = f;
  return t;
}

void transform_example(const Image& img, const TransformSpec& s, bool augment, std::mt19937_64& rng,
                       void* out) {
  if (augment) {
    write_chw(augment_image(img, s, rng), s, out);
  } else if (img.rows == s.rows && img.cols == s.cols) {
    write_chw(img, s, out);
  } else {
    write_chw(eval_image(img, s), s, out);
  }
}

int default_workers(int learner_threads) {
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, hw - learner_threads);
}

// ---- the pipeline ------------------------------------------------------------------------------

MakeBatch image_batches(std::shared_ptr<const Examples> examples, const TransformSpec& spec,
                        bool augment, uint64_t seed, std::shared_ptr<SkipLog> skipped) {
  CB_CHECK(examples && skipped);
  return [ex = std::move(examples), spec, augment, seed, skipped = std::move(skipped)](
             const std::vector<int64_t>& idx, int64_t epoch, Batch& b) {
    const auto n = static_cast<int64_t>(idx.size());
    const int64_t per = static_cast<int64_t>(spec.channels) * spec.rows * spec.cols;
    const size_t esize = spec.dtype == DType::U8 ? 1 : sizeof(float);
    b.inputs.resize(1);
    Tensor& images = b.inputs[0];
    images.dtype = spec.dtype;
    images.dims = {n, spec.channels, spec.rows, spec.cols};
    images.bytes.resize(static_cast<size_t>(n * per) * esize);
    b.target.dtype = DType::I64;
    b.target.dims = {n};
    b.target.bytes.resize(static_cast<size_t>(n) * sizeof(int64_t));
    auto* out = reinterpret_cast<uint8_t*>(images.bytes.data());
    int64_t* lab = b.target.data<int64_t>();
    const ExampleDims dd = ex->dims();
    // In-memory examples already at the output's size: straight from their pixels.
    const bool direct = !augment && dd.fixed() && dd.channels == spec.channels &&
                        dd.rows == spec.rows && dd.cols == spec.cols && ex->chw(0) != nullptr;
    DecodeOptions dopt;
    dopt.channels = spec.channels;
    dopt.min_side = augment ? std::max(spec.rows, spec.cols) : spec.eval_resize();
    Image img;
    std::string why;
    const int64_t count = ex->size();
    for (int64_t k = 0; k < n; ++k) {
      int64_t i = idx[static_cast<size_t>(k)];
      void* dst = out + static_cast<size_t>(k * per) * esize;
      if (direct) {
        const uint8_t* p = ex->chw(i);
        if (spec.dtype == DType::U8) {
          copy_bytes(dst, p, static_cast<size_t>(per));
        } else {
          auto* f = static_cast<float*>(dst);
          const int64_t plane = static_cast<int64_t>(spec.rows) * spec.cols;
          for (int64_t c = 0; c < spec.channels; ++c) {
            const float m = spec.mean[static_cast<size_t>(c)],
                        sd = spec.std[static_cast<size_t>(c)];
            for (int64_t q = 0; q < plane; ++q)
              f[c * plane + q] = (static_cast<float>(p[c * plane + q]) / 255.0f - m) / sd;
          }
        }
        lab[k] = ex->label(i);
        continue;
      }
      // An example that cannot be loaded is replaced by the next loadable one.
      int64_t tries = 0;
      while (!ex->load(i, dopt, img, why)) {
        skipped->add(ex->name(i), why);
        if (++tries >= count)
          fail("none of the {} examples could be loaded ({}: {})", count, ex->name(i), why);
        i = (i + 1) % count;
      }
      std::mt19937_64 rng(example_seed(seed, epoch, i));
      transform_example(img, spec, augment, rng, dst);
      lab[k] = ex->label(i);
    }
  };
}

BatchPipeline::BatchPipeline(std::shared_ptr<const Examples> examples, const TransformSpec& spec,
                             const PipelineOptions& o, std::shared_ptr<SkipLog> skipped)
    : BatchPipeline(
          examples ? examples->size() : 0,
          image_batches(examples, spec, o.train && spec.augment, o.seed, std::move(skipped)), o) {}

BatchPipeline::BatchPipeline(int64_t count, MakeBatch make, const PipelineOptions& o)
    : count_(count), make_(std::move(make)), o_(o) {
  CB_CHECK(make_ && o.workers >= 0 && o.batch >= 1);
  if (o.train) {
    order_ = std::make_unique<BatchOrder>(count_, o.batch, o.shuffle, o.seed);
    order_->seek(o.start);
    CB_CHECK(o.period == 0 || (o.take >= 1 && o.first >= 0 && o.first + o.take <= o.period));
  } else {
    eval_count_ = o.limit > 0 ? std::min(o.limit, count_) : count_;
    end_ = (eval_count_ + o.batch - 1) / o.batch;
    if (o.period > 0) {  // batches first, first + period, ... of the pass
      CB_CHECK(o.take == 1 && o.first >= 0 && o.first < o.period);
      end_ = end_ > o.first ? (end_ - o.first + o.period - 1) / o.period : 0;
    }
  }
  if (o.workers == 0) return;  // made in next(), on the caller's thread
  const int depth = o.depth > 0 ? o.depth : 2 * o.workers + 2;
  slots_.resize(static_cast<size_t>(depth));
  threads_.reserve(static_cast<size_t>(o.workers));
  try {
    for (int w = 0; w < o.workers; ++w) threads_.emplace_back([this] { work(); });
  } catch (...) {
    {
      std::lock_guard lock(m_);
      stop_ = true;
    }
    free_cv_.notify_all();
    for (std::thread& t : threads_) t.join();
    fail("cannot start the data pipeline's {} worker threads (the system refused a thread)",
         o.workers);
  }
}

BatchPipeline::~BatchPipeline() {
  {
    std::lock_guard lock(m_);
    stop_ = true;
  }
  free_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void BatchPipeline::work() {
  std::vector<int64_t> idx;
  for (;;) {
    int64_t seq = 0, epoch = 0;
    {
      std::unique_lock lock(m_);
      free_cv_.wait(lock, [&] {
        return stop_ || ((end_ < 0 || claim_ < end_) &&
                         claim_ < head_ + static_cast<int64_t>(slots_.size()));
      });
      if (stop_) return;
      seq = claim_++;
      // The sequence's indices are drawn in claim order, so the order is the same with any
      // number of workers.
      epoch = draw(seq, idx);
    }
    Slot& s = slots_[static_cast<size_t>(seq % static_cast<int64_t>(slots_.size()))];
    try {
      s.error = nullptr;
      make_(idx, epoch, s.batch);
      made_ += static_cast<int64_t>(idx.size());
    } catch (...) {
      s.error = std::current_exception();
    }
    {
      std::lock_guard lock(m_);
      s.seq = seq;
      s.ready = true;
    }
    ready_cv_.notify_all();
  }
}

int64_t BatchPipeline::draw(int64_t seq, std::vector<int64_t>& idx) {
  if (order_) {
    if (o_.period > 0) {  // the batches of other learners before this one: drawn, not made
      const int64_t at = seq / o_.take * o_.period + o_.first + seq % o_.take;
      skip_idx_.resize(static_cast<size_t>(o_.batch));
      for (; drawn_ < at; ++drawn_) order_->next(skip_idx_.data());
    }
    ++drawn_;
    const int64_t epoch = order_->epoch();
    idx.resize(static_cast<size_t>(o_.batch));
    order_->next(idx.data());
    return epoch;
  }
  const int64_t at = o_.period > 0 ? seq * o_.period + o_.first : seq;
  const int64_t begin = at * o_.batch, n = std::min(o_.batch, eval_count_ - begin);
  idx.resize(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) idx[static_cast<size_t>(k)] = begin + k;
  return 0;
}

bool BatchPipeline::next(Tensor& images, Tensor& labels) {
  Batch b;
  if (!next(b)) return false;
  CB_CHECK(b.inputs.size() == 1);
  images = std::move(b.inputs[0]);
  labels = std::move(b.target);
  return true;
}

bool BatchPipeline::next(Batch& out) {
  if (o_.workers == 0) {
    if (end_ >= 0 && head_ >= end_) return false;
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t epoch = draw(head_++, inline_idx_);
    make_(inline_idx_, epoch, out);
    made_ += static_cast<int64_t>(inline_idx_.size());
    wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return true;
  }
  std::unique_lock lock(m_);
  if (end_ >= 0 && head_ >= end_) return false;
  Slot& s = slots_[static_cast<size_t>(head_ % static_cast<int64_t>(slots_.size()))];
  if (!(s.ready && s.seq == head_)) {
    const auto t0 = std::chrono::steady_clock::now();
    ready_cv_.wait(lock, [&] { return s.ready && s.seq == head_; });
    wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  if (s.error) {
    std::exception_ptr e = s.error;
    s.error = nullptr;
    std::rethrow_exception(e);
  }
  std::swap(out, s.batch);
  s.ready = false;
  ++head_;
  lock.unlock();
  free_cv_.notify_all();
  return true;
}

}  // namespace cb
