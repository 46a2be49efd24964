// ONNX's recurrent ops (docs/onnx.md, "Importing": the `LSTM`, `GRU` and `RNN` rows): LSTM
// and GRU as model.json's `lstm` and `gru` (ONNX's layout, one node per output read), RNN
// as a composition around `rnn` (batch-first, forward from 0) for every direction, layout
// and initial state. What the ops do not model (other activations, clip, peepholes,
// input_forget, layout 1 of LSTM and GRU) is imported as opaque; values the operator
// specification rules out (an unknown direction or activation, an activations list of the
// wrong length, a hidden_size the weights contradict, shapes that do not fit, sequence_lens
// that is not a constant) are an error naming the node.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "core/error.h"
#include "core/shape.h"
#include "onnx/import_context.h"
#include "onnx/import_recurrent.h"

namespace lnv::onnx_import {
namespace {

using lnv::Node;

// ONNX's activation functions for RNN, GRU and LSTM (operator specification, opset 7-22).
const std::set<std::string>& onnx_activations() {
  static const std::set<std::string> k = {"relu", "tanh", "sigmoid", "affine", "leakyrelu",
                                          "thresholdedrelu", "scaledtanh", "hardsigmoid",
                                          "elu", "softsign", "softplus"};
  return k;
}

// The `activations` attribute, lowercased (ONNX Runtime reads the names regardless of case).
std::vector<std::string> activations(const onnx_import::Node& n) {
  const Attribute* a = n.attr("activations");
  std::vector<std::string> out = a ? a->strings : std::vector<std::string>{};
  for (std::string& s : out)
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return out;
}

bool present(const onnx_import::Node& n, size_t k) { return k < n.inputs.size() && !n.inputs[k].empty(); }

struct Recurrent {
  int64_t dirs = 1, hidden = 0, t = 0, batch = 0, f = 0;
  std::string direction;
  std::vector<int64_t> lens;  // empty: every entry runs T steps
};

// The checks every recurrent op shares; throws ModelError naming the node for what the
// specification rules out. `gates`: 1 (RNN), 3 (GRU), 4 (LSTM).
Recurrent check_recurrent(Importer& im, const onnx_import::Node& n, size_t i, int64_t gates) {
  const std::string where = im.describe(i);
  Recurrent r;
  r.direction = im.attr_s(n, "direction", "forward");
  if (r.direction != "forward" && r.direction != "reverse" && r.direction != "bidirectional")
    throw ModelError(where, "direction '" + r.direction +
                                "' is not one of 'forward', 'reverse', 'bidirectional'");
  r.dirs = r.direction == "bidirectional" ? 2 : 1;
  if (n.inputs.size() < 3 || n.inputs[1].empty() || n.inputs[2].empty())
    throw ModelError(where, "expected inputs X, W and R");
  const bool batch_first = im.attr_i(n, "layout", 0) != 0;
  const auto& x = im.shape(n.inputs[0]);
  if (x.size() != 3)
    throw ModelError(where, "input X ('" + n.inputs[0] + "') has shape " + lnv::to_string(x) +
                                ", expected [seq_length, batch_size, input_size]");
  r.t = batch_first ? x[1] : x[0];
  r.batch = batch_first ? x[0] : x[1];
  r.f = x[2];
  const auto& w = im.shape(n.inputs[1]);
  const std::string g = std::to_string(gates);
  if (w.size() != 3 || w[0] != r.dirs || w[1] % gates != 0 || w[1] == 0 || w[2] != r.f)
    throw ModelError(where, "input W ('" + n.inputs[1] + "') has shape " + lnv::to_string(w) +
                                ", expected [" + std::to_string(r.dirs) + ", " + g + "*hidden_size, " +
                                std::to_string(r.f) + "] for direction '" + r.direction + "' and X " +
                                lnv::to_string(x));
  r.hidden = w[1] / gates;
  const int64_t hs = im.attr_i(n, "hidden_size", r.hidden);
  if (hs != r.hidden)
    throw ModelError(where, "hidden_size " + std::to_string(hs) + " does not fit W of shape " +
                                lnv::to_string(w) + " (" + g + "*hidden_size rows: hidden_size " +
                                std::to_string(r.hidden) + ")");
  auto expect = [&](size_t k, const char* what, const Shape& want) {
    if (!present(n, k)) return;
    if (im.shape(n.inputs[k]) != want)
      throw ModelError(where, std::string("input ") + what + " ('" + n.inputs[k] + "') has shape " +
                                  lnv::to_string(im.shape(n.inputs[k])) + ", expected " +
                                  lnv::to_string(want));
  };
  expect(2, "R", {r.dirs, gates * r.hidden, r.hidden});
  expect(3, "B", {r.dirs, 2 * gates * r.hidden});
  const Shape state = batch_first ? Shape{r.batch, r.dirs, r.hidden} : Shape{r.dirs, r.batch, r.hidden};
  expect(5, "initial_h", state);
  if (gates == 4) expect(6, "initial_c", state);
  if (gates == 4) expect(7, "P", {r.dirs, 3 * r.hidden});
  if (present(n, 4)) {
    const Initializer* c = im.constant(n.inputs[4]);
    if (!c || c->value.is_float())
      throw ModelError(where, "sequence_lens ('" + n.inputs[4] +
                                  "') is not a constant; lnverify evaluates fixed sequence lengths only");
    if (int64_t(c->value.ints.size()) != r.batch)
      throw ModelError(where, "sequence_lens ('" + n.inputs[4] + "') has " +
                                  std::to_string(c->value.ints.size()) + " entries, expected batch_size " +
                                  std::to_string(r.batch));
    for (int64_t v : c->value.ints)
      if (v < 1 || v > r.t)
        throw ModelError(where, "sequence_lens ('" + n.inputs[4] + "') holds " + std::to_string(v) +
                                    ", outside [1, seq_length = " + std::to_string(r.t) + "]");
    if (std::any_of(c->value.ints.begin(), c->value.ints.end(), [&](int64_t v) { return v != r.t; }))
      r.lens = c->value.ints;
  }
  if (const Attribute* a = n.attr("activations")) {
    const size_t per_direction = gates == 4 ? 3 : gates == 3 ? 2 : 1;
    if (a->strings.size() != per_direction * size_t(r.dirs))
      throw ModelError(where, "activations has " + std::to_string(a->strings.size()) + " entries, expected " +
                                  std::to_string(per_direction * size_t(r.dirs)) + " (" +
                                  std::to_string(per_direction) + " per direction) for direction '" +
                                  r.direction + "'");
    for (const std::string& name : a->strings) {
      std::string lower = name;
      std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return char(std::tolower(c)); });
      if (!onnx_activations().count(lower))
        throw ModelError(where, "activation '" + name + "' is not one of ONNX's activation functions");
    }
  }
  return r;
}

