// The HTML views (tools/viz): the run report from records (charts, tuner table, configuration,
// memory, a bad metrics line named), the graph view (a box per node, an edge per tensor with its
// shape), and both opened in headless Chromium from a real LeNet-5 run: the DOM Chromium builds
// holds the charts' series and points and the graph's nodes, and the screenshots show the series
// in their colours. With CB_WRITE_DOCS=1 the screenshots are written to docs/ (docs/tools.md shows
// them).
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "autodiff/autodiff.h"
#include "importer/onnx_importer.h"
#include "runtime/data/image.h"
#include "tests/test_util.h"
#include "viz/graph_html.h"
#include "viz/report.h"
#include "viz/svg.h"

using namespace cb;
using test::contains;
using test::error_of;
namespace fs = std::filesystem;
using test::read_text;
using test::TempDir;
using json = nlohmann::ordered_json;

namespace {
size_t count(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
  return n;
}

// Pixels of a screenshot within `tol` of an RGB colour.
int64_t pixels_of(const Image& img, int r, int g, int b, int tol = 40) {
  int64_t n = 0;
  for (int y = 0; y < img.rows; ++y)
    for (int x = 0; x < img.cols; ++x)
      if (std::abs(img.at(y, x, 0) - r) + std::abs(img.at(y, x, 1) - g) +
              std::abs(img.at(y, x, 2) - b) <=
          tol)
        ++n;
  return n;
}

Image load_png(const std::string& path) {
  const std::string bytes = read_text(path);
  Image img;
  std::string why;
  REQUIRE_MESSAGE(
      decode_image(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), {}, img, why),
      why);
  return img;
}
}  // namespace

TEST_CASE("report: nice ticks, short numbers, escaping") {
  CHECK(viz::nice_ticks(0, 1, 5) == std::vector<double>{0, 0.2, 0.4, 0.6000000000000001, 0.8, 1});
  CHECK(viz::nice_ticks(3, 97, 5) == std::vector<double>{20, 40, 60, 80});  // inside the range
  CHECK(viz::short_number(9560) == "9560");
  CHECK(viz::short_number(12345) == "12.3k");
  CHECK(viz::short_number(0.0123) == "0.0123");
  CHECK(viz::esc("<a & 'b'>") == "&lt;a &amp; &#39;b&#39;&gt;");
}

