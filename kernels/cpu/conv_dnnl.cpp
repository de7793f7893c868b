// Conv through oneDNN (f32, 1-D to 3-D, groups, dilations), used by the Conv kernel when crossbow
// is built with oneDNN (CB_HAVE_DNNL). oneDNN runs single-threaded inside each of our pool's
// threads (its OpenMP team is set to 1 per thread): the pool splits the batch, thread t convolves
// samples [n0, n1) with a primitive built for that sub-batch. oneDNN picks its own (blocked)
// layouts; X, W are reordered in and Y out on every call, since W changes every training step.
// With ConvParams::bf16 the reorders also round X and W to bf16 (Y stays f32), W once per call
// for every thread (dnnl_weights.cpp) where each thread rounded all of it: oneDNN's bf16
// kernels then multiply at twice the f32 rate, where the cores have AVX-512 BF16 (elsewhere oneDNN
// offers only its reference bf16 kernel, and the conv runs in f32 instead).
// Primitives are cached per thread and per shape; the reordered X/W/Y live in per-thread
// scratch buffers shared by all shapes (the largest wins), so the steady state builds and
// allocates nothing and the extra memory is one conv's worth per thread, not one per node.
#include "kernels/cpu/conv.h"
#include "kernels/cpu/current_pool.h"

#ifdef CB_HAVE_DNNL
#include <array>
#include <atomic>
#include <dnnl.hpp>
#include <map>
#include <memory>
#include <unordered_map>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/dnnl_conv_util.h"
#include "runtime/thread_pool.h"

namespace cb::cpu {

namespace {
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;
using Key = ConvKey;

struct ConvFwdPrim {
  bool ok = false;  // false: oneDNN has no implementation; the caller falls back
  dnnl::convolution_forward conv;
  dnnl::memory x_user, w_user, b_user, y_user;  // our layouts; data handles set per call
  dnnl::memory x, w, y;  // the primitive's layouts: the user memories, or scratch-backed
  dnnl::reorder to_x, to_w, from_y;
  bool re_x = false, re_w = false, re_y = false;
  std::unordered_map<int, dnnl::memory> args;
};

using FwdThread = dnnl_conv::ThreadPrims<Key, ConvFwdPrim>;

using dnnl_conv::is_reference;
using dnnl_conv::layout_of;
using dnnl_conv::plain;
using dnnl_conv::type_of;

std::unique_ptr<ConvFwdPrim> build(FwdThread& ts, const KernelArgs& a, int64_t nb, bool has_bias,
                                   bool bf16, bool winograd) {
  const auto& p = a.p<ops::ConvParams>();
  const TensorView &X = a.in[0], &W = a.in[1], &Y = a.out[0];
  size_t rank = X.dims.size(), r = rank - 2;
  auto prim = std::make_unique<ConvFwdPrim>();
  dnnl::memory::dims xd(X.dims.begin(), X.dims.end()), yd(Y.dims.begin(), Y.dims.end());
  xd[0] = yd[0] = nb;
  dnnl::memory::dims wd(W.dims.begin(), W.dims.end());
  bool grouped = p.group > 1;
  if (grouped) {  // [M, C/G, k...] is [G, M/G, C/G, k...]
    wd[0] /= p.group;
    wd.insert(wd.begin(), p.group);
  }
  dnnl::memory::desc x_md(xd, type_of(X), layout_of(X)), y_md(yd, type_of(Y), layout_of(Y));
  dnnl::memory::desc w_md(wd, dt::f32, plain(rank, grouped)), b_md({Y.dims[1]}, dt::f32, tag::x);
  const dnnl_conv::Window win = dnnl_conv::window_of(p, r);
  const dt in_type = bf16 ? dt::bf16 : dt::f32;  // X and W as the primitive reads them
  auto any = [](const dnnl::memory::desc& d, dt type = dt::f32) {
    return dnnl::memory::desc(d.dims(), type, tag::any);
  };
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::library);
  dnnl::convolution_forward::primitive_desc pd;
  try {
    const auto fwd = dnnl::prop_kind::forward_training;
    pd = dnnl_conv::with_algorithm(winograd && !bf16, [&](dnnl::algorithm algo) {
      auto desc = has_bias ? dnnl::convolution_forward::desc(
                                 fwd, algo, any(x_md, in_type), any(w_md, in_type), b_md,
                                 any(y_md, type_of(Y)), win.st, win.dil, win.pl, win.pr)
                           : dnnl::convolution_forward::desc(
                                 fwd, algo, any(x_md, in_type), any(w_md, in_type),
                                 any(y_md, type_of(Y)), win.st, win.dil, win.pl, win.pr);
      return dnnl::convolution_forward::primitive_desc(desc, attr, ts.eng);
    });
  } catch (const dnnl::error&) {
    return prim;  // not ok
  }
  if (bf16 && is_reference(pd.impl_info_str())) return prim;  // no bf16 cores: f32 instead
  prim->conv = dnnl::convolution_forward(pd);
  prim->x_user = dnnl::memory(x_md, ts.eng, nullptr);
  prim->w_user = dnnl::memory(w_md, ts.eng, nullptr);
  prim->y_user = dnnl::memory(y_md, ts.eng, nullptr);
  auto own = [&](const dnnl::memory::desc& want, dnnl::memory& user, bool& re) {
    re = want != user.get_desc();
    return re ? dnnl::memory(want, ts.eng, nullptr) : user;  // handle set per call
  };
  prim->x = own(pd.src_desc(), prim->x_user, prim->re_x);
  prim->w = own(pd.weights_desc(), prim->w_user, prim->re_w);
  prim->y = own(pd.dst_desc(), prim->y_user, prim->re_y);
  if (prim->re_x) prim->to_x = dnnl::reorder(prim->x_user, prim->x);
  if (prim->re_w) prim->to_w = dnnl::reorder(prim->w_user, prim->w);
  if (prim->re_y) prim->from_y = dnnl::reorder(prim->y, prim->y_user);
  prim->args = {{DNNL_ARG_SRC, prim->x}, {DNNL_ARG_WEIGHTS, prim->w}, {DNNL_ARG_DST, prim->y}};
  if (has_bias) {
    prim->b_user = dnnl::memory(b_md, ts.eng, nullptr);
    prim->args[DNNL_ARG_BIAS] = prim->b_user;
  }
  prim->ok = true;
  return prim;
}

// The calling thread's primitive for a sub-batch of `nb` samples (built on first use); nullptr
// when oneDNN cannot run the conv.
ConvFwdPrim* prim_for(const KernelArgs& a, int64_t nb) {
  const auto& p = a.p<ops::ConvParams>();
  const TensorView &X = a.in[0], &Y = a.out[0];
  const bool has_bias = a.in.size() > 2 && a.in[2].present();
  FwdThread& ts = FwdThread::local();
  // Built in a team of one: oneDNN sizes its kernels' work split by the threads it may use.
  const OmpTeamOfOne omp_guard;
  const int64_t views = dnnl_conv::storage_bits({&X, &Y}) << 2;
  const bool wino = p.winograd;
  return dnnl_conv::find_prim(
      ts.prims, p.bf16,
      [&](bool bf16) {
        return conv_key(p, X.dims, Y.dims[1], nb, has_bias | bf16 << 1 | views | wino << 8);
      },
      [&](bool bf16) { return build(ts, a, nb, has_bias, bf16, wino); });
}

// Convolves samples [n0, n1) on the calling thread; false when oneDNN cannot.
bool run_chunk(const KernelArgs& a, int64_t n0, int64_t n1,
               const dnnl_conv::SharedWeights& shared) {
  const TensorView &X = a.in[0], &W = a.in[1], &Y = a.out[0];
  bool has_bias = a.in.size() > 2 && a.in[2].present();
  FwdThread& ts = FwdThread::local();
  const OmpTeamOfOne omp_guard;
  ConvFwdPrim* found = prim_for(a, n1 - n0);
  if (!found) return false;
  ConvFwdPrim& pr = *found;
  pr.x_user.set_data_handle(dnnl_conv::sample_ptr(X, n0));
  pr.w_user.set_data_handle(W.data);
  pr.y_user.set_data_handle(dnnl_conv::sample_ptr(Y, n0));
  if (has_bias) pr.b_user.set_data_handle(a.in[2].data);
  auto bind = [](dnnl::memory& m, float* buf) { m.set_data_handle(buf); };
  auto floats = [](const dnnl::memory& m) {
    return static_cast<int64_t>(m.get_desc().get_size() / sizeof(float)) + 16;
  };
  if (pr.re_x) bind(pr.x, dnnl_conv::aligned_scratch<1>(floats(pr.x)));
  const bool own_w = pr.re_w && !shared.serves(pr.w.get_desc());
  if (own_w) bind(pr.w, dnnl_conv::aligned_scratch<2>(floats(pr.w)));
  if (pr.re_w && !own_w) pr.w.set_data_handle(shared.data);
  if (pr.re_y) bind(pr.y, dnnl_conv::aligned_scratch<3>(floats(pr.y)));
  if (pr.re_x) pr.to_x.execute(ts.strm, pr.x_user, pr.x);
  if (own_w) pr.to_w.execute(ts.strm, pr.w_user, pr.w);
  pr.conv.execute(ts.strm, pr.args);
  if (pr.re_y) pr.from_y.execute(ts.strm, pr.y, pr.y_user);
  ts.strm.wait();
  return true;
}
}  // namespace

