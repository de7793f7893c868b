// LSTM, GRU and RNN (ONNX opsets 7 to 18). They are parsed and inferred here, then lowered at
// import (OpDef::lower) into MatMul, Add, Mul, Sigmoid, Tanh, Split, Concat... unrolled over the
// sequence, whose length is static once shapes are known. The unrolled graph is what runs and
// what autodiff differentiates, so W, R, B, P stay trainable initializers and need no op of
// their own: one readable path, checked against PyTorch (tests/test_rnn.cpp).
//
// Inputs: X, W, R, B?, sequence_lens?, initial_h?, and for LSTM initial_c?, P?.
// layout 0: X [T,B,I] -> Y [T,D,B,H], Y_h (and Y_c) [D,B,H];
// layout 1 (opset 14+): X [B,T,I] -> Y [B,T,D,H], Y_h (and Y_c) [B,D,H].
// W [D,G*H,I], R [D,G*H,H], B [D,2*G*H] (Wb then Rb), P [D,3H]; gate order LSTM i,o,f,c (P i,o,f),
// GRU z,r,h, RNN one gate. D = 2 when bidirectional (forward first), G = gates per cell.
// sequence_lens must be known at import and equal T for every batch entry (no padding masks).
#include <algorithm>
#include <cctype>

#include "runtime/lower.h"
#include "runtime/ops/op_util.h"

