// libFuzzer target: the data set readers and the batch pipeline. The first byte picks what the
// rest becomes in a fresh folder: 0 IDX images (labels fixed), 1 IDX labels (images fixed),
// 2 CIFAR-10 data_batch_1.bin, 3 a .cbpack; then load_dataset and two batches of each split
// through a BatchPipeline. Bad files must end in cb::Error. Seeds: real files of each kind.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/data/dataset.h"
#include "runtime/data/load_dataset.h"
#include "runtime/data/pipeline.h"
#include "runtime/error.h"

namespace fs = std::filesystem;

namespace {

void put(const fs::path& p, const void* d, size_t n) {
  std::ofstream(p, std::ios::binary)
      .write(static_cast<const char*>(d), static_cast<std::streamsize>(n));
}

// A valid IDX pair of 4 images of 2x2 and its labels.
void idx_files(const fs::path& dir, bool images, bool labels) {
  const uint8_t img[] = {0, 0, 8, 3, 0, 0, 0, 4, 0, 0,  0,  2,  0,  0,  0,  2,
                         1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  const uint8_t lab[] = {0, 0, 8, 1, 0, 0, 0, 4, 0, 1, 2, 3};
  for (const char* split : {"train", "t10k"}) {
    if (images) put(dir / (std::string(split) + "-images-idx3-ubyte"), img, sizeof img);
    if (labels) put(dir / (std::string(split) + "-labels-idx1-ubyte"), lab, sizeof lab);
  }
}

}  // namespace

// One input; returns 0. Only cb::Error is caught: anything else escapes (a bug).
int fuzz_data(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const fs::path dir =
      fs::temp_directory_path() / ("cb_fuzz_data_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const uint8_t kind = data[0] % 4;
  const uint8_t* body = data + 1;
  const size_t n = size - 1;
  std::string path = dir.string();
  switch (kind) {
    case 0:
      idx_files(dir, false, true);
      put(dir / "train-images-idx3-ubyte", body, n);
      put(dir / "t10k-images-idx3-ubyte", body, n);
      break;
    case 1:
      idx_files(dir, true, false);
      put(dir / "train-labels-idx1-ubyte", body, n);
      put(dir / "t10k-labels-idx1-ubyte", body, n);
      break;
    case 2:
      put(dir / "data_batch_1.bin", body, n);
      put(dir / "test_batch.bin", body, n);
      break;
    default:
      path = (dir / "data.cbpack").string();
      put(path, body, n);
      break;
  }
  try {
    cb::Dataset d = cb::load_dataset(path);
    const cb::ExampleDims dims = cb::image_dims(*d.train);
    const int c = dims.channels == 1 ? 1 : 3;
    const int side = dims.fixed() ? dims.rows : 8;
    const int cols = dims.fixed() ? dims.cols : 8;
    cb::TransformSpec spec = cb::plan_transforms(d, {"x", {c, side, cols}, cb::DType::F32}, {});
    for (bool train : {true, false}) {
      cb::PipelineOptions o;
      o.batch = 1;
      o.train = train;
      o.workers = 1;
      cb::BatchPipeline p(train ? d.train : d.test, spec, o, d.skipped);
      cb::Tensor img, lab;
      for (int b = 0; b < 2 && p.next(img, lab); ++b) {
      }
    }
  } catch (const cb::Error&) {
  }
  return 0;
}

#ifndef CB_FUZZ_NO_MAIN  // tests/test_fuzz_regressions.cpp calls fuzz_data() on saved inputs
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz_data(data, size);
}
#endif