TEST_CASE("report: records drawn as charts and tables; a bad metrics line is named") {
  std::vector<json> r;
  r.push_back({{"type", "config"},
               {"model", "m<1>.onnx"},
               {"target_accuracy", 0.5},
               {"memory",
                {{"arena", 1 << 20},
                 {"per_replica", 3 << 20},
                 {"fixed", 1 << 21},
                 {"budget", 1LL << 33}}}});
  r.push_back({{"type", "tune"},
               {"time", 1.5},
               {"measured", 1},
               {"learners", 2},
               {"action", "add one"},
               {"images_per_s", 900},
               {"gain", 0},
               {"required", 0.05},
               {"reason", "first measurement"}});
  for (int i = 1; i <= 4; ++i)
    r.push_back({{"type", "eval"},
                 {"time", 2.0 * i},
                 {"epoch", 0.25 * i},
                 {"step", 100 * i},
                 {"loss", 2.0 / i},
                 {"test_loss", 2.2 / i},
                 {"accuracy", 0.2 * i},
                 {"images_per_s", 1000 + i},
                 {"learners", 2},
                 {"lr", 0.01},
                 {"data_wait_s", 0.01},
                 {"spread", 0.1 / i}});
  r.push_back({{"type", "summary"},
               {"steps", 400},
               {"seconds", 8.5},
               {"images_per_s", 1003},
               {"target_reached", true},
               {"target_seconds", 6.0},
               {"target_epoch", 0.75}});
  const std::string h = viz::render_report(r);
  CHECK(count(h, "<svg class=\"chart\"") == 8);
  CHECK(count(h, "<polyline class=\"series\"") == 10);  // two loss charts carry two series
  CHECK(count(h, "<circle class=\"pt\"") == 40);
  CHECK(count(h, "class=\"target\"") == 2);  // the target line on both accuracy charts
  CHECK(count(h, "class=\"mark\"") == 0);    // the tuner decision (1.5 s) precedes the evals
  CHECK(contains(h, "m&lt;1&gt;.onnx"));     // escaped
  CHECK(contains(h, "first measurement"));
  CHECK(contains(h, "3.0 MiB"));             // per replica
  CHECK(contains(h, "6.0 s (epoch 0.75)"));  // time to the target
  CHECK(!contains(h, "<script"));
  // Nothing fetched: the only URL is the SVG namespace.
  CHECK(count(h, "http") == count(h, "xmlns=\"http://www.w3.org/2000/svg\""));
  // An empty run still draws every chart, saying so.
  CHECK(count(viz::render_report({}), "no data yet") == 8);

  TempDir d("metrics");
  std::ofstream(d / "m.jsonl") << r[0].dump() << "\n"
                               << r[2].dump() << "\n{\"type\": \"eval\", \"ti";
  CHECK(viz::read_metrics(d / "m.jsonl").size() == 2);  // the cut last line is a run writing it
  std::ofstream(d / "bad.jsonl") << r[0].dump() << "\nnot json\n";
  CHECK(contains(error_of([&] { viz::read_metrics(d / "bad.jsonl"); }), "bad.jsonl:2"));

  // A regression run (no accuracy; R² and MAE): its cards and charts are R²'s.
  std::vector<json> reg = {{{"type", "config"}, {"model", "mlp.onnx"}}};
  for (int i = 1; i <= 3; ++i)
    reg.push_back({{"type", "eval"},
                   {"time", 1.0 * i},
                   {"epoch", 1.0 * i},
                   {"loss", 0.3 / i},
                   {"test_loss", 0.3 / i},
                   {"accuracy", nullptr},
                   {"test_mae", 0.1 / i},
                   {"test_r2", 0.9 + 0.03 * i}});
  const std::string hr = viz::render_report(reg);
  CHECK(contains(hr, "test R²"));
  CHECK(contains(hr, "0.9900"));  // the last R²
  CHECK(contains(hr, "R² against epochs"));
  CHECK(!contains(hr, "Accuracy against epochs"));
  CHECK(count(hr, "<svg class=\"chart\"") == 8);
}

TEST_CASE("report: the graph view has a box per node and an edge per tensor, with shapes") {
  ImportResult r = import_model(CB_SOURCE_DIR "/models/resnet20_op17.onnx");
  const Graph& g = r.graph;
  viz::GraphViewOptions o;
  o.title = "resnet20";
  o.batch = 16;
  const std::string h = viz::render_graph_html(g, o);
  CHECK(count(h, "<g class=\"node\"") == g.nodes.size());
  CHECK(count(h, "<g class=\"node io\"") == g.inputs.size() + g.outputs.size());
  size_t edges = 0;  // every node input produced by a node or a graph input, and every output
  for (const Node& n : g.nodes)
    for (ValueId v : n.inputs)
      if (v != kNoValue && g.value(v).kind != ValueKind::Parameter &&
          g.value(v).kind != ValueKind::State && g.value(v).kind != ValueKind::Constant)
        ++edges;
  edges += g.outputs.size();
  CHECK(count(h, "<g class=\"edge\"") == edges);
  CHECK(contains(h, "[N,16,32,32]"));
  CHECK(contains(h, "432 params"));   // conv1: 16 x 3 x 3 x 3
  CHECK(contains(h, "out 1.0 MiB"));  // [16,16,32,32] f32
  CHECK(contains(h, "272k parameters"));
  CHECK(contains(h, "function find("));
  // The training graph (cb-inspect --train --html): forward, loss and backward nodes.
  const TrainingGraph tg = build_training_graph(g, detect_loss(g));
  const std::string t = viz::render_graph_html(tg.graph, o);
  CHECK(count(t, "<g class=\"node\"") == tg.graph.nodes.size());
  CHECK(tg.graph.nodes.size() > 2 * g.nodes.size());
  CHECK(contains(t, "BatchNormalizationGrad"));
}