// The activations listed, as written ("Relu, Tanh").
std::string listed(const onnx_import::Node& n) {
  std::string out;
  for (const std::string& name : n.attr("activations")->strings) out += (out.empty() ? "" : ", ") + name;
  return out;
}

// Why the node is beyond what `lstm`, `gru` and `rnn` model ("" when it is not): a
// non-default activation, clip, peepholes, input_forget, weights that are not constants;
// for LSTM and GRU also layout 1 and initial states that are not constants (the RNN
// composition reads both).
std::string unmodelled(Importer& im, const onnx_import::Node& n, const Recurrent& r, int64_t gates) {
  std::vector<std::string> defaults;
  const std::vector<std::string> one = gates == 4   ? std::vector<std::string>{"sigmoid", "tanh", "tanh"}
                                       : gates == 3 ? std::vector<std::string>{"sigmoid", "tanh"}
                                                    : std::vector<std::string>{"tanh"};
  for (int64_t d = 0; d < r.dirs; ++d) defaults.insert(defaults.end(), one.begin(), one.end());
  const std::vector<std::string> acts = activations(n);
  if (!acts.empty() && acts != defaults)
    return "activations " + listed(n) + " (modelled: the defaults, " +
           (gates == 4 ? "Sigmoid, Tanh, Tanh" : gates == 3 ? "Sigmoid, Tanh" : "Tanh") + " per direction)";
  if (n.attr("activation_alpha") || n.attr("activation_beta")) return "activation_alpha or activation_beta";
  if (n.attr("clip")) return "clip";
  if (gates > 1 && im.attr_i(n, "layout", 0) != 0) return "layout 1 (batch first)";
  if (gates == 4 && im.attr_i(n, "input_forget", 0) != 0) return "input_forget";
  if (gates == 4 && present(n, 7)) return "peepholes (input P)";
  std::vector<size_t> constant_inputs = {1, 2, 3};
  if (gates > 1) constant_inputs.insert(constant_inputs.end(), {5, 6});
  for (size_t k : constant_inputs)
    if (present(n, k) && !im.is_constant(n.inputs[k]))
      return "input '" + n.inputs[k] + "' that is not a constant";
  return "";
}

