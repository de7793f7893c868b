// Einsum(inputs...) with `equation`: the one- and two-operand forms without ellipsis or repeated
// subscripts (diagonals), lowered at import into ReduceSum, Transpose, Reshape and MatMul:
//   one operand:  sum the subscripts the output drops, then transpose ("ij->ji", "ij->i");
//   two operands: sum each operand's private dropped subscripts, lay A out [batch, M, K] and B
//   [batch, K, N] (batch: in A, B and the output; K: in A and B only), MatMul, then reshape and
//   transpose to the output ("bij,bjk->bik", "ij,jk", "i,i", "ij,kj->ik"...).
// Other equations are rejected naming the equation.
#include <algorithm>
#include <cctype>
#include <map>

#include "runtime/lower.h"
#include "runtime/ops/op_util.h"

namespace cb::ops {

namespace {

struct EinsumParams {
  std::string equation;
  std::vector<std::string> terms;  // one per input
  std::string output;
};

std::any parse(ParseCtx& c) {
  EinsumParams p;
  p.equation = c.s("equation", "");
  if (p.equation.empty()) c.fail("needs the 'equation' attribute");
  std::string eq;
  for (char ch : p.equation)
    if (ch != ' ') eq += ch;
  auto unsupported = [&](std::string_view why) {
    c.fail(
        "equation '{}' is not supported: {} (crossbow lowers one- and two-operand equations "
        "over letters, without '...' and without a subscript repeated in one operand)",
        p.equation, why);
  };
  if (eq.find("...") != std::string::npos) unsupported("it uses an ellipsis");
  size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  std::string::size_type start = 0;
  while (true) {
    auto comma = lhs.find(',', start);
    p.terms.push_back(lhs.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::map<char, int> count;
  for (const std::string& t : p.terms)
    for (char ch : t) {
      if (!std::isalpha(static_cast<unsigned char>(ch)))
        c.fail("equation '{}' has '{}', which is not a subscript letter", p.equation, ch);
      if (std::count(t.begin(), t.end(), ch) > 1)
        unsupported(fmt::format("'{}' repeats in operand '{}' (a diagonal)", ch, t));
      ++count[ch];
    }
  if (arrow != std::string::npos) {
    p.output = eq.substr(arrow + 2);
    for (char ch : p.output) {
      if (!count.count(ch))
        c.fail("equation '{}': output subscript '{}' is in no operand", p.equation, ch);
      if (std::count(p.output.begin(), p.output.end(), ch) > 1)
        c.fail("equation '{}': output subscript '{}' repeats", p.equation, ch);
    }
  } else {
    for (const auto& [ch, n] : count)  // implicit output: the subscripts seen once, sorted
      if (n == 1) p.output += ch;
  }
  if (p.terms.size() > 2) unsupported("it has more than two operands");
  return p;
}

// Each subscript's size, checked to agree between operands.
std::map<char, Dim> sizes(const InferCtx& c, const EinsumParams& p) {
  if (p.terms.size() != c.num_inputs())
    c.fail("equation '{}' has {} operands, the node {} inputs", p.equation, p.terms.size(),
           c.num_inputs());
  std::map<char, Dim> size;
  for (size_t i = 0; i < p.terms.size(); ++i) {
    if (static_cast<size_t>(c.rank(i)) != p.terms[i].size())
      c.fail("equation '{}': operand {} '{}' has rank {}, its subscripts '{}' say {}", p.equation,
             i, c.in(i).name, c.rank(i), p.terms[i], p.terms[i].size());
    for (size_t a = 0; a < p.terms[i].size(); ++a) {
      Dim d = c.shape(i)[a];
      auto [it, fresh] = size.emplace(p.terms[i][a], d);
      if (!fresh && it->second != d)
        c.fail("equation '{}': subscript '{}' is {} in one operand and {} in another", p.equation,
               p.terms[i][a], to_string(it->second), to_string(d));
    }
  }
  return size;
}

void infer(InferCtx& c) {
  const auto& p = c.p<EinsumParams>();
  c.expect_float(0, "input");
  if (c.num_inputs() == 2) c.expect_same_dtype(0, 1);
  auto size = sizes(c, p);
  Shape out;
  for (char ch : p.output) out.push_back(size.at(ch));
  c.set(0, c.dtype(0), out);
}

class Lowering {
 public:
  explicit Lowering(LowerCtx& c) : c_(c), p_(c.p<EinsumParams>()) {}

  ValueId run() {
    std::string a = p_.terms[0], b = p_.terms.size() > 1 ? p_.terms[1] : "";
    const std::string& out = p_.output;
    ValueId x = sum_private(c_.x(0), a, b + out);
    if (p_.terms.size() == 1) return permute(x, a, out);
    ValueId y = sum_private(c_.x(1), b, a + out);
    std::string batch, m, k, n;
    for (char ch : a) {
      bool in_b = b.find(ch) != std::string::npos, in_out = out.find(ch) != std::string::npos;
      (in_b ? (in_out ? batch : k) : m) += ch;
    }
    for (char ch : b)
      if (a.find(ch) == std::string::npos) n += ch;
    x = permute(x, a, batch + m + k);
    y = permute(y, b, batch + k + n);
    Shape xs = c_.shape(x), ys = c_.shape(y);
    auto dims = [&](const Shape& s, size_t from, size_t count) {
      return Shape(s.begin() + static_cast<long>(from),
                   s.begin() + static_cast<long>(from + count));
    };
    Shape bs = dims(xs, 0, batch.size());
    Shape ms = dims(xs, batch.size(), m.size()), ks = dims(xs, batch.size() + m.size(), k.size());
    Shape ns = dims(ys, batch.size() + k.size(), n.size());
    Shape x3 = bs, y3 = bs, z = bs;
    x3.push_back(product(ms));
    x3.push_back(product(ks));
    y3.push_back(product(ks));
    y3.push_back(product(ns));
    ValueId r = c_.b.op("MatMul", {c_.b.reshape_to(x, x3), c_.b.reshape_to(y, y3)});
    z.insert(z.end(), ms.begin(), ms.end());
    z.insert(z.end(), ns.begin(), ns.end());
    return permute(c_.b.reshape_to(r, z), batch + m + n, out);
  }

 private:
  // Sums the subscripts of `term` that `keep` lacks; `term` becomes the remaining ones.
  ValueId sum_private(ValueId v, std::string& term, const std::string& keep) {
    std::vector<int64_t> axes;
    std::string rest;
    for (size_t i = 0; i < term.size(); ++i) {
      if (keep.find(term[i]) == std::string::npos)
        axes.push_back(static_cast<int64_t>(i));
      else
        rest += term[i];
    }
    term = rest;
    if (axes.empty()) return v;
    return c_.b.op("ReduceSum", {v, c_.b.ints(axes)}, {{"keepdims", int64_t{0}}});
  }
  ValueId permute(ValueId v, const std::string& from, const std::string& to) {
    if (from == to) return v;
    std::vector<int64_t> perm;
    for (char ch : to) perm.push_back(static_cast<int64_t>(from.find(ch)));
    return c_.b.op("Transpose", {v}, {{"perm", perm}});
  }
  Dim product(const Shape& s) {
    Dim p = Dim::of(1);
    for (const Dim& d : s) {
      auto q = dim_mul(p, d);
      if (!q) c_.fail("equation '{}' would merge two batch-sized dims into one", p_.equation);
      p = *q;
    }
    return p;
  }

  LowerCtx& c_;
  const EinsumParams& p_;
};

std::vector<ValueId> lower(LowerCtx& c) { return {Lowering(c).run()}; }

}  // namespace

const OpDef kEinsum{.kind = OpKind::Einsum,
                    .name = "Einsum",
                    .inputs_min = 1,
                    .inputs_max = 2,
                    .outputs_min = 1,
                    .outputs_max = 1,
                    .parse = parse,
                    .infer = infer,
                    .lower = lower};

}  // namespace cb::ops
