// cb-bench-conv: times Conv forward as im2col+GEMM (crossbow's kernel) against oneDNN on the
// LeNet-5 and ResNet-20 conv shapes, at batch 16 and 64 on 1 and 2 threads. A/B runs are
// interleaved and medians reported (the machines are noisy: compare ratios, not absolutes).
// oneDNN is timed two ways: plain layouts (nchw/oihw, what our tensors are) and its preferred
// blocked layouts with the src/weight/dst reorders counted (weights change every training step).
// Columns: im2col = crossbow's im2col+GEMM on our pool; cb-dnnl = crossbow's oneDNN path (our
// pool splits the batch, oneDNN single-threaded per sub-batch, blocked layouts + reorders);
// omp-nchw / omp-blk = oneDNN on the whole batch threaded by its own OpenMP team, plain layouts /
// blocked layouts with reorders.
// The backward section times ConvGrad's dX + dW (dB is common to both) at batch 16 on 1 and 2
// threads: im2col = col2im/im2col + GEMM, cb-dnnl = oneDNN backward-data + backward-weights
// (blocked layouts, reorders counted), each with our pool splitting the batch and the per-chunk
// dW partials summed.
// Usage: cb-bench-conv [reps=30] [all|fwd|bwd]
#include <fmt/format.h>

#include <algorithm>
#include <any>
#include <chrono>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/cpu_device.h"
#include "runtime/thread_pool.h"

#ifdef CB_HAVE_DNNL
#include <omp.h>

#include <dnnl.hpp>
#endif

namespace {

struct Shape {
  const char* net;
  const char* name;
  int64_t c, h, w, m, k, stride, pad;
  bool bias;
  int count;  // occurrences in the network (for the per-network sum)
};

const Shape kShapes[] = {
    {"lenet5", "c1 1x28x28 -> 6 k5 p2", 1, 28, 28, 6, 5, 1, 2, true, 1},
    {"lenet5", "c2 6x14x14 -> 16 k5", 6, 14, 14, 16, 5, 1, 0, true, 1},
    {"resnet20", "3x32x32 -> 16 k3", 3, 32, 32, 16, 3, 1, 1, false, 1},
    {"resnet20", "16x32x32 -> 16 k3", 16, 32, 32, 16, 3, 1, 1, false, 6},
    {"resnet20", "16x32x32 -> 32 k3 s2", 16, 32, 32, 32, 3, 2, 1, false, 1},
    {"resnet20", "16x32x32 -> 32 k1 s2", 16, 32, 32, 32, 1, 2, 0, false, 1},
    {"resnet20", "32x16x16 -> 32 k3", 32, 16, 16, 32, 3, 1, 1, false, 5},
    {"resnet20", "32x16x16 -> 64 k3 s2", 32, 16, 16, 64, 3, 2, 1, false, 1},
    {"resnet20", "32x16x16 -> 64 k1 s2", 32, 16, 16, 64, 1, 2, 0, false, 1},
    {"resnet20", "64x8x8 -> 64 k3", 64, 8, 8, 64, 3, 1, 1, false, 5},
};

double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Problem {
  int64_t n, oh, ow;
  const Shape* s;
  std::vector<float> x, w, b, y, y_ref;
};

Problem make_problem(const Shape& s, int64_t n) {
  Problem p{n,
            (s.h + 2 * s.pad - s.k) / s.stride + 1,
            (s.w + 2 * s.pad - s.k) / s.stride + 1,
            &s,
            {},
            {},
            {},
            {},
            {}};
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> u(-1, 1);
  p.x.resize(static_cast<size_t>(n * s.c * s.h * s.w));
  p.w.resize(static_cast<size_t>(s.m * s.c * s.k * s.k));
  p.b.resize(static_cast<size_t>(s.m));
  for (auto* v : {&p.x, &p.w, &p.b})
    for (float& f : *v) f = u(rng);
  p.y.assign(static_cast<size_t>(n * s.m * p.oh * p.ow), 0.f);
  return p;
}

// ---- crossbow im2col+GEMM -----------------------------------------------------------------------
struct Im2col {
  std::any params;
  cb::KernelArgs args;
  Im2col(Problem& p) {
    const Shape& s = *p.s;
    cb::ops::ConvParams cp;
    cp.window.kernel_shape = {s.k, s.k};
    cp.window.strides = {s.stride, s.stride};
    cp.window.dilations = {1, 1};
    cp.window.pads = {s.pad, s.pad, s.pad, s.pad};
    params = cp;
    args.params = &params;
    args.in = {{p.x.data(), cb::DType::F32, {p.n, s.c, s.h, s.w}},
               {p.w.data(), cb::DType::F32, {s.m, s.c, s.k, s.k}},
               {s.bias ? p.b.data() : nullptr, cb::DType::F32, {s.m}}};
    args.out = {{p.y.data(), cb::DType::F32, {p.n, s.m, p.oh, p.ow}}};
  }
  void run(cb::ThreadPool& pool) {
    cb::cpu::ScopedPool scope(&pool);  // the pool these direct calls of CPU internals run on
    cb::cpu::conv_im2col(args);
  }
  void run_dnnl(cb::ThreadPool& pool) {  // the library's oneDNN path: our pool splits the batch
    cb::cpu::ScopedPool scope(&pool);    // the pool these direct calls of CPU internals run on
    if (!cb::cpu::conv_dnnl(args)) std::abort();
  }
};

#ifdef CB_HAVE_DNNL
// ---- oneDNN ------------------------------------------------------------------------------------
struct Dnnl {
  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  dnnl::convolution_forward conv;
  dnnl::memory src, wei, bias, dst;  // user (plain) memories
  dnnl::memory src_c, wei_c, dst_c;  // the conv's own layouts (blocked variant)
  dnnl::reorder r_src, r_wei, r_dst;
  bool blocked, has_bias;
  std::string impl;

