// train_lenet MODEL.onnx FASHION_MNIST_DIR: LeNet-5 trained for one epoch on Fashion-MNIST held
// in memory (read here from the gzipped IDX files), through crossbow's installed C++ API.
// Prints "accuracy A" (the test accuracy after the epoch).
#include <crossbow/crossbow.h>
#include <zlib.h>

#include <cstdio>
#include <string>
#include <vector>

static std::vector<unsigned char> gunzip(const std::string& path) {
  std::vector<unsigned char> out;
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error("cannot open " + path);
  unsigned char buf[1 << 16];
  int got = 0;
  while ((got = gzread(f, buf, sizeof buf)) > 0) out.insert(out.end(), buf, buf + got);
  gzclose(f);
  return out;
}

// Images as float32 [N,1,28,28] in [0,1], labels as int64 [N].
static crossbow::Arrays split(const std::string& dir, const std::string& name) {
  const auto img = gunzip(dir + "/" + name + "-images-idx3-ubyte.gz");
  const auto lab = gunzip(dir + "/" + name + "-labels-idx1-ubyte.gz");
  const int64_t n = static_cast<int64_t>(lab.size() - 8);
  std::vector<float> x(static_cast<size_t>(n) * 784);
  std::vector<int64_t> y(static_cast<size_t>(n));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(img[16 + i]) / 255.0f;
  for (size_t i = 0; i < y.size(); ++i) y[i] = lab[8 + i];
  return {{"x", crossbow::Array::copy_of(x, {n, 1, 28, 28})},
          {"y", crossbow::Array::copy_of(y, {n})}};
}

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: train_lenet MODEL.onnx FASHION_MNIST_DIR\n");
    return 2;
  }
  try {
    crossbow::Options o;
    o.set("epochs", "1").set("learners", "2").set("threads", "1").set("seed", "0");
    crossbow::Trainer t(argv[1], o);
    t.fit(crossbow::Data::arrays(split(argv[2], "train")),
          crossbow::Data::arrays(split(argv[2], "t10k")));
    const double acc = t.evaluate(crossbow::Data::arrays(split(argv[2], "t10k"))).at("accuracy");
    std::printf("accuracy %.6f\n", acc);
    return 0;
  } catch (const crossbow::Error& e) {
    std::fprintf(stderr, "train_lenet: error: %s\n", e.what());
    return 1;
  }
}
