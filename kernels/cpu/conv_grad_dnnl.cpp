// ConvGrad's dX and dW through oneDNN (f32, 1-D to 3-D, groups, dilations): backward-data and
// backward-weights primitives, used by the ConvGrad kernel when crossbow is built with oneDNN
// (CB_HAVE_DNNL). Threading as the forward (conv_dnnl.cpp): our pool splits the batch, oneDNN runs
// single-threaded inside each pool thread; chunk t writes dX of its samples directly and its dW
// into partial t (chunk 0 into dW itself, the others into the calling thread's scratch), summed
// at the end (add_partials) - where the chunk's dY, X and dX outgrow the thread's share of the
// last-level cache, in rounds of a few samples, backward-data then backward-weights on each, so
// that the second reads dY from cache, not memory (MobileNetV2's 1x1 convs at 56x56 and 112x112:
// -5% ConvGrad time) - or, where the weights outweigh the activations, thread t writes
// dW's rows of its share of the output channels over every sample (run_rows). Layouts are oneDNN's
// choice (tag::any): dY, W and X are reordered in, dX and dW out, on every call. Primitives are
// cached per thread and per shape; the reordered tensors live in per-thread scratch buffers shared
// by all shapes, so the steady state builds and allocates nothing. With ConvParams::bf16 the
// reorders round dY, W and X to bf16 (W once per call for every thread's backward-data,
// dnnl_weights.cpp) and both primitives multiply in bf16; dX and dW are accumulated and written in
// f32 (as the forward, f32 where the cores have no bf16 kernels).
#include "kernels/cpu/conv.h"
#include "kernels/cpu/current_pool.h"

#ifdef CB_HAVE_DNNL
#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <dnnl.hpp>
#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/dnnl_conv_util.h"
#include "kernels/cpu/kernel_util.h"
#include "runtime/thread_pool.h"