// A constant initial state, or "" when absent or all zeros (what absence means).
std::string initial_state(Importer& im, const onnx_import::Node& n, size_t k) {
  if (!present(n, k)) return "";
  const std::vector<double> v = im.floats(n.inputs[k]);
  if (std::all_of(v.begin(), v.end(), [](double x) { return x == 0.0; })) return "";
  return im.value(n.inputs[k]);
}

}  // namespace

// LSTM and GRU: one `lstm` / `gru` node per output read (Y, Y_h, Y_c), each the whole layer.
void map_gated_recurrent(Importer& im, const onnx_import::Node& n, size_t i) {
  const bool lstm = n.op_type == "LSTM";
  const int64_t gates = lstm ? 4 : 3;
  if (!im.is_float_value(n.inputs[0])) return im.opaque(i, "an integer operand");
  const Recurrent r = check_recurrent(im, n, i, gates);
  if (const std::string why = unmodelled(im, n, r, gates); !why.empty()) return im.opaque(i, why);
  static const char* kOutputs[] = {"y", "y_h", "y_c"};
  std::vector<size_t> read;
  for (size_t k = 0; k < n.outputs.size() && k < size_t(lstm ? 3 : 2); ++k)
    if (!n.outputs[k].empty() && im.used(n, k)) read.push_back(k);
  const std::string x = im.value(n.inputs[0]);
  for (size_t k : read) {
    lnv::Node c = im.node(n, i, lstm ? Op::lstm : Op::gru, {x}, read.size() == 1 ? "" : kOutputs[k]);
    c.weight_ih = im.value(n.inputs[1]);
    c.weight_hh = im.value(n.inputs[2]);
    if (present(n, 3)) c.bias = im.value(n.inputs[3]);
    c.initial_h = initial_state(im, n, 5);
    if (lstm) c.initial_c = initial_state(im, n, 6);
    c.direction = r.direction;
    c.sequence_lens = r.lens;
    c.output = kOutputs[k];
    if (!lstm) c.linear_before_reset = im.attr_i(n, "linear_before_reset", 0) != 0;
    im.emit_final(std::move(c), n.outputs[k]);
  }
}

namespace {

// ONNX's RNN around `rnn`, which runs forward from 0 over batch-first [N, T, F] with one
// bias (docs/spec/decisions.md, "ONNX's RNN: a composition around rnn"). Per direction:
//   - reverse: the time axis reversed by a slice with step -1, or, with sequence_lens, by a
//     matmul with a constant 0/1 matrix P (entry b's first len_b steps reversed, zeros after);
//   - an initial state h0: the input widened to [x | s], s holding h0 at the first step run
//     and 0 after, and W to [W | R], so that the first step reads W x + R h0, the others W x;
//   - the steps put back in time order (the same slice, or P), zero past an entry's length
//     (a 0/1 mask, forward); the last step run a slice, or, with sequence_lens, a matmul
//     with a one-hot row per entry.
// Every piece is exact: copies, products with 0 and 1, sums with zeros.
class RnnComposition {
 public:
  RnnComposition(Importer& im, const onnx_import::Node& n, size_t i, const Recurrent& r)
      : im_(im), n_(n), i_(i), r_(r), batch_first_(im.attr_i(n, "layout", 0) != 0) {}