  Dnnl(Problem& p, bool blocked_layouts) : blocked(blocked_layouts), has_bias(p.s->bias) {
    const Shape& s = *p.s;
    dnnl::memory::desc src_md({p.n, s.c, s.h, s.w}, dt::f32, tag::nchw);
    dnnl::memory::desc wei_md({s.m, s.c, s.k, s.k}, dt::f32, tag::oihw);
    dnnl::memory::desc b_md({s.m}, dt::f32, tag::x);
    dnnl::memory::desc dst_md({p.n, s.m, p.oh, p.ow}, dt::f32, tag::nchw);
    src = dnnl::memory(src_md, eng, p.x.data());
    wei = dnnl::memory(wei_md, eng, p.w.data());
    bias = dnnl::memory(b_md, eng, p.b.data());
    dst = dnnl::memory(dst_md, eng, p.y.data());
    auto any = [](const dnnl::memory::desc& d) {
      return dnnl::memory::desc(d.dims(), dt::f32, tag::any);
    };
    dnnl::memory::dims st{s.stride, s.stride}, dil{0, 0}, pad{s.pad, s.pad};
    auto make_desc = [&](const auto& sm, const auto& wm, const auto& dm) {
      return has_bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                                        dnnl::algorithm::convolution_direct, sm, wm,
                                                        b_md, dm, st, dil, pad, pad)
                      : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                                        dnnl::algorithm::convolution_direct, sm, wm,
                                                        dm, st, dil, pad, pad);
    };
    auto d = blocked ? make_desc(any(src_md), any(wei_md), any(dst_md))
                     : make_desc(src_md, wei_md, dst_md);
    dnnl::convolution_forward::primitive_desc pd(d, eng);
    impl = pd.impl_info_str();
    conv = dnnl::convolution_forward(pd);
    if (blocked) {
      src_c = dnnl::memory(pd.src_desc(), eng);
      wei_c = dnnl::memory(pd.weights_desc(), eng);
      dst_c = dnnl::memory(pd.dst_desc(), eng);
      r_src = dnnl::reorder(src, src_c);
      r_wei = dnnl::reorder(wei, wei_c);
      r_dst = dnnl::reorder(dst_c, dst);
    }
  }
  void run() {
    if (blocked) {
      r_src.execute(strm, src, src_c);
      r_wei.execute(strm, wei, wei_c);
    }
    std::unordered_map<int, dnnl::memory> a{{DNNL_ARG_SRC, blocked ? src_c : src},
                                            {DNNL_ARG_WEIGHTS, blocked ? wei_c : wei},
                                            {DNNL_ARG_DST, blocked ? dst_c : dst}};
    if (has_bias) a[DNNL_ARG_BIAS] = bias;
    conv.execute(strm, a);
    if (blocked) r_dst.execute(strm, dst_c, dst);
    strm.wait();
  }
};
#endif

