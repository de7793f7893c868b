// AttentionHeads (runtime/ops/attention_heads.cpp): a chain of MatMul, MaskedSoftmax and
// MaskedSoftmaxGrad steps run one batch index (one head of one example) at a time, across the
// pool. Each step runs its node's kernel code on that index's block (matmul_one, the masked
// softmax rows), so the bits are the unfused graph's; the temporaries (attention's scores, dP,
// dS) live in a thread's scratch one [T, T] block at a time, in cache, instead of as tensors.
#include <algorithm>
#include <cstdint>
#include <limits>
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
  MatMulPlan mm;               // products
  MaskedRowsPlan rows;         // softmaxes
  int64_t rows_per_index = 0;  // softmaxes: rows of one batch index (rows of pl.n)
};

// Where a step's operand for one batch index lives: f32, or bf16 (a value stored as bf16).
struct Ptr {
  float* f = nullptr;
  uint16_t* h = nullptr;
  Ptr at(int64_t off) const { return {f ? f + off : nullptr, h ? h + off : nullptr}; }
};

// A causal mask: the chain's softmaxes fill with -inf where a [T, T] mask, the same for every
// head, masks each query row r's keys from e_r on (1 <= e_r, non-decreasing in r). Then P and dS
// are exactly 0 there, and a softmax reads its scores only up to e_r rounded up to the exp's
// chunk: the products skip, per block of kRows rows, the key blocks that are all masked.
constexpr int64_t kRows = 64;
struct Causal {
  bool on = false;
  int64_t t = 0;
  std::vector<int64_t> cols;  // per query block: its keys (e_r rounded up to 64, at most T)
};
Causal causal_blocks(const Heads& hp, const std::vector<StepPlan>& plans) {
  Causal c;
  const MaskedRowsPlan* mask = nullptr;
  for (size_t s = 0; s < hp.steps.size(); ++s) {
    if (hp.steps[s].kind == Heads::Kind::MatMul) continue;
    const MaskedRowsPlan& r = plans[s].rows;
    const bool where = r.p.mask == ops::MaskedSoftmaxParams::Mask::FillWhereTrue ||
                       r.p.mask == ops::MaskedSoftmaxParams::Mask::FillWhereFalse;
    if (!where || r.p.fill != -std::numeric_limits<float>::infinity() || r.ends.empty() ||
        (mask && mask->ends != r.ends))
      return c;
    mask = &r;
  }
  if (!mask) return c;
  const int64_t t = mask->pl.n;
  // One mask row per query row of a head (the mask's rows run along the queries' axis and it
  // broadcasts over every other), shared by every head; T a multiple of the block.
  const geom::MaskPlan& pl = mask->pl;
  if (static_cast<int64_t>(mask->ends.size()) != t || t % kRows || pl.rank < 1 ||
      pl.dims[pl.rank - 1] != t || pl.stride[pl.rank - 1] != t)
    return c;
  for (int d = 0; d + 1 < pl.rank; ++d)
    if (pl.stride[d] != 0) return c;
  for (int64_t r = 0; r < t; ++r) {
    const int64_t e = mask->ends[static_cast<size_t>(r)];
    if (e < 1 || (r > 0 && e < mask->ends[static_cast<size_t>(r - 1)])) return c;
  }
  c.t = t;
  for (int64_t b = 0; b < t / kRows; ++b) {
    const int64_t last = mask->ends[static_cast<size_t>((b + 1) * kRows - 1)];
    c.cols.push_back(std::min(t, (last + kRows - 1) / kRows * kRows));
  }
  c.on = std::any_of(c.cols.begin(), c.cols.end(), [&](int64_t k) { return k < t; });
  return c;
}

