// Bad models get one clear error each, never a crash. Every file of tests/malformed/ (written by
// make_corpus.py) has one row in kCorpus below: the fragments its error message must contain.
// Each file is (a) imported in strict mode, which must throw cb::Error with those fragments, and
// (b) given to the real cb-inspect binary, which must exit with the expected code (1: bad model,
// 3: read fine but blocked by unsupported ops), not die from a signal, print the fragments on
// stderr and, when it fails, nothing on stdout (nothing half-done).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <onnx/onnx_pb.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "importer/onnx_importer.h"
#include "importer/tensor_io.h"
#include "importer/tensor_proto.h"
#include "kernels/cpu/cpu_device.h"
#include "runtime/error.h"
#include "runtime/executor.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;

struct Case {
  const char* file;
  std::vector<std::string> expect;  // fragments of the message (the file name is always checked)
  int exit_code = 1;                // cb-inspect's
};

// clang-format off
const std::vector<Case> kCorpus = {
  // not a model at all
  {"empty.onnx", {"the file is empty"}},
  {"truncated.onnx", {"the file is truncated", "'graph' field"}},
  {"text_file.onnx", {"this is a text file, not an ONNX model", "# this is a README"}},
  {"random_bytes.onnx", {"not an ONNX model", "is this the right file?"}},
  {"tensor_not_model.onnx", {"not an ONNX model", "ModelProto"}},
  // header
  {"no_graph.onnx", {"the model has no graph"}},
  {"ir_version_10.onnx", {"IR version 10", "opset 13", "IR versions 3 to 9"}},
  {"opset_19.onnx", {"opset 19 is too new", "opsets 7 to 18"}},
  {"opset_6.onnx", {"opset 6 is too old", "opsets 7 to 18"}},
  {"no_default_opset.onnx", {"imports no default-domain ('ai.onnx') opset"}},
  // graph structure
  {"cycle.onnx", {"[Relu node 'node_a']", "is on a cycle", "'b_out'"}},
  {"used_before_produced.onnx", {"[Sigmoid node 'second']", "reads 'h' before it is produced",
                                 "node 'first'", "topological order"}},
  {"never_produced.onnx", {"[Add node 'add_ghost']", "'ghost'", "no node, graph input or "
                           "initializer produces"}},
  {"duplicate_initializer.onnx", {"the name 'w' is defined twice", "initializer 'w'"}},
  {"duplicate_node_output.onnx", {"the name 'h' is defined twice", "node 'relu_1'",
                                  "node 'sigmoid_1'"}},
  {"output_not_produced.onnx", {"graph output 'nowhere' is not produced"}},
  {"no_outputs.onnx", {"the graph has no outputs"}},
  {"wrong_arity.onnx", {"[Relu node 'act2'] has 2 inputs; Relu takes 1"}},
  {"batchnorm_six_inputs.onnx", {"[BatchNormalization node 'bn6'] has 6 inputs; "
                                 "BatchNormalization takes 5"}},
  // initializer data against its shape
  {"raw_data_mismatch.onnx", {"initializer 'w'", "raw_data holds 10 bytes", "dims [4] of f32 "
                              "need 16 bytes"}},
  {"float_data_mismatch.onnx", {"initializer 'w'", "float_data holds 5 values", "dims [4] "
                                "need 4"}},
  {"negative_dim_initializer.onnx", {"initializer 'w'", "negative dimension -4 at axis 0"}},
  {"overflow_dims_initializer.onnx", {"initializer 'w'",
                                      "dims [1099511627776,1099511627776] overflow"}},
  {"string_initializer.onnx", {"initializer 'w'", "element type STRING (8) is not supported"}},
  {"constant_raw_mismatch.onnx", {"[Constant node 'bias_const'] attribute 'value'",
                                  "raw_data holds 12 bytes", "need 16 bytes"}},
  // graph inputs
  {"negative_dim_input.onnx", {"graph input 'x'", "negative dimension -3 at axis 1"}},
  {"overflow_dims_input.onnx", {"graph input 'x'", "[N,1099511627776,1099511627776]",
                                "overflow"}},
  {"symbolic_dim.onnx", {"graph input 'x'", "symbolic dimension 'features' at axis 1"}},
  {"input_no_shape.onnx", {"graph input 'x' has no shape"}},
  // external data
  {"external_outside_relative.onnx", {"initializer 'w'", "'../CMakeLists.txt' points outside "
                                      "the model's folder"}},
  {"external_outside_absolute.onnx", {"initializer 'w'", "'/etc/hostname' points outside the "
                                      "model's folder"}},
  {"external_missing.onnx", {"initializer 'w'", "cannot open external data file",
                             "missing_weights.bin"}},
  {"external_beyond_end.onnx", {"initializer 'w'", "range [8, 8+16) lies beyond the end",
                                "ext_small.bin", "(16 bytes)"}},
  // ops crossbow does not support: every node listed, cb-inspect reports and exits 3
  {"unknown_ops.onnx", {"'mystery_strings' (StringNormalizer)", "'mystery_bernoulli' (Bernoulli)",
                        "'mystery_frobnicate' (FrobnicateOp)"}, 3},
  {"custom_domain.onnx", {"'fancy_gelu' (FusedGelu)", "domain 'com.example' is not supported"},
   3},
  // shapes: the node and both shapes
  {"gemm_mismatch.onnx", {"[Gemm node 'fc1'] inner dims differ: A [N,128] vs B [64,10]"}},
  {"matmul_mismatch.onnx", {"[MatMul node 'proj'] inner dims differ: A [N,8,16] vs B [12,5]"}},
  {"add_mismatch.onnx", {"[Add node 'sum']", "[N,3] and [4] do not broadcast"}},
  {"conv_channels.onnx", {"[Conv node 'conv1']", "X [N,3,8,8] has 3 channels",
                          "W [4,2,3,3] with group=1 expects 2"}},
  {"reshape_count.onnx", {"[Reshape node 'to_5'] cannot reshape [N,3,4] to [N,5]"}},
  // types: a bias must have the input's type (fuzzing found these read as float)
  {"gemm_uint8_bias.onnx", {"[Gemm node 'fc']", "'x' (f32) and 2 'C' (u8) must have the same type"}},
  {"conv_int32_bias.onnx", {"[Conv node 'conv']", "'x' (f32) and 2 'B' (i32) must have the same type"}},
  // SAME padding with a zero stride (it divides by the stride: SIGFPE before the check)
  {"conv_same_stride0.onnx", {"[Conv node 'c0'] strides must be positive, got 0"}},
  {"maxpool_same_stride0.onnx", {"[MaxPool node 'p0'] strides must be positive, got 0"}},
  {"avgpool_same_stride0.onnx", {"[AveragePool node 'p1'] strides must be positive, got 0"}},
  // a window whose extent overflows int64 (UB in shape inference before)
  {"maxpool_window_overflow.onnx", {"[MaxPool node 'p_over']", "kernel_shape", "dilations"}},
  // ranks above what the kernels index, named where they appear
  {"input_rank20.onnx", {"graph input 'x' has rank 20; crossbow supports tensors of rank up to 8"}},
  {"initializer_rank12.onnx", {"initializer 'c' has rank 12"}},
  {"reshape_rank12.onnx", {"[Reshape node 'to_rank12'] output 'y' has rank 12"}},
  {"transpose_perm20.onnx", {"[Transpose node 't0'] 20 values where crossbow supports at most 8"}},
};
// Hostile but valid models, also in tests/malformed/: cb-run must run them promptly and right.
// Input x [1,1,8,8] holds 0..63; every element of output y must be `want`.
struct RunCase {
  const char* file;
  double want;
};
const std::vector<RunCase> kRuns = {
  // windows of 2^40 per axis, SAME_UPPER: each covers the whole input (it looped over the padding
  // without end): the maximum, the mean, and the sum over the window's 2^80 positions
  {"maxpool_huge_window.onnx", 63},
  {"avgpool_huge_window.onnx", 31.5},
  {"avgpool_huge_window_pad.onnx", 2016 / 0x1p80},
};
// clang-format on

