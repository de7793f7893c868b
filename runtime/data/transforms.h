// The transforms of an image column: matched to the model's input (plan_transforms), and applied
// to each example by the feed (runtime/data/feed.h make_batches) on the pipeline's workers.
//
// Transforms (TransformSpec, from plan_transforms), for a model input of C x H x W:
//  - training, --augment auto (the default; image folders and packs only, IDX and CIFAR are fed
//    as they are), chosen to fit the input and the data, and printed with the reason:
//    - small images (the input's longer side <= 64, or the data's images that small: the median
//      of a few sampled): the CIFAR recipe, the image brought to HxW as for evaluation, padded
//      with zeros by H/8 and W/8 (4 for 32) and cropped back to HxW at a random offset; for grey
//      images (the sampled ones R = G = B, or a 1-channel input: digit and garment scans,
//      centred by construction) a milder one: pad H/16 and W/16 rounded (2 for 28 and 32), the
//      padded crop on half the examples (the rest as they are), and no flip. Fashion-MNIST as
//      PNGs, LeNet-5, one epoch, against the IDX files (mean of 5-30 paired seeds): CIFAR's
//      pad 3 + flip -3.9 points (27 of 30 seeds more than 2 under); without flip, pad 3 always
//      -3.3, pad 2 always -1.1, pad 3 on half -0.5, pad 1 always +0.1, this +0.2 (30 seeds,
//      worst -2.0); a flip cost 0.6-2.2 points at every pad tried;
//    - photos at ImageNet's size (the input roughly square, aspect 3/4-4/3, and >= 160): the
//      ImageNet recipe, RandomResizedCrop(scale 0.08-1, ratio 3/4-4/3);
//    - any other input (smaller, or not square, such as a 48x192 text line): a random-resized
//      crop with the milder scale 0.25-1 (a quarter of the picture at least, about half of each
//      side, so a text line keeps a good part of its text), its aspect-ratio range
//      [3/4, 4/3] x W/H centred (in log space) on the input's aspect;
//    then a horizontal flip with probability 1/2, except for small grey images (above), wide
//    inputs (W >= 2H: text lines, whose mirror image is no text; a 0/180-degree direction
//    classifier must not see mirrored strips) and with --no-flip;
//  - --augment crop: the ImageNet recipe whatever the input (RandomResizedCrop(scale 0.08-1,
//    ratio 3/4-4/3) + flip unless --no-flip); --augment none: the evaluation transform;
//  - evaluation, and training without augmentation: an image of exactly HxW is used as it is;
//    any other is resized, keeping its aspect, to cover HxW and centre-cropped, so a 100x300
//    strip for a 48x192 input loses only its ends and one of the input's aspect is resized to
//    exactly HxW. ImageNet-size inputs (as above) keep torchvision's 256/224 margin
//    (Resize(256) + CenterCrop(224)), the protocol their pretrained models were measured with;
//  - ToTensor + Normalize: (x / 255 - mean[c]) / std[c]; ImageNet's mean and std for image
//    folders and packs, 0 and 1 (plain x / 255, as before) for IDX and CIFAR, --mean/--std to
//    override; a model whose input is uint8 gets the pixels as they are.
//  Channels are converted to the model's (grey <-> RGB, alpha dropped).
//  The random numbers of example i in epoch e come from its own generator, seeded from (seed, e,
//  i): a batch is the same whichever worker makes it and however many workers there are.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "runtime/data/dataset.h"
#include "runtime/dtype.h"

namespace cb {

struct TransformSpec {
  int channels = 0, rows = 0, cols = 0;  // what each example becomes (the model's input)
  bool augment = false;                  // training: the augmentation below
  // The augmentation: pad_rows/pad_cols > 0: the CIFAR recipe (zero padding by that much, a
  // random HxW crop); else a random-resized crop with these scale and aspect-ratio (W/H) ranges.
  int pad_rows = 0, pad_cols = 0;
  double pad_prob = 1.0;  // the padded crop's chance per example (else the image as it is)
  double scale_lo = 0.08, scale_hi = 1.0, ratio_lo = 3.0 / 4.0, ratio_hi = 4.0 / 3.0;
  bool flip = true;              // then a horizontal flip with probability 1/2
  std::string why;               // why the augmentation was chosen, for describe()
  double eval_margin = 1.0;      // evaluation: cover HxW x this (256/224 for ImageNet-size inputs)
  std::vector<float> mean, std;  // per channel (f32 output)
  DType dtype = DType::F32;      // F32 (normalised) or U8 (pixels as they are)
  // The shorter side an image may be shrunk to (decoding, packs) without losing what the
  // transforms use: max(H, W) x eval_margin.
  int eval_resize() const;
  // The size the evaluation transform resizes an img_rows x img_cols image to before its centre
  // crop (cover_size with eval_margin).
  std::pair<int, int> eval_size(int img_rows, int img_cols) const;
  std::string describe() const;  // for cb-train's start-up lines: what, and why
};

enum class AugmentMode { Auto, None, Crop };  // --augment auto | none | crop
AugmentMode parse_augment(const std::string& s);

struct TransformOptions {
  AugmentMode augment = AugmentMode::Auto;
  bool flip = true;              // false: --no-flip
  std::vector<float> mean, std;  // empty: the data set's default
};

// The model's input per example (dims after the batch N) and its dtype.
struct ModelInput {
  std::string name;
  std::vector<int64_t> dims;
  DType dtype = DType::F32;
  // An integer input that indexes the rows of a table (token ids into an embedding's Gather):
  // every value must lie in [-index_rows, index_rows) (ONNX's Gather: negative ones count from
  // the end); 0: no such bound. index_node names the node (its label) for messages.
  int64_t index_rows = 0;
  std::string index_node;
};

// Matches the data to the model's input and chooses the transforms. Throws cb::Error, before
// anything is built, when the data cannot be shaped to the input (naming both), or when --mean /
// --std do not have one value (or one per channel).
TransformSpec plan_transforms(const Dataset& data, const ModelInput& in, const TransformOptions& o);

// Applies the training (augment = true) or evaluation transform of `spec` to `img` into `out`
// (spec.rows x spec.cols x spec.channels values of spec.dtype, CHW). `rng` draws the crop and flip.
void transform_example(const Image& img, const TransformSpec& spec, bool augment,
                       std::mt19937_64& rng, void* out);
// The training transform's geometry alone: the augmented image (spec.rows x spec.cols), the box
// it was cut from (in `img`'s coordinates; for the padded crop, in those of `img` brought to HxW,
// reaching outside it) and whether it was flipped.
Image augment_image(const Image& img, const TransformSpec& spec, std::mt19937_64& rng,
                    CropBox* box = nullptr, bool* flipped = nullptr);

// The seed of example i's generator in epoch e: independent streams per example (splitmix64),
// so that an example is transformed the same whichever worker makes it.
uint64_t example_seed(uint64_t seed, int64_t epoch, int64_t i);

}  // namespace cb