TEST_CASE("report: a real LeNet-5 run's report and graph view in headless Chromium") {
  const char* fashion = "/usr/share/datasets/fashion-mnist";
  if (!test::need(fs::path(fashion) / "train-images-idx3-ubyte.gz",
                  "Fashion-MNIST, Debian's dataset-fashion-mnist (./setup.sh installs it)"))
    return;
  if (!test::need("/usr/bin/chromium", "Debian's chromium (./setup.sh installs it)")) return;
  TempDir d("chromium");
  // Run from the source folder with a relative model path, as the documentation's commands are (the
  // path is shown in the pages).
  const std::string model = "models/lenet5_op17.onnx";
  std::string cmd = fmt::format(
      "cd {} && {}/cb-train {} --data {} --learners 2 --epochs 1 --evals-per-epoch 10 "
      "--test-limit 1000 --target-accuracy 0.8 --metrics {} --report {} > {} 2>&1",
      CB_SOURCE_DIR, CB_BINARY_DIR, model, fashion, d / "m.jsonl", d / "run.html", d / "train.log");
  REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, read_text(d / "train.log"));
  // cb-report draws the same file from the metrics.
  cmd = fmt::format("{}/cb-report {} --out {} > /dev/null", CB_BINARY_DIR, d / "m.jsonl",
                    d / "again.html");
  REQUIRE(std::system(cmd.c_str()) == 0);
  CHECK(read_text(d / "again.html") == read_text(d / "run.html"));
  cmd = fmt::format("cd {} && {}/cb-inspect {} --html {} -b 16 > /dev/null 2>&1", CB_SOURCE_DIR,
                    CB_BINARY_DIR, model, d / "graph.html");
  REQUIRE(std::system(cmd.c_str()) == 0);

  const std::string chromium =
      "timeout 120 /usr/bin/chromium --headless --no-sandbox --disable-gpu --hide-scrollbars "
      "--user-data-dir=" +
      (d / "profile");
  auto browse = [&](const std::string& flags, const std::string& page, const std::string& out) {
    const std::string c =
        fmt::format("{} {} file://{} > {} 2> {}", chromium, flags, page, out, d / "chromium.log");
    const int rc = std::system(c.c_str());
    INFO(read_text(d / "chromium.log"));
    REQUIRE(rc == 0);
  };
  // The DOM as Chromium parsed it: the charts' series and points, the graph's nodes and edges.
  browse("--dump-dom", d / "run.html", d / "run.dom");
  const std::string dom = read_text(d / "run.dom");
  CHECK(count(dom, "<svg class=\"chart\"") == 8);
  CHECK(count(dom, "<polyline class=\"series\"") == 10);
  CHECK(count(dom, "<circle class=\"pt\"") >= 40);  // at least 4 evaluations drawn
  browse("--dump-dom", d / "graph.html", d / "graph.dom");
  const std::string gdom = read_text(d / "graph.dom");
  ImportResult r = import_model(CB_SOURCE_DIR "/" + model);
  CHECK(count(gdom, "<g class=\"node\"") == r.graph.nodes.size());
  CHECK(count(gdom, "<g class=\"edge\"") >= r.graph.nodes.size());

  // Screenshots: the series are drawn in their colours, the graph's boxes in theirs.
  const bool docs = std::getenv("CB_WRITE_DOCS") != nullptr;
  const std::string report_png = docs ? CB_SOURCE_DIR "/docs/report.png" : d / "report.png";
  const std::string graph_png = docs ? CB_SOURCE_DIR "/docs/graph.png" : d / "graph.png";
  browse(fmt::format("--window-size=1280,2300 --screenshot={}", report_png), d / "run.html",
         d / "shot.log");
  browse(fmt::format("--window-size=1000,1400 --screenshot={}", graph_png), d / "graph.html",
         d / "shot.log");
  const Image rep = load_png(report_png);
  CHECK(rep.cols == 1280);
  CHECK(pixels_of(rep, 0x1f, 0x77, 0xb4) > 500);  // train loss (blue)
  CHECK(pixels_of(rep, 0xd6, 0x27, 0x28) > 300);  // test loss (red, dashed)
  CHECK(pixels_of(rep, 0x2c, 0xa0, 0x2c) > 500);  // test accuracy (green)
  CHECK(pixels_of(rep, 0xff, 0x7f, 0x0e) > 200);  // SMA spread (orange): two learners
  const Image gr = load_png(graph_png);
  CHECK(pixels_of(gr, 0x22, 0x22, 0x22, 60) > 1000);  // the nodes' text
  CHECK(pixels_of(gr, 0xe8, 0xf0, 0xfe, 6) > 20000);  // boxes of nodes with parameters
}