  // Why the node stays opaque ("" when it does not): a bias whose Wb + Rb is not exact in
  // double (`rnn` holds one bias; it is exact for float32 values of comparable magnitude).
  std::string plan_biases() {
    if (!present(n_, 3)) return "";
    for (int64_t d = 0; d < r_.dirs; ++d) {
      const std::vector<double> b = slab(3, d);
      std::vector<double> sum(size_t(r_.hidden));
      for (size_t j = 0; j < sum.size(); ++j) {
        const double w = b[j], rb = b[sum.size() + j];
        sum[j] = w + rb;
        if (sum[j] - w != rb || sum[j] - rb != w) return "a bias whose Wb + Rb is not exact in double";
      }
      biases_.push_back(std::move(sum));
    }
    return "";
  }

  void emit() {
    const bool want_y = !n_.outputs.empty() && !n_.outputs[0].empty() && im_.used(n_, 0);
    const bool want_yh = n_.outputs.size() > 1 && !n_.outputs[1].empty() && im_.used(n_, 1);
    if (!want_y && !want_yh) return;
    x_ = im_.value(n_.inputs[0]);
    if (!batch_first_) {
      lnv::Node tx = node(Op::transpose, {x_}, "batch_first");
      tx.perm = {1, 0, 2};
      x_ = im_.emit(std::move(tx));
    }
    std::vector<std::string> ys, lasts;
    for (int64_t d = 0; d < r_.dirs; ++d) {
      const std::string h = run(d);
      if (want_y) ys.push_back(in_time_order(d, h));
      if (want_yh) lasts.push_back(last_step(d, h));
    }
    if (want_y) emit_y(ys);
    if (want_yh) emit_y_h(lasts);
  }

 private:
  bool reverse(int64_t d) const { return r_.direction == "reverse" || d == 1; }
  std::string direction_suffix(int64_t d, const char* sep) const {
    return r_.dirs == 1 ? "" : std::string(sep) + (reverse(d) ? "reverse" : "forward");
  }
  // A node named "<node>.<what>", "<node>.<direction>.<what>" when bidirectional.
  lnv::Node node(Op op, std::vector<std::string> in, const std::string& what, int64_t d = -1) {
    const std::string dir = d < 0 ? "" : direction_suffix(d, "");
    return im_.node(n_, i_, op, std::move(in), dir.empty() ? what : dir + "." + what);
  }
  std::string base() const { return n_.name.empty() ? n_.outputs[0] : n_.name; }
  // Direction d's part of constant input k (its leading axis is the direction).
  std::vector<double> slab(size_t k, int64_t d) const {
    const std::vector<double> v = im_.floats(n_.inputs[k]);
    const size_t m = v.size() / size_t(r_.dirs);
    return {v.begin() + std::ptrdiff_t(size_t(d) * m), v.begin() + std::ptrdiff_t(size_t(d + 1) * m)};
  }
  std::string weight(size_t k, int64_t d, const Shape& shape) {
    if (r_.dirs == 1) return im_.param_as(n_.inputs[k], shape);
    return im_.new_param(n_.inputs[k] + direction_suffix(d, "."), shape, slab(k, d));
  }
  int64_t len(int64_t b) const { return r_.lens.empty() ? r_.t : r_.lens[size_t(b)]; }

  // P [N, T, T]: P[b, t, len_b - 1 - t] = 1 for t < len_b, else 0 (an involution on the
  // first len_b steps).
  const std::string& reversal() {
    if (reversal_.empty()) {
      const int64_t N = r_.batch, T = r_.t;
      std::vector<double> p(size_t(N * T * T));
      for (int64_t b = 0; b < N; ++b)
        for (int64_t t = 0; t < len(b); ++t) p[size_t((b * T + t) * T + len(b) - 1 - t)] = 1;
      reversal_ = im_.new_param(base() + ".reversal", {N, T, T}, std::move(p));
    }
    return reversal_;
  }

  // x in the order direction d runs it [N, T, F].
  std::string ordered_input(int64_t d) {
    if (!reverse(d)) return x_;
    if (!r_.lens.empty()) return im_.emit(node(Op::matmul, {reversal(), x_}, "reversed", d));
    lnv::Node rev = node(Op::slice, {x_}, "reversed", d);
    rev.axes = {1};
    rev.starts = {r_.t - 1};
    rev.ends = {-r_.t - 1};
    rev.steps = {-1};
    return im_.emit(std::move(rev));
  }