// ---- backward: ConvGrad's dX and dW, crossbow's two paths ---------------------------------------
struct Backward {
  std::any params;
  cb::KernelArgs args;
  std::vector<float> dy, dx, dw;
  Backward(Problem& p) {
    const Shape& s = *p.s;
    cb::ops::ConvParams cp;
    cp.window.kernel_shape = {s.k, s.k};
    cp.window.strides = {s.stride, s.stride};
    cp.window.dilations = {1, 1};
    cp.window.pads = {s.pad, s.pad, s.pad, s.pad};
    params = cp;
    dy = p.y;
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1, 1);
    for (float& f : dy) f = u(rng);
    dx.assign(p.x.size(), 0.f);
    dw.assign(p.w.size(), 0.f);
    args.params = &params;
    args.in = {{dy.data(), cb::DType::F32, {p.n, s.m, p.oh, p.ow}},
               {p.x.data(), cb::DType::F32, {p.n, s.c, s.h, s.w}},
               {p.w.data(), cb::DType::F32, {s.m, s.c, s.k, s.k}}};
    args.out = {{dx.data(), cb::DType::F32, {p.n, s.c, s.h, s.w}},
                {dw.data(), cb::DType::F32, {s.m, s.c, s.k, s.k}}};
  }
  // with_dx false: dW only, as for a first layer (the vjp omits dX of the model's input).
  void run(cb::ThreadPool& pool, bool with_dx = true) {
    cb::cpu::ScopedPool scope(&pool);  // the pool these direct calls of CPU internals run on
    args.out[0].data = with_dx ? dx.data() : nullptr;
    cb::cpu::conv_grad_im2col(args);
  }
  void run_dnnl(cb::ThreadPool& pool, bool with_dx = true) {
    cb::cpu::ScopedPool scope(&pool);  // the pool these direct calls of CPU internals run on
    args.out[0].data = with_dx ? dx.data() : nullptr;
    if (!cb::cpu::conv_grad_dnnl(args)) std::abort();
  }
};

double max_rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, double(std::abs(a[i] - b[i])));
    scale = std::max(scale, double(std::abs(b[i])));
  }
  return scale > 0 ? err / scale : err;
}