bool conv_dnnl(const KernelArgs& a) {
  if (kernel_dtype(a) != DType::F32 || a.in[0].rank() < 3 || a.in[0].rank() > 5) return false;
  int64_t n = a.in[0].dims[0];
  if (n == 0) return true;
  int threads = current_pool() ? current_pool()->size() : 1;
  if (threads <= 1 || n == 1) return run_chunk(a, 0, n, {});
  // Equal sub-batches, one per thread; a shape oneDNN rejects is rejected by every chunk alike.
  int64_t chunk = (n + threads - 1) / threads;
  int64_t parts = (n + chunk - 1) / chunk;  // no empty last chunk (n = 5 on 4 threads: 2,2,1)
  // bf16 weights: one copy in the primitives' layout for every thread.
  dnnl_conv::SharedWeights shared;
  if (const ConvFwdPrim* first = a.p<ops::ConvParams>().bf16 ? prim_for(a, chunk) : nullptr;
      first && first->re_w)
    shared = dnnl_conv::share_weights<15>(a.in[1].ptr<float>(), first->w.get_desc());
  std::atomic<bool> ok{true};
  current_pool()->parallel_for(parts, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      if (!run_chunk(a, t * chunk, std::min(n, (t + 1) * chunk), shared)) ok = false;
  });
  return ok;
}

bool conv_dnnl_available() { return true; }

bool dnnl_bf16_available() {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
  return (isa & bf16) == bf16;  // oneDNN's ISA values contain the bits of the ISAs they extend
}

bool dnnl_winograd_available() {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto avx512 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core);
  return (isa & avx512) == avx512;
}

}  // namespace cb::cpu

#else
namespace cb::cpu {
bool conv_dnnl(const KernelArgs&) { return false; }
bool conv_dnnl_available() { return false; }
bool dnnl_bf16_available() { return false; }
bool dnnl_winograd_available() { return false; }
}  // namespace cb::cpu
#endif