  // s [N, T, F + H]: direction d's initial state in the last H features of the first step
  // run, 0 elsewhere; "" when the state is absent or a constant of zeros.
  std::string initial_input(int64_t d) {
    if (!present(n_, 5)) return "";
    const int64_t N = r_.batch, T = r_.t, F = r_.f, H = r_.hidden, D = r_.dirs;
    const std::string& h0 = n_.inputs[5];
    if (im_.is_constant(h0)) {
      const std::vector<double> v = im_.floats(h0);  // [D, N, H]; [N, D, H] with layout 1
      std::vector<double> s(size_t(N * T * (F + H)));
      bool zero = true;
      for (int64_t b = 0; b < N; ++b)
        for (int64_t j = 0; j < H; ++j) {
          const double x = v[size_t((batch_first_ ? b * D + d : d * N + b) * H + j)];
          s[size_t(b * T * (F + H) + F + j)] = x;
          zero = zero && x == 0.0;
        }
      if (zero) return "";
      return im_.new_param(base() + ".initial_input" + direction_suffix(d, "."), {N, T, F + H}, std::move(s));
    }
    std::string h = im_.value(h0);
    if (D == 2) {
      lnv::Node one = node(Op::slice, {h}, "initial_h", d);
      one.axes = {batch_first_ ? 1 : 0};
      one.starts = {d};
      one.ends = {d + 1};
      h = im_.emit(std::move(one));
    }
    if (!batch_first_) {
      lnv::Node rows = node(Op::reshape, {h}, "initial_h_rows", d);
      rows.shape = {N, 1, H};
      h = im_.emit(std::move(rows));
    }
    lnv::Node placed = node(Op::pad, {h}, "initial_input", d);
    placed.pads = {0, 0, F, 0, T - 1, 0};
    return im_.emit(std::move(placed));
  }

  // The steps of direction d in the order it runs them [N, T, H].
  std::string run(int64_t d) {
    const int64_t H = r_.hidden, F = r_.f;
    std::string x = ordered_input(d);
    const std::string s = initial_input(d);
    lnv::Node c = node(Op::rnn, {}, "steps", d);
    if (s.empty()) {
      c.weight_ih = weight(1, d, {H, F});
    } else {
      lnv::Node widen = node(Op::pad, {x}, "widened", d);
      widen.pads = {0, 0, 0, 0, 0, H};
      x = im_.emit(node(Op::add, {im_.emit(std::move(widen)), s}, "with_initial_h", d));
      const std::vector<double> w = slab(1, d), rr = slab(2, d);
      std::vector<double> wr;  // [W | R] [H, F + H]
      for (int64_t row = 0; row < H; ++row) {
        wr.insert(wr.end(), w.begin() + row * F, w.begin() + (row + 1) * F);
        wr.insert(wr.end(), rr.begin() + row * H, rr.begin() + (row + 1) * H);
      }
      c.weight_ih = im_.new_param(n_.inputs[1] + direction_suffix(d, ".") + ".with_R", {H, F + H}, std::move(wr));
    }
    c.inputs = {x};
    c.weight_hh = weight(2, d, {H, H});
    if (!biases_.empty())
      c.bias = im_.new_param(base() + ".bias" + direction_suffix(d, "."), {H}, biases_[size_t(d)]);
    return im_.emit(std::move(c));
  }

  // Direction d's steps h [N, T, H] in time order, zero past each entry's length.
  std::string in_time_order(int64_t d, const std::string& h) {
    if (reverse(d) && !r_.lens.empty()) return im_.emit(node(Op::matmul, {reversal(), h}, "in_time_order", d));
    if (reverse(d)) {
      lnv::Node rev = node(Op::slice, {h}, "in_time_order", d);
      rev.axes = {1};
      rev.starts = {r_.t - 1};
      rev.ends = {-r_.t - 1};
      rev.steps = {-1};
      return im_.emit(std::move(rev));
    }
    if (r_.lens.empty()) return h;
    const int64_t N = r_.batch, T = r_.t;
    std::vector<double> mask(size_t(N * T));
    for (int64_t b = 0; b < N; ++b)
      for (int64_t t = 0; t < len(b); ++t) mask[size_t(b * T + t)] = 1;
    const std::string m = im_.new_param(base() + ".within_length", {N, T, 1}, std::move(mask));
    return im_.emit(node(Op::mul, {h, m}, "within_length", d));
  }