namespace cb::cpu {

namespace {
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;
using Key = ConvKey;

// One user (plain) memory and, where oneDNN wants another layout, the primitive's own memory
// plus the reorder between them.
struct Mem {
  dnnl::memory user, own;
  dnnl::reorder re;
  bool reordered = false;
};

struct ConvBwdPrim {
  bool ok = false;  // false: oneDNN has no implementation; the caller falls back
  dnnl::convolution_backward_data data;
  dnnl::convolution_backward_weights weights;
  Mem dy_d, w_d, dx_d;  // backward-data: diff_dst in, weights in, diff_src out
  Mem x_w, dy_w, dw_w;  // backward-weights: src in, diff_dst in, diff_weights out
};

using BwdThread = dnnl_conv::ThreadPrims<Key, ConvBwdPrim>;

using dnnl_conv::is_reference;
using dnnl_conv::layout_of;
using dnnl_conv::plain;
using dnnl_conv::type_of;

// `user` in our layout; the primitive wants `want`. `in`: reorder user -> own, else own -> user.
Mem make_mem(const dnnl::engine& eng, const dnnl::memory::desc& user,
             const dnnl::memory::desc& want, bool in) {
  Mem m;
  m.user = dnnl::memory(user, eng, nullptr);
  m.reordered = want != user;
  m.own = m.reordered ? dnnl::memory(want, eng, nullptr) : m.user;
  if (m.reordered) m.re = in ? dnnl::reorder(m.user, m.own) : dnnl::reorder(m.own, m.user);
  return m;
}

// A scratch buffer's size for memory m, in floats (64-byte alignment slack included).
int64_t floats_of(const dnnl::memory& m) {
  return static_cast<int64_t>(m.get_desc().get_size() / sizeof(float)) + 16;
}
// Binds the user data and, if reordered, a scratch buffer; reorders an input in.
void bind_in(dnnl::stream& strm, Mem& m, void* data, float* buf) {
  m.user.set_data_handle(data);
  if (!m.reordered) return;
  m.own.set_data_handle(buf);
  m.re.execute(strm, m.user, m.own);
}
// The same for an output (reordered out by the caller after the primitive ran).
void bind_out(Mem& m, void* data, float* buf) {
  m.user.set_data_handle(data);
  if (m.reordered) m.own.set_data_handle(buf);
}

std::unique_ptr<ConvBwdPrim> build(BwdThread& ts, const KernelArgs& a, int64_t nb, bool bf16,
                                   bool winograd) {
  const auto& p = a.p<ops::ConvParams>();
  const TensorView &dY = a.in[0], &X = a.in[1], &W = a.in[2];
  size_t rank = X.dims.size(), r = rank - 2;
  auto prim = std::make_unique<ConvBwdPrim>();
  dnnl::memory::dims xd(X.dims.begin(), X.dims.end()), yd(dY.dims.begin(), dY.dims.end());
  xd[0] = yd[0] = nb;
  dnnl::memory::dims wd(W.dims.begin(), W.dims.end());
  bool grouped = p.group > 1;
  if (grouped) {  // [M, C/G, k...] is [G, M/G, C/G, k...]
    wd[0] /= p.group;
    wd.insert(wd.begin(), p.group);
  }
  // dX is written in the layout dX has; X in its own (they may differ).
  const TensorView* dX = a.out[0].present() ? &a.out[0] : nullptr;
  dnnl::memory::desc x_md(xd, type_of(X), layout_of(X)), y_md(yd, type_of(dY), layout_of(dY));
  dnnl::memory::desc dx_md(xd, dX ? type_of(*dX) : dt::f32,
                           dX ? layout_of(*dX) : plain(rank, false));
  dnnl::memory::desc w_md(wd, dt::f32, plain(rank, grouped));
  const dnnl_conv::Window win = dnnl_conv::window_of(p, r);
  const dt in_type = bf16 ? dt::bf16 : dt::f32;  // X, W and dY as the primitives read them
  auto any = [](const dnnl::memory::desc& d, dt type = dt::f32) {
    return dnnl::memory::desc(d.dims(), type, tag::any);
  };
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::library);
  dnnl::convolution_backward_data::primitive_desc dpd;
  dnnl::convolution_backward_weights::primitive_desc wpd;
  try {
    std::tie(dpd, wpd) = dnnl_conv::with_algorithm(winograd && !bf16, [&](dnnl::algorithm algo) {
      dnnl::convolution_forward::primitive_desc hint(
          dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo,
                                          any(x_md, in_type), any(w_md, in_type),
                                          any(y_md, in_type), win.st, win.dil, win.pl, win.pr),
          attr, ts.eng);
      return std::pair(dnnl::convolution_backward_data::primitive_desc(
                           dnnl::convolution_backward_data::desc(
                               algo, any(dx_md, dx_md.data_type()), any(w_md, in_type),
                               any(y_md, in_type), win.st, win.dil, win.pl, win.pr),
                           attr, ts.eng, hint),
                       dnnl::convolution_backward_weights::primitive_desc(
                           dnnl::convolution_backward_weights::desc(
                               algo, any(x_md, in_type), any(w_md), any(y_md, in_type), win.st,
                               win.dil, win.pl, win.pr),
                           attr, ts.eng, hint));
    });
  } catch (const dnnl::error&) {
    return prim;  // not ok
  }
  // No bf16 cores: oneDNN offers only its reference kernels; the caller runs f32 instead.
  if (bf16 && (is_reference(dpd.impl_info_str()) || is_reference(wpd.impl_info_str()))) return prim;
  prim->data = dnnl::convolution_backward_data(dpd);
  prim->weights = dnnl::convolution_backward_weights(wpd);
  prim->dy_d = make_mem(ts.eng, y_md, dpd.diff_dst_desc(), true);
  prim->w_d = make_mem(ts.eng, w_md, dpd.weights_desc(), true);
  prim->dx_d = make_mem(ts.eng, dx_md, dpd.diff_src_desc(), false);
  prim->x_w = make_mem(ts.eng, x_md, wpd.src_desc(), true);
  prim->dy_w = make_mem(ts.eng, y_md, wpd.diff_dst_desc(), true);
  prim->dw_w = make_mem(ts.eng, w_md, wpd.diff_weights_desc(), false);
  prim->ok = true;
  return prim;
}

