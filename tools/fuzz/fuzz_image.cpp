// libFuzzer target: JPEG and PNG decoding (runtime/data/image.h) to grey and RGB, with and
// without DCT scaling, then a crop-resize of what decodes. decode_image must return false for
// anything it cannot decode, never crash. Seeds: JPEG/PNG files (tools/fuzz/run.sh makes some).
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>

#include "runtime/data/image.h"

// One input; returns 0. Only cb::Error is caught: anything else escapes (a bug).
int fuzz_image(const uint8_t* data, size_t size) {
  cb::Image img;
  std::string why;
  for (int channels : {1, 3}) {
    cb::DecodeOptions o;
    o.channels = channels;
    o.min_side = size > 0 ? data[size - 1] : 0;
    if (cb::decode_image(data, size, o, img, why) && img.rows > 0 && img.cols > 0) {
      std::mt19937_64 rng(size);
      const cb::CropBox box = cb::random_resized_crop_box(img.rows, img.cols, rng);
      cb::Image out = cb::crop_resize(img, box, 16, 16);
      cb::flip_horizontal(out);
    }
  }
  return 0;
}

#ifndef CB_FUZZ_NO_MAIN  // tests/test_fuzz_regressions.cpp calls fuzz_image() on saved inputs
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz_image(data, size);
}
#endif