  // The last step direction d runs for each entry [N, 1, H].
  std::string last_step(int64_t d, const std::string& h) {
    if (r_.lens.empty()) {
      lnv::Node last = node(Op::slice, {h}, "last_step", d);
      last.axes = {1};
      last.starts = {r_.t - 1};
      last.ends = {r_.t};
      last.steps = {1};
      return im_.emit(std::move(last));
    }
    if (last_of_entry_.empty()) {
      const int64_t N = r_.batch, T = r_.t;
      std::vector<double> one_hot(size_t(N * T));
      for (int64_t b = 0; b < N; ++b) one_hot[size_t(b * T + len(b) - 1)] = 1;
      last_of_entry_ = im_.new_param(base() + ".last_of_entry", {N, 1, T}, std::move(one_hot));
    }
    return im_.emit(node(Op::matmul, {last_of_entry_, h}, "last_step", d));
  }

  // Y: [T, D, N, H], or [N, T, D, H] with layout 1, from each direction's [N, T, H].
  void emit_y(const std::vector<std::string>& ys) {
    const int64_t N = r_.batch, T = r_.t, H = r_.hidden;
    const bool last = r_.dirs == 1 && batch_first_;  // the reshape is Y
    std::vector<std::string> parts;
    for (size_t d = 0; d < ys.size(); ++d) {
      lnv::Node r = node(Op::reshape, {ys[d]}, last ? "y" : "with_direction_axis", r_.dirs == 1 ? -1 : int64_t(d));
      r.shape = {N, T, 1, H};
      if (last) return im_.emit_final(std::move(r), n_.outputs[0]);
      parts.push_back(im_.emit(std::move(r)));
    }
    std::string batch_major = parts[0];  // [N, T, D, H]
    if (r_.dirs == 2) {
      lnv::Node both = node(Op::concat, parts, batch_first_ ? "y" : "directions");
      both.axis = 2;
      if (batch_first_) return im_.emit_final(std::move(both), n_.outputs[0]);
      batch_major = im_.emit(std::move(both));
    }
    lnv::Node y = node(Op::transpose, {batch_major}, "y");
    y.perm = {1, 2, 0, 3};
    im_.emit_final(std::move(y), n_.outputs[0]);
  }

  // Y_h: [D, N, H], or [N, D, H] with layout 1, from each direction's last step [N, 1, H].
  void emit_y_h(const std::vector<std::string>& lasts) {
    std::string last = lasts[0];
    if (r_.dirs == 2) {
      lnv::Node both = node(Op::concat, lasts, batch_first_ ? "y_h" : "last_steps");
      both.axis = 1;
      if (batch_first_) return im_.emit_final(std::move(both), n_.outputs[1]);
      last = im_.emit(std::move(both));
    } else if (batch_first_) {
      return im_.alias_lnv(n_.outputs[1], last);
    }
    lnv::Node yh = node(Op::transpose, {last}, "y_h");
    yh.perm = {1, 0, 2};
    im_.emit_final(std::move(yh), n_.outputs[1]);
  }

  Importer& im_;
  const onnx_import::Node& n_;
  size_t i_;
  const Recurrent& r_;
  bool batch_first_;
  std::string x_;  // X batch first [N, T, F]
  std::vector<std::vector<double>> biases_;  // per direction, Wb + Rb
  std::string reversal_, last_of_entry_;     // params made on first use
};

}  // namespace

// RNN: every direction, layout, initial state (constant or not) and constant
// sequence_lens, as the composition above.
void map_onnx_rnn(Importer& im, const onnx_import::Node& n, size_t i) {
  if (!im.is_float_value(n.inputs[0])) return im.opaque(i, "an integer operand");
  const Recurrent r = check_recurrent(im, n, i, 1);
  if (const std::string why = unmodelled(im, n, r, 1); !why.empty()) return im.opaque(i, why);
  RnnComposition c(im, n, i, r);
  if (const std::string why = c.plan_biases(); !why.empty()) return im.opaque(i, why);
  c.emit();
}

}  // namespace lnv::onnx_import