// The rows of kCorpus and the files of tests/malformed/ as measured: a corpus that shrinks or goes
// missing fails instead of checking less.
constexpr size_t kCorpusFloor = 47;

std::string corpus_dir() { return std::string(CB_SOURCE_DIR) + "/tests/malformed"; }

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void check_fragments(const std::string& msg, const Case& c) {
  CHECK_MESSAGE(msg.find(c.file) != std::string::npos, "the message does not name the file: ", msg);
  for (const auto& e : c.expect)
    CHECK_MESSAGE(msg.find(e) != std::string::npos, "missing '", e, "' in: ", msg);
}

struct Run {
  bool signaled = false;
  int signal = 0, status = -1;
  std::string out, err;
};

// Runs `argv` with stdout and stderr captured in files (no pipes: nothing can block).
Run run_child(const std::vector<std::string>& argv, int timeout_s = 120) {
  Run r;
  fs::path tmp = fs::temp_directory_path() / fmt::format("cb-malformed-{}", ::getpid());
  fs::create_directories(tmp);
  std::string out = (tmp / "stdout").string(), err = (tmp / "stderr").string();
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  REQUIRE_MESSAGE(rc == 0, "cannot start ", argv[0]);
  // A child past its deadline is killed and the test fails: a hang is a failure, not a stall.
  int ws = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  pid_t got = 0;
  while ((got = waitpid(pid, &ws, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (got == 0) {
    kill(pid, SIGKILL);
    got = waitpid(pid, &ws, 0);
    FAIL_CHECK(argv[0], " ran past its ", timeout_s, " s deadline and was killed");
  }
  REQUIRE(got == pid);
  r.signaled = WIFSIGNALED(ws);
  if (r.signaled) r.signal = WTERMSIG(ws);
  if (WIFEXITED(ws)) r.status = WEXITSTATUS(ws);
  r.out = read_all(out);
  r.err = read_all(err);
  fs::remove_all(tmp);
  return r;
}

}  // namespace

TEST_SUITE("malformed") {
  TEST_CASE("the corpus has a row for every file and at least 15 faults") {
    std::set<std::string> listed;
    for (const auto& c : kCorpus) listed.insert(c.file);
    CHECK(listed.size() == kCorpus.size());
    for (const auto& c : kRuns) {
      CHECK_MESSAGE(fs::exists(corpus_dir() + "/" + c.file), c.file,
                    " is missing: run tests/malformed/make_corpus.py");
      listed.insert(c.file);
    }
    CHECK(listed.size() == kCorpus.size() + kRuns.size());
    CHECK(kCorpus.size() >= kCorpusFloor);  // at least 15 faults, and no fewer than today
    size_t files = 0;
    for (const auto& e : fs::directory_iterator(corpus_dir())) {
      if (e.path().extension() != ".onnx") continue;
      CHECK_MESSAGE(listed.count(e.path().filename().string()), e.path().filename().string(),
                    " has no row in kCorpus or kRuns");
      ++files;
    }
    CHECK(files >= kCorpusFloor);
    for (const auto& c : kCorpus)
      CHECK_MESSAGE(fs::exists(corpus_dir() + "/" + c.file), c.file,
                    " is missing: run tests/malformed/make_corpus.py");
  }

  TEST_CASE("strict import throws one clear cb::Error per bad model") {
    size_t checked = 0;
    for (const auto& c : kCorpus) {
      CAPTURE(c.file);
      std::string path = corpus_dir() + "/" + c.file;
      bool threw = false;
      try {
        cb::import_model(path);
      } catch (const cb::Error& e) {
        threw = true;
        check_fragments(e.what(), c);
      }
      CHECK_MESSAGE(threw, c.file, " imported without an error");
      ++checked;
    }
    CHECK(checked >= kCorpusFloor);
  }

  TEST_CASE("cb-inspect exits non-zero with the message, no signal, nothing half-done") {
    std::string exe = std::string(CB_BINARY_DIR) + "/cb-inspect";
    REQUIRE_MESSAGE(fs::exists(exe), exe, " is not built");
    size_t checked = 0;
    for (const auto& c : kCorpus) {
      CAPTURE(c.file);
      Run r = run_child({exe, corpus_dir() + "/" + c.file});
      CHECK_MESSAGE(!r.signaled, "cb-inspect died from signal ", r.signal);
      CHECK(r.status == c.exit_code);
      check_fragments(r.err, c);
      if (c.exit_code == 1) {
        CHECK_MESSAGE(r.out.empty(), "stdout is not empty: ", r.out);
        CHECK(r.err.rfind("cb-inspect: error: ", 0) == 0);
        CHECK(r.err.find("internal error") == std::string::npos);
      } else {
        CHECK(r.out.find("BLOCKED") != std::string::npos);  // the full report, then the list
      }
      ++checked;
    }
    CHECK(checked >= kCorpusFloor);
  }

  TEST_CASE("cb-run runs the hostile but valid models promptly, with the right output") {
    std::string exe = std::string(CB_BINARY_DIR) + "/cb-run";
    REQUIRE_MESSAGE(fs::exists(exe), exe, " is not built");
    const fs::path d = fs::temp_directory_path() / fmt::format("cb_malformed_runs_{}", getpid());
    fs::remove_all(d);
    fs::create_directories(d);
    cb::Tensor x;
    x.dtype = cb::DType::F32;
    x.dims = {1, 1, 8, 8};
    x.bytes.resize(64 * sizeof(float));
    for (int i = 0; i < 64; ++i) x.data<float>()[i] = static_cast<float>(i);
    const std::string in = (d / "x.pb").string();
    cb::write_tensor_file(in, x, "x");
    for (const auto& c : kRuns) {
      CAPTURE(c.file);
      const fs::path out = d / "out";
      fs::remove_all(out);
      // Milliseconds of work: the deadline only turns a hang into a failure.
      Run r = run_child(
          {exe, corpus_dir() + "/" + c.file, "--input", "x=" + in, "--output-dir", out.string()},
          60);
      CHECK_MESSAGE(!r.signaled, "cb-run died from signal ", r.signal);
      REQUIRE_MESSAGE(r.status == 0, r.err);
      onnx::TensorProto t;
      std::ifstream f(out / "y.pb", std::ios::binary);
      REQUIRE(t.ParseFromIstream(&f));
      cb::Tensor y = *cb::tensor_from_proto(t, "y.pb", "");
      REQUIRE(y.dims == std::vector<int64_t>{1, 1, 8, 8});
      for (int i = 0; i < 64; ++i)
        CHECK(y.data<float>()[i] == doctest::Approx(c.want).epsilon(1e-6));
    }
    fs::remove_all(d);
  }

  // IR versions 3-9 and default-domain opsets 7-18 are read; outside, the error names the version.
  TEST_CASE("IR version and opset range") {
    auto bytes = [](int64_t ir, int64_t opset) {
      onnx::ModelProto m;
      m.set_ir_version(ir);
      auto* o = m.add_opset_import();
      o->set_domain("");
      o->set_version(opset);
      auto* g = m.mutable_graph();
      g->set_name("g");
      auto* n = g->add_node();
      n->set_op_type("Relu");
      n->set_name("act");
      const std::string x = "x", y = "y";  // not literals: GCC 12 -Wrestrict false positive
      n->add_input(x);
      n->add_output(y);
      for (auto [vi, name] : {std::pair{g->add_input(), &x}, {g->add_output(), &y}}) {
        vi->set_name(*name);
        auto* tt = vi->mutable_type()->mutable_tensor_type();
        tt->set_elem_type(onnx::TensorProto::FLOAT);
        tt->mutable_shape()->add_dim()->set_dim_param("batch");
        tt->mutable_shape()->add_dim()->set_dim_value(4);
      }
      return m.SerializeAsString();
    };
    for (auto [ir, opset] : {std::pair{3, 7}, {9, 18}, {7, 13}, {8, 17}}) {
      CAPTURE(ir);
      CAPTURE(opset);
      CHECK_NOTHROW(cb::import_model_bytes(bytes(ir, opset), "ok.onnx", ""));
    }
    auto message = [&](int64_t ir, int64_t opset) {
      try {
        cb::import_model_bytes(bytes(ir, opset), "bad.onnx", "");
      } catch (const cb::Error& e) {
        return std::string(e.what());
      }
      return std::string("no error");
    };
    CHECK(message(2, 7).find("IR version 2 (default-domain opset 7) is not supported") !=
          std::string::npos);
    CHECK(message(10, 19).find("IR version 10 (default-domain opset 19)") != std::string::npos);
    CHECK(message(9, 19).find("opset 19 is too new") != std::string::npos);
    CHECK(message(3, 6).find("opset 6 is too old") != std::string::npos);
  }
}

TEST_CASE("a pipe, a folder or a symlink loop given as the model is an error, never a hang") {
  // Found by fuzzing: a FIFO blocked cb-inspect and cb-run forever.
  const fs::path d = fs::temp_directory_path() / ("cb_malformed_fifo_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  const std::string fifo = (d / "model.onnx").string();
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  auto message = [](const std::string& p) {
    try {
      cb::import_model(p);
    } catch (const cb::Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK(message(fifo).find("not a regular file") != std::string::npos);
  CHECK(message(d.string()).find("is a folder") != std::string::npos);
  fs::create_symlink(d / "b", d / "a");
  fs::create_symlink(d / "a", d / "b");
  CHECK(message((d / "a").string()).find("cannot open the file") != std::string::npos);
  fs::remove_all(d);
}

TEST_CASE("a pool kernel far larger than its SAME-padded input runs, and ends") {
  // Found by fuzzing: MaxPool/AveragePool with kernel 40 over an 8x8 input, SAME_UPPER, ran
  // without end. Every window covers the whole input: the max, and the mean over the input
  // (count_include_pad=0).
  for (const char* op : {"MaxPool", "AveragePool"}) {
    CAPTURE(op);
    onnx::ModelProto m;
    m.set_ir_version(8);
    m.add_opset_import()->set_version(17);
    onnx::GraphProto& g = *m.mutable_graph();
    g.set_name("g");
    auto io = [](onnx::ValueInfoProto* v, const char* name) {
      v->set_name(name);
      auto* t = v->mutable_type()->mutable_tensor_type();
      t->set_elem_type(onnx::TensorProto::FLOAT);
      for (int64_t d : {1, 1, 8, 8}) t->mutable_shape()->add_dim()->set_dim_value(d);
    };
    io(g.add_input(), "x");
    io(g.add_output(), "y");
    onnx::NodeProto& n = *g.add_node();
    n.set_op_type(op);
    n.set_name("big");
    n.add_input("x");
    n.add_output("y");
    auto* a = n.add_attribute();
    a->set_name("auto_pad");
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s("SAME_UPPER");
    a = n.add_attribute();
    a->set_name("kernel_shape");
    a->set_type(onnx::AttributeProto::INTS);
    a->add_ints(40);
    a->add_ints(40);
    const std::string path =
        (fs::temp_directory_path() / fmt::format("cb_pool40_{}_{}.onnx", op, getpid())).string();
    {
      std::ofstream f(path, std::ios::binary);
      REQUIRE(m.SerializeToOstream(&f));
    }
    cb::ImportResult r = cb::import_model(path);
    fs::remove(path);
    auto dev = cb::make_cpu_device(1);
    cb::Executor ex(r.graph, *dev, 1);
    cb::Tensor x;
    x.dtype = cb::DType::F32;
    x.dims = {1, 1, 8, 8};
    x.bytes.resize(64 * sizeof(float));
    for (int i = 0; i < 64; ++i) x.data<float>()[i] = static_cast<float>(i);
    ex.set_input(0, x);
    ex.run();
    cb::Tensor y = ex.output(0);
    REQUIRE(y.dims == std::vector<int64_t>{1, 1, 8, 8});
    for (int i = 0; i < 64; ++i)
      CHECK(y.data<float>()[i] == doctest::Approx(std::string(op) == "MaxPool" ? 63.0 : 31.5));
  }
}