// How a product runs under a causal mask: whole; its [T, T] result only where a softmax reads
// it (S, dP: temporaries only softmaxes read); or with its left operand P or dS (exactly 0 where
// masked) read by query rows (P V, dS K: the keys up to each block's end). The products that
// read P or dS by key rows (P^T dO, dS^T Q) could start each key block at the first query that
// sees it, but measured slower in blocks (with the large GPT, 0.41 s against 0.38-0.40 s whole
// over 8 steps), so they run whole.
enum class Role { Full, Scores, ByQueries };
Role role_of(const Heads& hp, const std::vector<StepPlan>& plans, const Causal& c, size_t s) {
  const Heads::Step& st = hp.steps[s];
  if (st.kind != Heads::Kind::MatMul) return Role::Full;
  const MatMulPlan& p = plans[s].mm;
  // What the softmaxes write or read as their probabilities: P and dS (zero where masked).
  auto zero_masked = [&](const Ref& r) {
    for (const Heads::Step& o : hp.steps)
      if (o.kind != Heads::Kind::MatMul &&
          (o.out == r || (o.kind == Heads::Kind::MaskedSoftmaxGrad && o.in[1] == r)))
        return true;
    return false;
  };
  Role role = Role::Full;
  if (!p.swapped && p.m == c.t && p.n == c.t && st.out.from == Ref::From::Temp) {
    bool softmax_only = true;  // every reader a softmax reading it as its scores or dY
    for (const Heads::Step& o : hp.steps)
      for (size_t i = 0; i < o.in.size(); ++i)
        if (o.in[i] == st.out)
          softmax_only = softmax_only && o.kind != Heads::Kind::MatMul && i == 0;
    if (softmax_only) role = Role::Scores;
  } else if (p.m == c.t && p.k == c.t && !p.ta && zero_masked(st.in[p.swapped ? 1 : 0])) {
    role = Role::ByQueries;
  }
  if (role == Role::Full) return role;
  // A product in bf16 stays one in every block (a block too small for the bf16 kernel would
  // multiply in f32 and round differently): each block's m * n * k at least the bf16 minimum.
  if (p.bf16 && p.m * p.n * p.k >= ops::kBf16MinMacs)
    for (size_t b = 0; b < c.cols.size(); ++b) {
      const int64_t n = role == Role::Scores ? c.cols[b] : p.n,
                    k = role == Role::ByQueries ? c.cols[b] : p.k;
      if (kRows * n * k < ops::kBf16MinMacs) return Role::Full;
    }
  return role;
}

// One batch index's product under a causal mask, a block of kRows result rows at a time (roles:
// role_of). pa / pb point at A's and B's matrices as stored, before the plan's swap.
void causal_product(const MatMulPlan& p, const Causal& c, Role role, Ptr pa, Ptr pb, float* y) {
  if (p.swapped) std::swap(pa, pb);
  MatMulPlan q = p;
  q.swapped = false;
  q.m = kRows;
  for (size_t b = 0; b < c.cols.size(); ++b) {
    const int64_t r0 = static_cast<int64_t>(b) * kRows;
    // The block's rows of op(A): rows r0.. of A, or columns r0.. of A stored transposed.
    const Ptr a = pa.at(p.ta ? r0 : r0 * p.lda);
    q.n = p.n, q.k = p.k;
    if (role == Role::Scores)
      q.n = c.cols[b];  // op(B)'s first columns: B's first columns, or first rows transposed
    else
      q.k = c.cols[b];  // op(A)'s first columns and op(B)'s first rows
    matmul_one(q, a.f, a.h, pb.f, pb.h, y + r0 * p.ldc);
  }
}
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
      pl.rows = plan_masked_rows(xd, m, st.softmax, DType::F32);
      CB_CHECK(xd.size() >= 3);
      c = pl.rows.pl.rows / xd[xd.size() - 2];
      pl.rows_per_index = xd[xd.size() - 2];
    }
    CB_CHECK(count < 0 || c == count);
    count = c;
  }
  if (count <= 0) return;
  const Causal causal = causal_blocks(hp, plans);
  std::vector<Role> roles(hp.steps.size(), Role::Full);
  if (causal.on)
    for (size_t s = 0; s < hp.steps.size(); ++s) roles[s] = role_of(hp, plans, causal, s);
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
          if (roles[s] == Role::Full)
            matmul_one(pl.mm, pa.f, pa.h, pb.f, pb.h, py.f);
          else
            causal_product(pl.mm, causal, roles[s], pa, pb, py.f);
          continue;
        }
        const int64_t r0 = i * pl.rows_per_index, r1 = r0 + pl.rows_per_index;
        const int64_t off = r0 * pl.rows.pl.n;
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
