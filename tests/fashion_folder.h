// A Fashion-MNIST image folder for tests: PNG and JPEG files in class folders, written from the
// IDX files (Debian's dataset-fashion-mnist), so that folder and IDX runs can be compared.
#pragma once

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "runtime/data/dataset.h"
#include "runtime/data/image.h"
#include "runtime/data/load_dataset.h"
#include "tests/test_util.h"

namespace cb::test {

inline void write_bytes(const std::filesystem::path& p, const std::vector<uint8_t>& b) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  REQUIRE(f.good());
}

inline Image grey_of(const ImageSet& s, int64_t i) {
  Image img;
  img.rows = static_cast<int>(s.rows);
  img.cols = static_cast<int>(s.cols);
  img.channels = 1;
  img.px.assign(s.chw(i), s.chw(i) + s.image_elems());
  return img;
}
inline Image rgb_of(const Image& g) {
  Image img = g;
  img.channels = 3;
  img.px.resize(g.px.size() * 3);
  for (size_t k = 0; k < g.px.size(); ++k)
    img.px[3 * k] = img.px[3 * k + 1] = img.px[3 * k + 2] = g.px[k];
  return img;
}

// A class folder name whose sorted position is its label.
inline std::string class_name(int64_t label) { return fmt::format("class{:02d}", label); }

// Writes the first n training and m test Fashion-MNIST images as train/<class>/ and val/<class>/:
// even examples as PNG (grey), odd ones as JPEG (RGB, quality 95). Returns the IDX set.
struct FolderFromIdx {
  std::shared_ptr<const Source> train, test;
};
inline FolderFromIdx write_fashion_folder(const std::filesystem::path& root, int64_t n, int64_t m,
                                          bool all_png = false, bool flat = false) {
  Dataset idx = load_dataset("/usr/share/datasets/fashion-mnist");
  for (int split = 0; split < 2; ++split) {
    const ImageSet& s = test::mem(split == 0 ? idx.train : idx.test);
    const int64_t count = split == 0 ? n : m;
    for (int64_t i = 0; i < count; ++i) {
      const Image g = grey_of(s, i);
      std::filesystem::path dir = flat ? root / class_name(s.labels[static_cast<size_t>(i)])
                                       : root / (split == 0 ? "train" : "val") /
                                             class_name(s.labels[static_cast<size_t>(i)]);
      if (all_png || i % 2 == 0)
        write_bytes(dir / fmt::format("{}_{:05d}.png", split, i), encode_png(g));
      else
        write_bytes(dir / fmt::format("{}_{:05d}.JPG", split, i), encode_jpeg(rgb_of(g), 95));
    }
  }
  return {idx.train, idx.test};
}

}  // namespace cb::test
