// AttentionHeads (runtime/ops/attention_heads.cpp): a chain of MatMul, MaskedSoftmax and
// MaskedSoftmaxGrad steps run one batch index (one head of one example) at a time, across the
// pool. Each step runs its node's kernel code on that index's block (matmul_one, the masked
// softmax rows), so the bits are the unfused graph's; the temporaries (attention's scores, dP,
// dS) live in a thread's scratch one [T, T] block at a time, in cache, instead of as tensors.
#include <cstdint>
#include <vector>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/current_pool.h"
#include "kernels/cpu/masked_softmax_rows.h"
#include "kernels/cpu/matmul_plan.h"
#include "runtime/error.h"
#include "runtime/ops/params.h"
#include "runtime/thread_pool.h"

namespace cb::cpu {

namespace {
using Heads = ops::AttentionHeadsParams;
using Ref = Heads::Ref;

struct StepPlan {
  MatMulPlan mm;        // products
  MaskedRowsPlan rows;  // softmaxes
  int64_t row_len = 0, rows_per_index = 0;
};

// Where a step's operand for one batch index lives: f32, or bf16 (a value stored as bf16).
struct Ptr {
  float* f = nullptr;
  uint16_t* h = nullptr;
};
}  // namespace

void AttentionHeads(const KernelArgs& a) {
  const auto& hp = a.p<Heads>();
  const size_t nt = hp.temp_bf16.size();
  std::vector<std::vector<int64_t>> temp_dims(nt);
  auto view_dims = [&](const Ref& r) -> const std::vector<int64_t>& {
    switch (r.from) {
      case Ref::From::Input:
        return a.in.at(static_cast<size_t>(r.index)).dims;
      case Ref::From::Output:
        return a.out.at(static_cast<size_t>(r.index)).dims;
      default:
        return temp_dims.at(static_cast<size_t>(r.index));
    }
  };
  // Plan each step; a temporary's dims are its writer's result's.
  std::vector<StepPlan> plans(hp.steps.size());
  int64_t count = -1;
  for (size_t s = 0; s < hp.steps.size(); ++s) {
    const Heads::Step& st = hp.steps[s];
    StepPlan& pl = plans[s];
    int64_t c = 0;
    if (st.kind == Heads::Kind::MatMul) {
      CB_CHECK(st.in.size() == 2);
      const auto &ad = view_dims(st.in[0]), &bd = view_dims(st.in[1]);
      if (st.out.from == Ref::From::Temp)
        temp_dims[static_cast<size_t>(st.out.index)] = matmul_result_dims(ad, bd, st.matmul);
      pl.mm = plan_matmul(ad, bd, view_dims(st.out), st.matmul);
      c = pl.mm.count;
    } else {
      const size_t x = st.kind == Heads::Kind::MaskedSoftmax ? 0 : 1, mask = x + 1;
      CB_CHECK(st.in.size() == mask || st.in.size() == mask + 1);
      const std::vector<int64_t>& xd = view_dims(st.in[x]);
      if (st.out.from == Ref::From::Temp) temp_dims[static_cast<size_t>(st.out.index)] = xd;
      const TensorView* m = nullptr;
      if (st.in.size() > mask) {
        CB_CHECK(st.in[mask].from == Ref::From::Input);
        m = &a.in.at(static_cast<size_t>(st.in[mask].index));
      }
      pl.rows = plan_masked_rows(xd, m, st.softmax);
      CB_CHECK(xd.size() >= 3);
      c = pl.rows.pl.rows / xd[xd.size() - 2];
      pl.row_len = pl.rows.pl.n;
      pl.rows_per_index = xd[xd.size() - 2];
    }
    CB_CHECK(count < 0 || c == count);
    count = c;
  }
  if (count <= 0) return;
  // Each temporary's block: the last two dims of its dims, at offset i * block in the tensor it
  // stands for (fuse_attention_heads makes only such values temporaries).
  std::vector<int64_t> block(nt), at(nt);
  int64_t floats = 0;
  for (size_t t = 0; t < nt; ++t) {
    const auto& d = temp_dims[t];
    CB_CHECK(d.size() >= 3);
    block[t] = d[d.size() - 2] * d[d.size() - 1];
    at[t] = floats;
    floats += hp.temp_bf16[t] ? (block[t] + 1) / 2 : block[t];
    floats = (floats + 15) / 16 * 16;  // each block 64-byte aligned
  }
  auto body = [&](int64_t i0, int64_t i1) {
    float* scratch_base = scratch<float, 30>(floats + 16);
    // 64-byte aligned, as oneDNN and the vector loops prefer.
    float* temps =
        reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch_base) + 63) & ~uintptr_t{63});
    for (int64_t i = i0; i < i1; ++i) {
      // A pointer to batch index i's part of a value, `off` elements in for node inputs and
      // outputs; a temporary's block is all of it (its offset checked against the tensor's).
      auto ptr = [&](const Ref& r, int64_t off) {
        Ptr p;
        if (r.from == Ref::From::Temp) {
          const auto t = static_cast<size_t>(r.index);
          CB_CHECK(off == i * block[t]);
          if (hp.temp_bf16[t])
            p.h = reinterpret_cast<uint16_t*>(temps + at[t]);
          else
            p.f = temps + at[t];
          return p;
        }
        const TensorView& v = r.from == Ref::From::Input ? a.in[static_cast<size_t>(r.index)]
                                                         : a.out[static_cast<size_t>(r.index)];
        if (v.bf16_storage)
          p.h = static_cast<uint16_t*>(v.data) + off;
        else
          p.f = static_cast<float*>(v.data) + off;
        return p;
      };
      for (size_t s = 0; s < hp.steps.size(); ++s) {
        const Heads::Step& st = hp.steps[s];
        const StepPlan& pl = plans[s];
        if (st.kind == Heads::Kind::MatMul) {
          const MatMulPlan::Offsets o = pl.mm.offsets(i);
          const Ptr pa = ptr(st.in[0], o.a), pb = ptr(st.in[1], o.b), py = ptr(st.out, o.y);
          CB_CHECK(py.f);  // a product's result is f32
          matmul_one(pl.mm, pa.f, pa.h, pb.f, pb.h, py.f);
          continue;
        }
        const int64_t r0 = i * pl.rows_per_index, r1 = r0 + pl.rows_per_index;
        const int64_t off = r0 * pl.row_len;
        const Ptr out = ptr(st.out, off);
        if (st.kind == Heads::Kind::MaskedSoftmax) {
          const Ptr x = ptr(st.in[0], off);
          CB_CHECK(x.f && out.f);
          masked_softmax_rows(pl.rows, x.f, out.f, r0, r1);
        } else {
          const Ptr dy = ptr(st.in[0], off), y = ptr(st.in[1], off);
          CB_CHECK(dy.f && y.f);
          masked_softmax_grad_rows(pl.rows, dy.f, y.f, out.f, out.h, r0, r1);
        }
      }
    }
  };
  if (ThreadPool* pool = current_pool())
    pool->parallel_for(count, body);
  else
    body(0, count);
}

}  // namespace cb::cpu