// Backward-weights for output channels [m0, m0 + mh) over every sample, where the weights
// outweigh the activations (ResNet's 256- and 512-channel 3x3 convolutions): each thread writes
// its rows of dW with no partial to reorder out and add (a 512x512x3x3 partial is 9.4 MB).
// dY's channels [m0, m0 + mh) of every sample are read in place (the desc of channels [0, mh) of
// the whole tensor, the handle moved by m0's offset) and reordered into the primitive's layout;
// its dW rows go to dW's rows [m0, m0 + mh), contiguous in the row-major weights.
struct ConvRowsPrim {
  bool ok = false;
  dnnl::convolution_backward_weights weights;
  Mem x_w, dy_w, dw_w;
};
using RowsThread = dnnl_conv::ThreadPrims<Key, ConvRowsPrim>;

std::unique_ptr<ConvRowsPrim> build_rows(RowsThread& ts, const KernelArgs& a, int64_t mh,
                                         bool bf16) {
  const auto& p = a.p<ops::ConvParams>();
  const TensorView &dY = a.in[0], &X = a.in[1], &W = a.in[2];
  const size_t rank = X.dims.size(), r = rank - 2;
  auto prim = std::make_unique<ConvRowsPrim>();
  dnnl::memory::dims xd(X.dims.begin(), X.dims.end()), yd(dY.dims.begin(), dY.dims.end());
  dnnl::memory::dims yh = yd, wd(W.dims.begin(), W.dims.end());
  yh[1] = wd[0] = mh;
  const dnnl::memory::desc x_md(xd, type_of(X), layout_of(X));
  const dnnl::memory::desc w_md(wd, dt::f32, plain(rank, false));
  dnnl::memory::desc y_part;  // channels [0, mh) of the whole dY, its strides
  const dnnl_conv::Window win = dnnl_conv::window_of(p, r);
  const dt in_type = bf16 ? dt::bf16 : dt::f32;
  auto any = [](const dnnl::memory::dims& d, dt type) {
    return dnnl::memory::desc(d, type, tag::any);
  };
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::library);
  const auto algo = dnnl::algorithm::convolution_direct;
  dnnl::convolution_backward_weights::primitive_desc wpd;
  try {
    y_part = dnnl::memory::desc(yd, type_of(dY), layout_of(dY))
                 .submemory_desc(yh, dnnl::memory::dims(rank, 0));
    dnnl::convolution_forward::primitive_desc hint(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, any(xd, in_type),
                                        any(wd, in_type), any(yh, in_type), win.st, win.dil, win.pl,
                                        win.pr),
        attr, ts.eng);
    wpd = dnnl::convolution_backward_weights::primitive_desc(
        dnnl::convolution_backward_weights::desc(algo, any(xd, in_type), any(wd, dt::f32),
                                                 any(yh, in_type), win.st, win.dil, win.pl, win.pr),
        attr, ts.eng, hint);
  } catch (const dnnl::error&) {
    return prim;
  }
  if (bf16 && is_reference(wpd.impl_info_str())) return prim;
  prim->weights = dnnl::convolution_backward_weights(wpd);
  prim->x_w = make_mem(ts.eng, x_md, wpd.src_desc(), true);
  prim->dy_w = make_mem(ts.eng, y_part, wpd.diff_dst_desc(), true);
  prim->dw_w = make_mem(ts.eng, w_md, wpd.diff_weights_desc(), false);
  prim->ok = true;
  return prim;
}

