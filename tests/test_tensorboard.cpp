// TensorBoard event files (sma/tensorboard.h): CRC-32C against its published check value, records
// written and read back with their framing and CRCs checked, corruption detected, the protobuf
// decoded independently (protoc + python3's protobuf, where both exist), and cb-train
// --tensorboard on a real run.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "runtime/checksum.h"
#include "sma/tensorboard.h"
#include "tests/test_util.h"

using namespace cb;
using test::contains;
using test::error_of;
namespace fs = std::filesystem;
using test::TempDir;

namespace {
std::string only_event_file(const fs::path& dir) {
  std::string found;
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) {
      found = e.path().string();
      ++n;
    }
  REQUIRE(n == 1);
  return found;
}
}  // namespace

TEST_CASE("tensorboard: CRC-32C has its published check value") {
  CHECK(crc32c_of("123456789", 9) == 0xE3069283u);
  CHECK(crc32c_of("", 0) == 0u);
}

TEST_CASE("tensorboard: events written are read back with framing and CRCs checked") {
  TempDir d("rw");
  std::string path;
  {
    EventWriter w((d.path / "run").string());
    path = w.path();
    w.scalars(10, {{"loss", 2.5}, {"accuracy", 0.25}});
    w.scalars(20, {{"loss", 1.25}});
    w.scalars(1LL << 40, {{"big step", -3}});
  }
  std::vector<ScalarEvent> ev = read_event_file(path);
  REQUIRE(ev.size() == 4);
  CHECK(ev[0].file_version == "brain.Event:2");
  CHECK(ev[0].wall_time > 1.6e9);
  CHECK(ev[1].step == 10);
  REQUIRE(ev[1].scalars.size() == 2);
  CHECK(ev[1].scalars[0].first == "loss");
  CHECK(ev[1].scalars[0].second == 2.5f);
  CHECK(ev[1].scalars[1].first == "accuracy");
  CHECK(ev[1].scalars[1].second == 0.25f);
  CHECK(ev[2].step == 20);
  CHECK(ev[3].step == (1LL << 40));
  CHECK(ev[3].scalars[0].second == -3.0f);

  // A flipped byte in a record's data, or a cut file, is found and named.
  std::ifstream f(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), {});
  std::string bad = bytes;
  bad[bad.size() - 10] ^= 0x20;
  std::ofstream(d / "flipped", std::ios::binary) << bad;
  CHECK(contains(error_of([&] { read_event_file(d / "flipped"); }), "CRC does not match"));
  std::ofstream(d / "cut", std::ios::binary) << bytes.substr(0, bytes.size() - 3);
  std::string e = error_of([&] { read_event_file(d / "cut"); });
  CHECK(contains(e, "cut"));
  CHECK(contains(e, "record 3"));

  // Decoded by protobuf itself, from a .proto with TensorFlow's field numbers.
  if (std::system("command -v protoc >/dev/null && /usr/bin/python3 -c 'import google.protobuf'"
                  " 2>/dev/null") != 0) {
    MESSAGE("protoc or python3-protobuf missing: the independent decode is skipped");
    return;
  }
  std::ofstream(d / "event.proto") << R"(syntax = "proto3";
package tbcheck;
message Value { string tag = 1; oneof value { float simple_value = 2; } }
message Summary { repeated Value value = 1; }
message Event { double wall_time = 1; int64 step = 2;
  oneof what { string file_version = 3; Summary summary = 5; } }
)";
  std::ofstream(d / "check.py") << R"(import struct, sys
sys.path.insert(0, sys.argv[1])
import event_pb2
data = open(sys.argv[2], 'rb').read()
at, out = 0, []
while at < len(data):
    n, = struct.unpack('<Q', data[at:at + 8])
    ev = event_pb2.Event()
    ev.ParseFromString(data[at + 12:at + 12 + n])
    at += 12 + n + 4
    out.append('%s|%d|%s' % (ev.file_version, ev.step,
               ','.join('%s=%g' % (v.tag, v.simple_value) for v in ev.summary.value)))
print(';'.join(out))
)";
  const std::string cmd = fmt::format(
      "cd {0} && protoc --python_out=. event.proto && /usr/bin/python3 check.py {0} {1} > {0}/out",
      d.path.string(), path);
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream o(d / "out");
  std::string line;
  std::getline(o, line);
  CHECK(line ==
        "brain.Event:2|0|;|10|loss=2.5,accuracy=0.25;|20|loss=1.25;|1099511627776|big step=-3");

  // TensorBoard's own reader, where its Python package is installed (Debian has none).
  if (std::system("/usr/bin/python3 -c 'import tensorboard' 2>/dev/null") != 0) {
    MESSAGE("the tensorboard Python package is not installed: its reader is not run");
    return;
  }
  std::ofstream(d / "tb.py") << R"(import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
ea = EventAccumulator(sys.argv[1])
ea.Reload()
print(';'.join('%d=%g' % (e.step, e.value) for e in ea.Scalars('loss')))
)";
  REQUIRE(std::system(fmt::format("/usr/bin/python3 {} {} > {}", d / "tb.py", path, d / "tb.out")
                          .c_str()) == 0);
  std::ifstream t(d / "tb.out");
  std::getline(t, line);
  CHECK(line == "10=2.5;20=1.25");
}

TEST_CASE("tensorboard: cb-train --tensorboard logs the run's scalars") {
  const char* fashion = "/usr/share/datasets/fashion-mnist";
  if (!test::need(fs::path(fashion) / "train-images-idx3-ubyte.gz",
                  "Fashion-MNIST, Debian's dataset-fashion-mnist (./setup.sh installs it)"))
    return;
  TempDir d("train");
  const std::string cmd = fmt::format(
      "{}/cb-train {}/models/lenet5_op17.onnx --data {} --learners 2 --steps 200 --eval-every 100 "
      "--test-limit 200 --tensorboard {} > {} 2>&1",
      CB_BINARY_DIR, CB_SOURCE_DIR, fashion, d / "tb", d / "log");
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::vector<ScalarEvent> ev = read_event_file(only_event_file(d.path / "tb"));
  int evals = 0;
  for (const ScalarEvent& e : ev) {
    std::map<std::string, float> s(e.scalars.begin(), e.scalars.end());
    if (!s.count("eval/test_accuracy")) continue;
    ++evals;
    CHECK((e.step == 100 || e.step == 200));
    CHECK(s.at("eval/test_accuracy") > 0.1f);
    CHECK(s.at("eval/learners") == 2);
    CHECK(s.at("eval/learners_per_device") == 2);
    CHECK(s.at("eval/sma_spread") > 0);  // two replicas apart from z
    CHECK(s.at("eval/images_per_s") > 0);
    CHECK(s.count("eval/data_wait_s"));
    CHECK(s.count("eval/test_loss"));
  }
  CHECK(evals == 2);
  // A folder that cannot be made is an error before training.
  std::ofstream(d / "file") << "x";
  const std::string bad = fmt::format(
      "{}/cb-train {}/models/lenet5_op17.onnx --data {} --steps 10 --tensorboard {} > {} 2>&1",
      CB_BINARY_DIR, CB_SOURCE_DIR, fashion, d / "file/tb", d / "bad.log");
  CHECK(std::system(bad.c_str()) != 0);
  std::ifstream lf(d / "bad.log");
  const std::string log((std::istreambuf_iterator<char>(lf)), {});
  CHECK(contains(log, "--tensorboard"));
  CHECK(!contains(log, "step "));
}
