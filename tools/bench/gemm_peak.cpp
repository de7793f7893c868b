// cb-bench-gemm: this machine's measured matrix-multiply peak, the yardstick of
// tools/bench/real_models.py: oneDNN's f32 and bf16 matmul (bf16 inputs, f32 accumulation and
// output) on large square matrices, threaded by oneDNN's own OpenMP team of --threads threads.
// Prints one JSON object: {"threads": T, "f32_gflops": G, "bf16_gflops": G | null, "bf16_isa": ...}
// (bf16 null where oneDNN has no bf16 matmul for these cores). Best of --reps runs after one
// warm-up: the peak, not the typical.
// Usage: cb-bench-gemm [--threads 2] [--size 2048] [--reps 5]
#include <fmt/format.h>
#include <omp.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <dnnl.hpp>
#include <string>
#include <vector>

namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

// GFLOP/s of the best of `reps` matmuls C[n,n] = A[n,n] B[n,n] in `type`; < 0 where oneDNN has
// no implementation.
double time_matmul(dnnl::engine& eng, dt type, int64_t n, int reps) {
  dnnl::memory::desc a_md({n, n}, type, tag::ab), b_md({n, n}, type, tag::ab),
      c_md({n, n}, dt::f32, tag::ab);
  dnnl::matmul::primitive_desc pd;
  try {
    pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), eng);
  } catch (const dnnl::error&) {
    return -1;
  }
  // A reference implementation means no optimised kernel for this ISA: not a peak.
  if (std::string(pd.impl_info_str()).find("ref") != std::string::npos) return -1;
  dnnl::memory a(a_md, eng), b(b_md, eng), c(c_md, eng);
  std::memset(a.get_data_handle(), 0, a_md.get_size());  // zeros: bf16 or f32 alike
  std::memset(b.get_data_handle(), 0, b_md.get_size());
  dnnl::matmul mm(pd);
  dnnl::stream s(eng);
  double best = 1e30;
  for (int r = 0; r <= reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    mm.execute(s, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    s.wait();
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::min(best, t);  // run 0 warms up
  }
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / best /
         1e9;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, reps = 5;
  int64_t size = 2048;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--threads")
      threads = std::atoi(argv[i + 1]);
    else if (k == "--size")
      size = std::atoll(argv[i + 1]);
    else if (k == "--reps")
      reps = std::atoi(argv[i + 1]);
    else {
      fmt::print(stderr, "cb-bench-gemm: unknown option {}\n", k);
      return 2;
    }
  }
  if (threads < 1 || reps < 1 || size < 64) {
    fmt::print(stderr, "cb-bench-gemm: --threads and --reps must be >= 1, --size >= 64\n");
    return 2;
  }
  omp_set_num_threads(threads);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  double f32 = time_matmul(eng, dt::f32, size, reps);
  double bf16 = time_matmul(eng, dt::bf16, size, reps);
  auto num = [](double g) { return g < 0 ? std::string("null") : fmt::format("{:.1f}", g); };
  fmt::print("{{\"threads\": {}, \"size\": {}, \"f32_gflops\": {}, \"bf16_gflops\": {}}}\n",
             threads, size, num(f32), num(bf16));
  return 0;
}