// dW rows [m0, m0 + mh) on the calling thread; false when oneDNN cannot.
bool run_rows(const KernelArgs& a, int64_t m0, int64_t mh, float* dw) {
  const auto& p = a.p<ops::ConvParams>();
  const TensorView &dY = a.in[0], &X = a.in[1];
  RowsThread& ts = RowsThread::local();
  const OmpTeamOfOne omp_guard;
  const int64_t views = dnnl_conv::storage_bits({&X, &dY}) << 2;
  ConvRowsPrim* pr = dnnl_conv::find_prim(
      ts.prims, p.bf16,
      [&](bool bf16) {  // dY's channels too: its strides are the whole tensor's
        return conv_key(p, X.dims, mh, X.dims[0], int64_t{bf16} << 1 | views | dY.dims[1] << 16);
      },
      [&](bool bf16) { return build_rows(ts, a, mh, bf16); });
  if (!pr) return false;
  // Channel m0 of sample 0: m0 x the spatial volume elements in (blocked: m0 is a multiple of 16).
  const int64_t vol = dY.numel() / (dY.dims[0] * dY.dims[1]);
  char* dy = static_cast<char*>(dY.data) + m0 * vol * (dY.bf16_storage ? 2 : 4);
  bind_in(ts.strm, pr->x_w, X.data, dnnl_conv::aligned_scratch<4>(floats_of(pr->x_w.own)));
  bind_in(ts.strm, pr->dy_w, dy, dnnl_conv::aligned_scratch<5>(floats_of(pr->dy_w.own)));
  bind_out(pr->dw_w, dw + m0 * (a.in[2].numel() / a.in[2].dims[0]),
           dnnl_conv::aligned_scratch<6>(floats_of(pr->dw_w.own)));
  pr->weights.execute(ts.strm, {{DNNL_ARG_SRC, pr->x_w.own},
                                {DNNL_ARG_DIFF_DST, pr->dy_w.own},
                                {DNNL_ARG_DIFF_WEIGHTS, pr->dw_w.own}});
  if (pr->dw_w.reordered) pr->dw_w.re.execute(ts.strm, pr->dw_w.own, pr->dw_w.user);
  ts.strm.wait();
  return true;
}

// The calling thread's primitives for a sub-batch of `nb` samples (built on first use); nullptr
// when oneDNN cannot run the conv.
ConvBwdPrim* prim_for(const KernelArgs& a, int64_t nb) {
  const auto& p = a.p<ops::ConvParams>();
  const TensorView &dY = a.in[0], &X = a.in[1], &dX = a.out[0];
  BwdThread& ts = BwdThread::local();
  // Built in a team of one: oneDNN sizes its kernels' work split by the threads it may use.
  const OmpTeamOfOne omp_guard;
  const int64_t views = dnnl_conv::storage_bits({&X, &dY, &dX}) << 2;
  const bool wino = p.winograd;
  return dnnl_conv::find_prim(
      ts.prims, p.bf16,
      [&](bool bf16) {
        return conv_key(p, X.dims, dY.dims[1], nb, int64_t{bf16} << 1 | views | wino << 8);
      },
      [&](bool bf16) { return build(ts, a, nb, bf16, wino); });
}