void bench_backward(int reps) {
  fmt::print(
      "\nconv backward (ConvGrad dX + dW), f32, median of {} interleaved runs, us per call\n",
      reps);
  fmt::print("{:<9} {:<24} {:>5} {:>3} {:>9} {:>9} {:>9} {:>9}\n", "net", "shape", "batch", "thr",
             "im2col", "cb-dnnl", "dW:im2col", "dW:dnnl");
  for (int threads : {1, 2}) {
    cb::ThreadPool pool(threads);
    const int64_t batch = 16;
    std::map<std::string, std::pair<double, double>> totals;
    for (const Shape& s : kShapes) {
      Problem p = make_problem(s, batch);
      Backward b(p);
      std::vector<double> ta, td, twa, twd;
      bool dnnl = cb::cpu::conv_dnnl_available();
      if (dnnl) {  // check the two paths agree before timing
        b.run(pool);
        std::vector<float> dx0 = b.dx, dw0 = b.dw;
        b.run_dnnl(pool);
        double ex = max_rel_err(b.dx, dx0), ew = max_rel_err(b.dw, dw0);
        if (ex > 1e-5 || ew > 1e-5) fmt::print("  MISMATCH dX {} dW {} (relative)\n", ex, ew);
      }
      for (int r = -3; r < reps; ++r) {
        double t0 = now_us();
        b.run(pool);
        double t1 = now_us();
        if (r >= 0) ta.push_back(t1 - t0);
        t0 = now_us();
        b.run(pool, false);
        t1 = now_us();
        if (r >= 0) twa.push_back(t1 - t0);
        if (!dnnl) continue;
        t0 = now_us();
        b.run_dnnl(pool);
        t1 = now_us();
        if (r >= 0) td.push_back(t1 - t0);
        t0 = now_us();
        b.run_dnnl(pool, false);
        t1 = now_us();
        if (r >= 0) twd.push_back(t1 - t0);
      }
      auto med = [](const std::vector<double>& v) { return v.empty() ? 0.0 : median(v); };
      double ma = med(ta), md = med(td);
      totals[s.net].first += s.count * ma;
      totals[s.net].second += s.count * md;
      fmt::print("{:<9} {:<24} {:>5} {:>3} {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f}\n", s.net, s.name,
                 batch, threads, ma, md, med(twa), med(twd));
    }
    for (auto& [net, t] : totals)
      fmt::print(
          "{:<9} {:<24} {:>5} {:>3} {:>9.0f} {:>9.0f}  (sum over the net's convs, ratio "
          "im2col/cb-dnnl {:.2f})\n",
          net, "TOTAL", batch, threads, t.first, t.second, t.second > 0 ? t.first / t.second : 0.0);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int reps = argc > 1 ? std::atoi(argv[1]) : 30;
  std::string what = argc > 2 ? argv[2] : "all";
  if (what == "bwd") {
    bench_backward(reps);
    return 0;
  }
  fmt::print("conv forward, f32, median of {} interleaved runs, microseconds per call\n", reps);
  fmt::print("{:<9} {:<24} {:>5} {:>3} {:>9} {:>9} {:>9} {:>9}  {}\n", "net", "shape", "batch",
             "thr", "im2col", "cb-dnnl", "omp-nchw", "omp-blk", "oneDNN impls (nchw / blocked)");
  struct Total {
    double im2col = 0, cbd = 0, plain = 0, blk = 0;
  };
  for (int threads : {1, 2}) {
    cb::ThreadPool pool(threads);
#ifdef CB_HAVE_DNNL
    omp_set_num_threads(threads);
#endif
    for (int64_t batch : {16, 64}) {
      std::map<std::string, Total> totals;
      for (const Shape& s : kShapes) {
        Problem p = make_problem(s, batch);
        Im2col a(p);
        std::vector<double> ta, td, tp, tb;
        std::string impls = "-";
#ifdef CB_HAVE_DNNL
        Dnnl plain(p, false), blk(p, true);
        impls = plain.impl + " / " + blk.impl;
        // Check they agree before timing.
        a.run(pool);
        std::vector<float> y0 = p.y;
        for (int v = 0; v < 3; ++v) {
          std::fill(p.y.begin(), p.y.end(), 0.f);
          if (v == 0) a.run_dnnl(pool);
          if (v == 1) plain.run();
          if (v == 2) blk.run();
          double err = 0;
          for (size_t i = 0; i < y0.size(); ++i)
            err = std::max(err, double(std::abs(p.y[i] - y0[i])));
          if (err > 1e-3) fmt::print("  MISMATCH variant {} max abs err {}\n", v, err);
        }
#endif
        for (int r = -3; r < reps; ++r) {
          double t0 = now_us();
          a.run(pool);
          double t1 = now_us();
          if (r >= 0) ta.push_back(t1 - t0);
#ifdef CB_HAVE_DNNL
          t0 = now_us();
          a.run_dnnl(pool);
          t1 = now_us();
          if (r >= 0) td.push_back(t1 - t0);
          t0 = now_us();
          plain.run();
          t1 = now_us();
          if (r >= 0) tp.push_back(t1 - t0);
          t0 = now_us();
          blk.run();
          t1 = now_us();
          if (r >= 0) tb.push_back(t1 - t0);
#endif
        }
        auto med = [](const std::vector<double>& v) { return v.empty() ? 0.0 : median(v); };
        double ma = med(ta), md = med(td), mp = med(tp), mb = med(tb);
        Total& t = totals[s.net];
        t.im2col += s.count * ma;
        t.cbd += s.count * md;
        t.plain += s.count * mp;
        t.blk += s.count * mb;
        fmt::print("{:<9} {:<24} {:>5} {:>3} {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f}  {}\n", s.net,
                   s.name, batch, threads, ma, md, mp, mb, impls);
      }
      for (auto& [net, t] : totals)
        fmt::print(
            "{:<9} {:<24} {:>5} {:>3} {:>9.0f} {:>9.0f} {:>9.0f} {:>9.0f}  (sum over the net's "
            "convs, ratio im2col/cb-dnnl {:.2f})\n",
            net, "TOTAL", batch, threads, t.im2col, t.cbd, t.plain, t.blk,
            t.cbd > 0 ? t.im2col / t.cbd : 0.0);
    }
  }
  if (what == "all") bench_backward(reps);
}