namespace cb::ops {

namespace {

enum class Cell : uint8_t { Lstm, Gru, Rnn };
enum class Direction : uint8_t { Forward, Reverse, Bidirectional };

struct RnnParams {
  Direction direction = Direction::Forward;
  std::optional<int64_t> hidden_size;  // else from R's shape
  std::optional<float> clip;
  bool batch_first = false;              // layout 1
  bool input_forget = false;             // LSTM: f = 1 - i
  bool linear_before_reset = false;      // GRU
  std::vector<std::string> activations;  // catalog op per activation, directions one after another
};

constexpr int64_t gates(Cell k) { return k == Cell::Lstm ? 4 : k == Cell::Gru ? 3 : 1; }
constexpr size_t activations_per_direction(Cell k) {
  return k == Cell::Lstm ? 3 : k == Cell::Gru ? 2 : 1;
}
int64_t directions(const RnnParams& p) { return p.direction == Direction::Bidirectional ? 2 : 1; }

template <Cell K>
std::any parse(ParseCtx& c) {
  RnnParams p;
  p.direction = c.choice<Direction>("direction", "forward",
                                    {{"forward", Direction::Forward},
                                     {"reverse", Direction::Reverse},
                                     {"bidirectional", Direction::Bidirectional}});
  p.hidden_size = c.opt_i("hidden_size");
  if (p.hidden_size && *p.hidden_size <= 0) c.fail("hidden_size {} must be > 0", *p.hidden_size);
  p.clip = c.opt_f("clip");
  if (p.clip && !(*p.clip > 0)) c.fail("clip {} must be > 0", *p.clip);
  if (c.opset() >= 14) {
    int64_t layout = c.i("layout", 0);
    if (layout != 0 && layout != 1) c.fail("layout {} must be 0 or 1", layout);
    p.batch_first = layout == 1;
  }
  if constexpr (K == Cell::Lstm) {
    int64_t f = c.i("input_forget", 0);
    if (f != 0 && f != 1) c.fail("input_forget {} must be 0 or 1", f);
    p.input_forget = f == 1;
  }
  if constexpr (K == Cell::Gru) {
    int64_t l = c.i("linear_before_reset", 0);
    if (l != 0 && l != 1) c.fail("linear_before_reset {} must be 0 or 1", l);
    p.linear_before_reset = l == 1;
  }
  if (c.has("activation_alpha") || c.has("activation_beta"))
    c.fail(
        "activation_alpha/activation_beta are not supported: crossbow's {} takes the "
        "activations Sigmoid, Tanh and Relu, which have no parameters",
        K == Cell::Lstm  ? "LSTM"
        : K == Cell::Gru ? "GRU"
                         : "RNN");
  const size_t per = activations_per_direction(K), d = static_cast<size_t>(directions(p));
  std::vector<std::string> names =
      c.opt_strings("activations").value_or(std::vector<std::string>{});
  if (names.empty()) {
    std::vector<std::string> def = K == Cell::Lstm
                                       ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"}
                                   : K == Cell::Gru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                    : std::vector<std::string>{"Tanh"};
    for (size_t i = 0; i < d; ++i) names.insert(names.end(), def.begin(), def.end());
  }
  if (names.size() != per * d)
    c.fail("has {} activations; {} direction(s) of this cell take {}", names.size(), d, per * d);
  for (const std::string& n : names) {
    std::string low = n;
    std::transform(low.begin(), low.end(), low.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    if (low == "sigmoid")
      p.activations.push_back("Sigmoid");
    else if (low == "tanh")
      p.activations.push_back("Tanh");
    else if (low == "relu")
      p.activations.push_back("Relu");
    else
      c.fail("activation '{}' is not supported (crossbow supports Sigmoid, Tanh and Relu)", n);
  }
  return p;
}

template <Cell K>
void infer(InferCtx& c) {
  const auto& p = c.p<RnnParams>();
  const int64_t g = gates(K), d = directions(p);
  c.expect_rank(0, 3, "X");
  c.expect_float(0, "X");
  for (size_t i : {1, 2, 3, 5, 6, 7})
    if (i < c.num_inputs() && c.has_input(i)) c.expect_same_dtype(0, i);
  c.expect_rank(1, 3, "W");
  c.expect_rank(2, 3, "R");
  const Shape& x = c.shape(0);
  const Dim t = x[p.batch_first ? 1 : 0], batch = x[p.batch_first ? 0 : 1], in = x[2];
  if (!t.is_static())
    c.fail(
        "the sequence length (X axis {}) is {}: crossbow unrolls recurrent ops over time and "
        "needs it static; re-export with a fixed sequence length",
        p.batch_first ? 1 : 0, to_string(t));
  const Dim r1 = c.shape(2)[1];
  if (!r1.is_static() || r1.value % g != 0)
    c.fail("R has shape {}: its axis 1 must be {} * hidden_size", to_string(c.shape(2)), g);
  const int64_t h = p.hidden_size.value_or(r1.value / g);
  auto expect = [&](size_t i, std::string_view what, const Shape& want) {
    if (c.shape(i) != want)
      c.fail("{} (input {} '{}') has shape {}, expected {} (hidden_size {}, {} direction(s))", what,
             i, c.in(i).name, to_string(c.shape(i)), to_string(want), h, d);
  };
  expect(1, "W", {Dim::of(d), Dim::of(g * h), in});
  expect(2, "R", {Dim::of(d), Dim::of(g * h), Dim::of(h)});
  if (c.has_input(3)) expect(3, "B", {Dim::of(d), Dim::of(2 * g * h)});
  if (c.num_inputs() > 4 && c.has_input(4)) {
    c.expect_rank(4, 1, "sequence_lens");
    for (int64_t len : c.known_ints(4, "sequence_lens"))
      if (len != t.value)
        c.fail(
            "sequence_lens holds {}, but X's sequence length is {}: sequences of different "
            "lengths (masking) are not supported; pad them to one length and drop "
            "sequence_lens",
            len, t.value);
  }
  const Shape state =
      p.batch_first ? Shape{batch, Dim::of(d), Dim::of(h)} : Shape{Dim::of(d), batch, Dim::of(h)};
  if (c.num_inputs() > 5 && c.has_input(5)) expect(5, "initial_h", state);
  if (K == Cell::Lstm && c.num_inputs() > 6 && c.has_input(6)) expect(6, "initial_c", state);
  if (K == Cell::Lstm && c.num_inputs() > 7 && c.has_input(7))
    expect(7, "P", {Dim::of(d), Dim::of(3 * h)});
  const DType dt = c.dtype(0);
  c.set(0, dt,
        p.batch_first ? Shape{batch, t, Dim::of(d), Dim::of(h)}
                      : Shape{t, Dim::of(d), batch, Dim::of(h)});
  c.set(1, dt, state);
  if (K == Cell::Lstm) c.set(2, dt, state);
}

// Emits the unrolled cell. Absent values (no initial state, no bias, no peepholes) are
// kNoValue and drop out of the arithmetic instead of being materialised as zeros.
template <Cell K>
class Unroll {
 public:
  explicit Unroll(LowerCtx& c) : c_(c), b_(c.b), p_(c.p<RnnParams>()) {}

  std::vector<ValueId> run() {
    const int64_t g = gates(K), d = directions(p_);
    ValueId x = c_.x(0);
    if (p_.batch_first) x = transpose(x, {1, 0, 2});  // [T,B,I]
    dtype_ = c_.dtype(x);
    const Shape xs = c_.shape(x);
    const int64_t t = xs[0].value, h = c_.shape(c_.x(2))[2].value;
    auto input = [&](size_t i) { return i < c_.node().inputs.size() ? c_.x(i) : kNoValue; };
    auto state = [&](size_t i) {  // [D,B,H] split into D of [1,B,H]
      ValueId v = input(i);
      if (v == kNoValue) return std::vector<ValueId>(static_cast<size_t>(d), kNoValue);
      if (p_.batch_first) v = transpose(v, {1, 0, 2});
      return split(v, 0, d);
    };
    std::vector<ValueId> ws = split(c_.x(1), 0, d), rs = split(c_.x(2), 0, d);
    std::vector<ValueId> bs =
        input(3) == kNoValue ? std::vector<ValueId>(size_t(d), kNoValue) : split(c_.x(3), 0, d);
    std::vector<ValueId> h0 = state(5), c0 = K == Cell::Lstm ? state(6) : h0;
    std::vector<ValueId> ps = K == Cell::Lstm && input(7) != kNoValue
                                  ? split(c_.x(7), 0, d)
                                  : std::vector<ValueId>(size_t(d), kNoValue);
    std::vector<ValueId> ys, hs, cs;
    for (int64_t dir = 0; dir < d; ++dir) {
      const auto di = static_cast<size_t>(dir);
      const bool reverse = p_.direction == Direction::Reverse || dir == 1;
      acts_ = &p_.activations[di * activations_per_direction(K)];
      // [1,G*H,I] -> [I,G*H]; [1,G*H,H] -> [H,G*H]
      ValueId wt = transpose(b_.reshape_to(ws[di], {Dim::of(g * h), xs[2]}), {1, 0});
      ValueId rd = b_.reshape_to(rs[di], {Dim::of(g * h), Dim::of(h)});
      ValueId wb = kNoValue, rb = kNoValue;
      if (bs[di] != kNoValue) {
        auto wr = split(b_.reshape_to(bs[di], {Dim::of(2 * g * h)}), 0, 2);
        wb = wr[0];
        rb = wr[1];
      }
      // Input projections of every step at once: [T,B,I] x [I,G*H] -> [T,B,G*H].
      ValueId xb = wb;
      ValueId rt = kNoValue, rt_zr = kNoValue, rt_h = kNoValue, rb_step = kNoValue;
      if (K == Cell::Gru && !p_.linear_before_reset) {
        // h~ = g(x Wh + (r * h) Rh + Rbh + Wbh): every bias can go with the input projection.
        xb = add(wb, rb);
        auto zr_h = b_.emit("Split", {rd, b_.ints({2 * h, h})}, {{"axis", int64_t{0}}}, 2);
        rt_zr = transpose(zr_h[0], {1, 0});
        rt_h = transpose(zr_h[1], {1, 0});
      } else if (K == Cell::Gru) {
        // h~ = g(x Wh + Wbh + r * (h Rh + Rbh)): R's bias stays with the recurrent product.
        rt = transpose(rd, {1, 0});
        rb_step = rb;
      } else {
        xb = add(wb, rb);
        rt = transpose(rd, {1, 0});
      }
      ValueId xw = add(b_.op("MatMul", {x, wt}), xb);
      std::vector<ValueId> steps = split(xw, 0, t);  // T of [1,B,G*H]
      std::vector<ValueId> peep(3, kNoValue);
      if (ps[di] != kNoValue) peep = split(b_.reshape_to(ps[di], {Dim::of(3 * h)}), 0, 3);
      ValueId hp = h0[di], cp = c0[di];
      std::vector<ValueId> out(static_cast<size_t>(t), kNoValue);
      for (int64_t k = 0; k < t; ++k) {
        const auto s = static_cast<size_t>(reverse ? t - 1 - k : k);
        if constexpr (K == Cell::Lstm) {
          auto gi = split(add(steps[s], matmul(hp, rt)), 2, 4);  // i, o, f, c
          ValueId i = act(0, add(gi[0], mul(peep[0], cp)));
          ValueId f = p_.input_forget ? b_.op("Sub", {b_.scalar(1.0, dtype_), i})
                                      : act(0, add(gi[2], mul(peep[2], cp)));
          ValueId cc = add(mul(f, cp), mul(i, act(1, gi[3])));
          ValueId o = act(0, add(gi[1], mul(peep[1], cc)));
          hp = mul(o, act(2, cc, false));
          cp = cc;
        } else if constexpr (K == Cell::Gru) {
          auto xg = split(steps[s], 2, 3);  // z, r, h
          ValueId hz, hr, hh = kNoValue;  // hh: linear_before_reset only
          if (p_.linear_before_reset) {
            auto hg = split_maybe(add(matmul(hp, rt), rb_step), 3);
            hz = hg[0];
            hr = hg[1];
            hh = hg[2];
          } else {
            auto hg = split_maybe(matmul(hp, rt_zr), 2);
            hz = hg[0];
            hr = hg[1];
          }
          ValueId z = act(0, add(xg[0], hz)), r = act(0, add(xg[1], hr));
          ValueId rec = p_.linear_before_reset ? mul(r, hh) : matmul(mul(r, hp), rt_h);
          ValueId ht = act(1, add(xg[2], rec));
          hp = add(ht, mul(z, sub(hp, ht)));  // (1 - z) * h~ + z * h
        } else {
          hp = act(0, add(steps[s], matmul(hp, rt)));
        }
        out[s] = hp;
      }
      if (c_.has_output(0)) ys.push_back(concat(out, 0));  // [T,B,H]
      hs.push_back(hp);
      cs.push_back(cp);
    }
    std::vector<ValueId> res(c_.node().outputs.size(), kNoValue);
    if (c_.has_output(0)) {
      for (ValueId& y : ys) y = b_.op("Unsqueeze", {y, b_.ints({1})});
      ValueId y = concat(ys, 1);  // [T,D,B,H]
      res[0] = p_.batch_first ? transpose(y, {2, 0, 1, 3}) : y;
    }
    auto final_state = [&](std::vector<ValueId>& v) {
      ValueId s = concat(v, 0);  // [D,B,H]
      return p_.batch_first ? transpose(s, {1, 0, 2}) : s;
    };
    if (c_.has_output(1)) res[1] = final_state(hs);
    if (K == Cell::Lstm && c_.has_output(2)) res[2] = final_state(cs);
    return res;
  }

 private:
  ValueId transpose(ValueId v, std::vector<int64_t> perm) {
    return b_.op("Transpose", {v}, {{"perm", std::move(perm)}});
  }
  std::vector<ValueId> split(ValueId v, int64_t axis, int64_t n) {
    if (n == 1) return {v};
    return b_.emit("Split", {v}, {{"axis", axis}}, static_cast<size_t>(n));
  }
  // Along the last axis; an absent value splits into absent parts.
  std::vector<ValueId> split_maybe(ValueId v, int64_t n) {
    if (v == kNoValue) return std::vector<ValueId>(static_cast<size_t>(n), kNoValue);
    return split(v, static_cast<int64_t>(c_.shape(v).size()) - 1, n);
  }
  ValueId concat(const std::vector<ValueId>& v, int64_t axis) {
    if (v.size() == 1) return v[0];
    return b_.op("Concat", v, {{"axis", axis}});
  }
  ValueId add(ValueId a, ValueId b) {
    if (a == kNoValue) return b;
    if (b == kNoValue) return a;
    return b_.op("Add", {a, b});
  }
  ValueId sub(ValueId a, ValueId b) {
    if (b == kNoValue) return a;
    if (a == kNoValue) return b_.op("Neg", {b});
    return b_.op("Sub", {a, b});
  }
  ValueId mul(ValueId a, ValueId b) {
    if (a == kNoValue || b == kNoValue) return kNoValue;
    return b_.op("Mul", {a, b});
  }
  ValueId matmul(ValueId a, ValueId b) {
    if (a == kNoValue) return kNoValue;
    return b_.op("MatMul", {a, b});
  }
  // Activation `k` of this direction; `clip` bounds its input (ONNX applies clip to the input of
  // every activation except the one on the cell state).
  ValueId act(size_t k, ValueId v, bool clip = true) {
    if (clip && p_.clip)
      v = b_.op("Clip", {v, b_.scalar(-*p_.clip, dtype_), b_.scalar(*p_.clip, dtype_)});
    return b_.op(acts_[k], {v});
  }

  LowerCtx& c_;
  GraphBuilder& b_;
  const RnnParams& p_;
  DType dtype_ = DType::F32;
  const std::string* acts_ = nullptr;
};

template <Cell K>
std::vector<ValueId> lower(LowerCtx& c) {
  return Unroll<K>(c).run();
}

}  // namespace

const OpDef kLSTM{.kind = OpKind::LSTM,
                  .name = "LSTM",
                  .inputs_min = 3,
                  .inputs_max = 8,
                  .outputs_min = 0,
                  .outputs_max = 3,
                  .parse = parse<Cell::Lstm>,
                  .infer = infer<Cell::Lstm>,
                  .nondiff_inputs = bit(4),
                  .value_inputs = bit(4),
                  .lower = lower<Cell::Lstm>};

const OpDef kGRU{.kind = OpKind::GRU,
                 .name = "GRU",
                 .inputs_min = 3,
                 .inputs_max = 6,
                 .outputs_min = 0,
                 .outputs_max = 2,
                 .parse = parse<Cell::Gru>,
                 .infer = infer<Cell::Gru>,
                 .nondiff_inputs = bit(4),
                 .value_inputs = bit(4),
                 .lower = lower<Cell::Gru>};

const OpDef kRNN{.kind = OpKind::RNN,
                 .name = "RNN",
                 .inputs_min = 3,
                 .inputs_max = 6,
                 .outputs_min = 0,
                 .outputs_max = 2,
                 .parse = parse<Cell::Rnn>,
                 .infer = infer<Cell::Rnn>,
                 .nondiff_inputs = bit(4),
                 .value_inputs = bit(4),
                 .lower = lower<Cell::Rnn>};

}  // namespace cb::ops