// dX and the dW partial of samples [n0, n1) on the calling thread, in rounds of `round` samples
// (backward-data, then backward-weights, per round: the second finds the round's dY in cache where
// the whole share would not stay there between the two; each later round's dW goes through
// scratch into `dw`); false when oneDNN cannot. `shared`: W for backward-data, where its layout
// is this primitive's.
bool run_chunk(const KernelArgs& a, int64_t n0, int64_t n1, float* dw,
               const dnnl_conv::SharedWeights& shared, int64_t round) {
  const TensorView &dY = a.in[0], &X = a.in[1], &W = a.in[2];
  const TensorView& dX = a.out[0];
  BwdThread& ts = BwdThread::local();
  const OmpTeamOfOne omp_guard;
  const int64_t w_size = W.numel();
  float* later = dw && n1 - n0 > round ? dnnl_conv::aligned_scratch<16>(w_size) : nullptr;
  for (int64_t r0 = n0; r0 < n1; r0 += round) {
    const int64_t r1 = std::min(n1, r0 + round);
    ConvBwdPrim* found = prim_for(a, r1 - r0);
    if (!found) return false;
    ConvBwdPrim& pr = *found;
    char* x = dnnl_conv::sample_ptr(X, r0);
    char* dy = dnnl_conv::sample_ptr(dY, r0);
    if (dX.present()) {
      bind_in(ts.strm, pr.dy_d, dy, dnnl_conv::aligned_scratch<1>(floats_of(pr.dy_d.own)));
      if (pr.w_d.reordered && shared.serves(pr.w_d.own.get_desc()))
        pr.w_d.own.set_data_handle(shared.data);
      else
        bind_in(ts.strm, pr.w_d, W.data, dnnl_conv::aligned_scratch<2>(floats_of(pr.w_d.own)));
      bind_out(pr.dx_d, dnnl_conv::sample_ptr(dX, r0),
               dnnl_conv::aligned_scratch<3>(floats_of(pr.dx_d.own)));
      pr.data.execute(ts.strm, {{DNNL_ARG_DIFF_DST, pr.dy_d.own},
                                {DNNL_ARG_WEIGHTS, pr.w_d.own},
                                {DNNL_ARG_DIFF_SRC, pr.dx_d.own}});
      if (pr.dx_d.reordered) pr.dx_d.re.execute(ts.strm, pr.dx_d.own, pr.dx_d.user);
    }
    if (!dw) continue;
    bind_in(ts.strm, pr.x_w, x, dnnl_conv::aligned_scratch<4>(floats_of(pr.x_w.own)));
    // The same layout as for backward-data: reuse that reorder's result.
    if (dX.present() && pr.dy_d.reordered && pr.dy_w.reordered &&
        pr.dy_w.own.get_desc() == pr.dy_d.own.get_desc())
      pr.dy_w.own.set_data_handle(pr.dy_d.own.get_data_handle());
    else
      bind_in(ts.strm, pr.dy_w, dy, dnnl_conv::aligned_scratch<5>(floats_of(pr.dy_w.own)));
    bind_out(pr.dw_w, r0 == n0 ? dw : later, dnnl_conv::aligned_scratch<6>(floats_of(pr.dw_w.own)));
    pr.weights.execute(ts.strm, {{DNNL_ARG_SRC, pr.x_w.own},
                                 {DNNL_ARG_DIFF_DST, pr.dy_w.own},
                                 {DNNL_ARG_DIFF_WEIGHTS, pr.dw_w.own}});
    if (pr.dw_w.reordered) pr.dw_w.re.execute(ts.strm, pr.dw_w.own, pr.dw_w.user);
    if (r0 != n0) {
      ts.strm.wait();
      for (int64_t i = 0; i < w_size; ++i) dw[i] += later[i];
    }
  }
  ts.strm.wait();
  return true;
}

// Samples per round of run_chunk: all of a thread's `chunk` where every thread's share of dY, X
// and dX fits in half the last-level cache, else as many as do (at least one).
int64_t round_for(const KernelArgs& a, int64_t chunk, int64_t threads) {
  const TensorView &dY = a.in[0], &X = a.in[1], &dX = a.out[0];
  const int64_t n = X.dims[0];
  const int64_t per_sample =
      static_cast<int64_t>(dY.bytes() + X.bytes() + (dX.present() ? dX.bytes() : 0)) / n;
  const int64_t budget = last_level_cache_bytes() / 2 / std::max<int64_t>(1, threads);
  if (per_sample * chunk <= budget) return chunk;
  return std::max<int64_t>(1, budget / std::max<int64_t>(1, per_sample));
}
}  // namespace

