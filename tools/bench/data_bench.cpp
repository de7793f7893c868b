// cb-bench-data: decode + augment throughput of the data pipeline (runtime/data/pipeline.h) for a
// model's 3x224x224 training transform (random-resized crop + flip + normalisation), from JPEG
// files and from a packed cache, per worker thread.
//   cb-bench-data --make DIR [--images N]   write an ImageNet-style folder of 500x375 JPEGs
//   cb-bench-data DIR [--pack FILE] [--workers W] [--batches B]
// tools/bench/data_pipeline.py runs it next to torchvision and cb-train (see docs/performance.md).
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>

#include "runtime/data/dataset.h"
#include "runtime/data/image.h"
#include "runtime/data/load_dataset.h"
#include "runtime/data/pipeline.h"
#include "runtime/error.h"

using namespace cb;
namespace fs = std::filesystem;

namespace {

// Smooth colour fields with some texture, per class: compresses like a photo (about 40-60 KB at
// quality 90), unlike noise.
void make_folder(const std::string& dir, int images) {
  std::mt19937 rng(1);
  const int classes = 10;
  for (int i = 0; i < images; ++i) {
    const int c = i % classes;
    const bool val = (i / classes) % 10 == 9;  // every 10th image of each class
    Image img;
    img.rows = 375;
    img.cols = 500;
    img.channels = 3;
    img.px.resize(375u * 500 * 3);
    const double fx = 0.01 + 0.002 * (rng() % 10), fy = 0.01 + 0.002 * (rng() % 10);
    for (int y = 0; y < img.rows; ++y)
      for (int x = 0; x < img.cols; ++x)
        for (int ch = 0; ch < 3; ++ch)
          img.px[(static_cast<size_t>(y) * 500 + x) * 3 + ch] = static_cast<uint8_t>(
              110 + 80 * std::sin(fx * x * (ch + 1) + fy * y + c) + (rng() % 24));
    const fs::path p = fs::path(dir) / (val ? "val" : "train") / fmt::format("n{:08d}", c) /
                       fmt::format("img_{:06d}.JPEG", i);
    fs::create_directories(p.parent_path());
    const std::vector<uint8_t> b = encode_jpeg(img, 90);
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
}

double images_per_s(const Dataset& d, int workers, int64_t batches) {
  const TransformSpec spec = plan_transforms(d, {"x", {3, 224, 224}, DType::F32}, {});
  PipelineOptions o;
  o.batch = 32;
  o.workers = workers;
  o.depth = workers + 1;
  BatchPipeline p(d.train, spec, o, d.skipped);
  Tensor img, lab;
  p.next(img, lab);  // the threads are up
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t b = 0; b < batches; ++b) p.next(img, lab);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(batches * o.batch) / s;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cb-bench-data: data pipeline throughput (224x224 training transforms)"};
  std::string dir, make, pack;
  int images = 2000, workers = 1;
  int64_t batches = 20;
  app.add_option("dir", dir, "image folder to read");
  app.add_option("--make", make, "write an ImageNet-style folder of 500x375 JPEGs here");
  app.add_option("--images", images, "--make: how many")->capture_default_str();
  app.add_option("--pack", pack, "also read this .cbpack (cb-pack DIR --out FILE)");
  app.add_option("--workers", workers, "pipeline threads")->capture_default_str();
  app.add_option("--batches", batches, "batches of 32 timed")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    if (!make.empty()) {
      make_folder(make, images);
      fmt::print("made {}: {} JPEGs of 500x375\n", make, images);
      return 0;
    }
    if (dir.empty()) fail("give an image folder (or --make DIR)");
    const Dataset folder = load_dataset(dir);
    const double jpeg = images_per_s(folder, workers, batches);
    fmt::print("jpeg  {} worker{}: {:.0f} images/s ({:.0f} per worker)\n", workers,
               workers == 1 ? "" : "s", jpeg, jpeg / workers);
    if (!pack.empty()) {
      const Dataset packed = load_dataset(pack);
      const double pk = images_per_s(packed, workers, batches);
      fmt::print("pack  {} worker{}: {:.0f} images/s ({:.0f} per worker)\n", workers,
                 workers == 1 ? "" : "s", pk, pk / workers);
    }
    return 0;
  } catch (const Error& e) {
    fmt::print(stderr, "cb-bench-data: error: {}\n", e.what());
    return 1;
  }
}
