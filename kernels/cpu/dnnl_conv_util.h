// What the oneDNN kernel files share: our tensors' layouts and element types as oneDNN memory
// descriptors, a view's layout flags as primitive-cache key bits, the bf16-first primitive lookup
// and a view's samples by bytes (the two convolution files), and the per-thread engine, stream and
// primitive cache (those and gemm_bf16.cpp). Built with oneDNN only.
#pragma once

#ifdef CB_HAVE_DNNL
#include <cstdint>
#include <dnnl.hpp>
#include <initializer_list>
#include <map>
#include <memory>
#include <string_view>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/current_pool.h"
#include "runtime/kernel_args.h"
#include "runtime/ops/params.h"

namespace cb::cpu::dnnl_conv {

using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

// Row-major layouts of activations [N, C, spatial...] and (grouped) weights.
inline tag plain(size_t rank, bool grouped) {
  if (grouped) return rank == 3 ? tag::goiw : rank == 4 ? tag::goihw : tag::goidhw;
  return rank == 3 ? tag::ncw : rank == 4 ? tag::nchw : tag::ncdhw;
}
// An activation's layout and element type as it lies in our buffer (TensorView::blocked:
// nChw16c; bf16_storage: bf16).
inline tag layout_of(const TensorView& t) {
  return t.blocked ? tag::nChw16c : plain(t.dims.size(), false);
}
inline dt type_of(const TensorView& t) { return t.bf16_storage ? dt::bf16 : dt::f32; }

// Whether a primitive's implementation is oneDNN's reference (unoptimised) kernel: what it offers
// for bf16 on cores without AVX-512 BF16.
inline bool is_reference(const char* impl_info) {
  return std::string_view(impl_info).rfind("ref", 0) == 0;
}

// Two key bits per present view: blocked, stored as bf16 (for ConvKey's flags).
inline int64_t storage_bits(std::initializer_list<const TensorView*> views) {
  int64_t bits = 0, at = 0;
  for (const TensorView* v : views) {
    if (v && v->present()) bits |= (int64_t{v->blocked} | int64_t{v->bf16_storage} << 1) << at;
    at += 2;
  }
  return bits;
}

// The cached primitive for `key(bf16)`, built by `build(bf16)` on first use: bf16 first where
// asked, f32 where bf16 has no kernel (the shape, or cores without AVX-512 BF16); nullptr where
// oneDNN has neither.
template <class Prim, class Key, class Build>
Prim* find_prim(std::map<ConvKey, std::unique_ptr<Prim>>& cache, bool want_bf16, Key&& key,
                Build&& build) {
  for (bool bf16 : {want_bf16, false}) {
    auto& slot = cache[key(bf16)];
    if (!slot) slot = build(bf16);
    if (slot->ok) return slot.get();
    if (!bf16) break;
  }
  return nullptr;
}

// A thread's oneDNN engine and stream and its cache of built primitives by key: one per kernel
// file (its Key and Prim) and thread, since each pool thread runs its share of a product or a
// batch with primitives of its own.
template <class Key, class Prim>
struct ThreadPrims {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  std::map<Key, std::unique_ptr<Prim>> prims;
  static ThreadPrims& local() {
    thread_local ThreadPrims s;
    return s;
  }
};

// Scratch buffer `slot` of the calling thread (blas.h's scratch), at least `floats` long and
// 64-byte aligned: oneDNN's kernels may store to their buffers with aligned non-temporal stores
// (the Winograd kernels do).
template <int slot>
float* aligned_scratch(int64_t floats) {
  const auto p = reinterpret_cast<uintptr_t>(scratch<float, slot>(floats + 16));
  return reinterpret_cast<float*>((p + 63) & ~uintptr_t{63});
}

// Whether every pointer is 64-byte aligned (the Winograd weight-gradient kernels store with
// aligned non-temporal stores).
inline bool aligned64(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 64 != 0) return false;
  return true;
}

// The convolution algorithm for a primitive: Winograd where asked (ConvParams::winograd) and
// oneDNN has it for the shape and these cores, else direct; `make` builds the primitive
// descriptor for an algorithm and throws dnnl::error where oneDNN has no implementation.
template <class Make>
auto with_algorithm(bool winograd, Make&& make) {
  if (winograd) try {
      return make(dnnl::algorithm::convolution_winograd);
    } catch (const dnnl::error&) {
    }
  return make(dnnl::algorithm::convolution_direct);
}

// A convolution's strides, dilations (as oneDNN counts them: the gaps) and leading and trailing
// pads over its r spatial dims, as oneDNN's descriptors take them.
struct Window {
  dnnl::memory::dims st, dil, pl, pr;
};
inline Window window_of(const ops::ConvParams& p, size_t r) {
  Window w{dnnl::memory::dims(r), dnnl::memory::dims(r), dnnl::memory::dims(r),
           dnnl::memory::dims(r)};
  for (size_t i = 0; i < r; ++i) {
    w.st[i] = p.window.strides[i];
    w.dil[i] = p.window.dilations[i] - 1;
    w.pl[i] = p.window.pads[i];
    w.pr[i] = p.window.pads[i + r];
  }
  return w;
}

// Samples [n0, ...) of an activation: its bytes from sample n0 on (bf16 storage: 2 an element).
inline char* sample_ptr(const TensorView& t, int64_t n0) {
  return static_cast<char*>(t.data) + n0 * (static_cast<int64_t>(t.bytes()) / t.dims[0]);
}

// Row-major f32 weights (the dims of `want`) rounded to bf16 (nearest even) into `want`'s layout
// at `dst`, split over the current pool's threads (dnnl_weights.cpp): one copy for every
// thread's primitive. false, writing nothing, where `want` is not a dense bf16 blocked layout
// without padding; the caller then lets each primitive reorder its own.
bool weights_to_bf16(const float* src, const dnnl::memory::desc& want, uint16_t* dst);

// The weights of one call in a primitive's layout, made once by weights_to_bf16 in the calling
// thread's scratch (`slot`) for every thread's primitive whose layout is `desc`; a primitive with
// another layout (an odd last sub-batch) reorders its own. Empty where `want` is not bf16 blocked.
struct SharedWeights {
  dnnl::memory::desc desc;
  void* data = nullptr;
  // Whether a primitive whose weights memory has layout `d` reads this copy.
  bool serves(const dnnl::memory::desc& d) const { return data && d == desc; }
};
template <int slot>
SharedWeights share_weights(const float* w, const dnnl::memory::desc& want) {
  SharedWeights s;
  if (want.data.data_type != dnnl_bf16) return s;
  auto* buf = reinterpret_cast<uint16_t*>(aligned_scratch<slot>(int64_t(want.get_size() / 4 + 1)));
  if (!weights_to_bf16(w, want, buf)) return s;
  s.desc = want;
  s.data = buf;
  return s;
}

}  // namespace cb::cpu::dnnl_conv
#endif