bool conv_grad_dnnl(const KernelArgs& a, bool weights) {
  const TensorView &X = a.in[1], &dX = a.out[0];
  const TensorView* dW = weights && a.out.size() > 1 && a.out[1].present() ? &a.out[1] : nullptr;
  if (kernel_dtype(a) != DType::F32 || X.rank() < 3 || X.rank() > 5) return false;
  const int64_t n = X.dims[0], w_size = a.in[2].numel();
  if (n == 0 || a.in[0].numel() == 0) return false;  // the im2col path zero-fills
  if (!dX.present() && !dW) return true;
  int threads = current_pool() ? current_pool()->size() : 1;
  const int64_t want = std::min<int64_t>(threads, n);
  const int64_t chunk = (n + want - 1) / want, parts = (n + chunk - 1) / chunk;  // none empty
  // Winograd's weight-gradient kernels store with aligned non-temporal stores: where dW is not
  // 64-byte aligned (the arena and the flat buffers are; a caller's own buffer may not be) the
  // first chunk writes an aligned buffer, copied into dW after. The other chunks' partials are
  // aligned: Winograd's weights (channels multiples of 16, 3x3) are multiples of 16 floats.
  float* const dw = dW ? dW->ptr<float>() : nullptr;
  const bool via_copy = dw && a.p<ops::ConvParams>().winograd && !dnnl_conv::aligned64({dw});
  float* const first = via_copy ? dnnl_conv::aligned_scratch<14>(w_size) : dw;
  auto finish_first = [&] {
    if (via_copy) std::memcpy(dw, first, static_cast<size_t>(w_size) * sizeof(float));
  };
  // Rounds only where both gradients are made (then each round reads its dY twice).
  const bool both = dX.present() && dW && !a.p<ops::ConvParams>().winograd;
  if (parts <= 1) {
    if (!run_chunk(a, 0, n, first, {}, both ? round_for(a, n, 1) : n)) return false;
    finish_first();
    return true;
  }
  // Equal sub-batches, one per thread; a shape oneDNN rejects is rejected by every chunk alike.
  const auto& p = a.p<ops::ConvParams>();
  // dW by output channels where the weights outweigh half of X (a batch split's partial would
  // be the larger traffic): direct convolutions, one group, 16 channels or more a part.
  const int64_t m = a.in[2].dims[0];
  const bool rows = dW && !p.winograd && p.group == 1 && m % (16 * parts) == 0 &&
                    2 * w_size >= X.numel() && !via_copy;
  float* partials = dW && !rows ? dnnl_conv::aligned_scratch<7>((parts - 1) * w_size) : nullptr;
  // bf16 weights for backward-data: one copy in the primitives' layout for every thread.
  dnnl_conv::SharedWeights shared;
  if (const ConvBwdPrim* p0 = dX.present() && p.bf16 ? prim_for(a, chunk) : nullptr;
      p0 && p0->w_d.reordered)
    shared = dnnl_conv::share_weights<15>(a.in[2].ptr<float>(), p0->w_d.own.get_desc());
  const int64_t round = both && !rows ? round_for(a, chunk, parts) : chunk;
  std::atomic<bool> ok{true};
  current_pool()->parallel_for(parts, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* part = !dW || rows ? nullptr : t == 0 ? first : partials + (t - 1) * w_size;
      if ((dX.present() || part) &&
          !run_chunk(a, t * chunk, std::min(n, (t + 1) * chunk), part, shared, round))
        ok = false;
      if (rows && !run_rows(a, t * m / parts, m / parts, dw)) ok = false;
    }
  });
  if (!ok) return false;
  if (rows) return true;
  finish_first();
  if (dW) add_partials(a, dW->ptr<float>(), partials, parts - 1, w_size);
  return true;
}

}  // namespace cb::cpu

#else
namespace cb::cpu {
bool conv_grad_dnnl(const KernelArgs&, bool) { return false; }
}  // namespace cb::cpu
#endif
