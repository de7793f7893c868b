// cb-pack DIR --out FILE.cbpack [--size S] [--val-split F] [--workers N]
// Decodes an image folder once into a packed cache (runtime/data/pack.h) that cb-train reads with
// --data FILE.cbpack (or --cache FILE.cbpack), so later epochs and runs skip JPEG decoding.
// Files that are not images, or fail to decode, are left out and named. Exit codes: 0 packed;
// 1 bad input (the folder, the output); 2 usage.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <new>
#include <thread>

#include "runtime/data/pack.h"
#include "runtime/error.h"

using namespace cb;

int main(int argc, char** argv) {
  CLI::App app{"cb-pack: decode an image folder once into a .cbpack for cb-train"};
  std::string dir, out;
  PackOptions o;
  o.workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  app.add_option("dir", dir, "image folder (train/<class>/ and val/<class>/, or <class>/)")
      ->required();
  app.add_option("--out,-o", out, "the pack to write (FILE.tmp until complete)")->required();
  app.add_option("--size", o.size,
                 "the shorter side of the stored images (larger images are resized to it)")
      ->capture_default_str();
  app.add_option("--val-split", o.val_split,
                 "class folders without train/ and val/: the fraction of each class held out")
      ->capture_default_str();
  app.add_option("--workers", o.workers, "decoding threads")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    const auto t0 = std::chrono::steady_clock::now();
    double last = 0;
    o.on_progress = [&](int64_t done, int64_t total) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (s - last < 5 && done != total) return;
      last = s;
      fmt::print("packed   {} / {} images, {:.0f} images/s\n", done, total,
                 done / std::max(s, 1e-9));
      std::fflush(stdout);
    };
    PackSummary sum = write_pack(dir, out, o);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!sum.skipped.empty())
      fmt::print(stderr, "cb-pack: warning: {}\n", skip_summary(sum.skipped));
    fmt::print(
        "wrote    {}: {} training + {} test images, shorter side {}, {:.1f} MiB in {:.1f} s\n", out,
        sum.train, sum.test, o.size, static_cast<double>(sum.bytes) / (1 << 20), s);
    return 0;
  } catch (const Error& e) {
    fmt::print(stderr, "cb-pack: error: {}\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "cb-pack: error: out of memory (lower --workers or --size)\n");
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "cb-pack: internal error: {}\n", e.what());
    return 1;
  }
}
