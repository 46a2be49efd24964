// ONNX's recurrent ops (docs/onnx.md, "Recurrent layers"): LSTM and GRU as model.json's
// `lstm` and `gru` (ONNX's layout, one node per output read), RNN as `rnn` (batch-first,
// between transposes). What the ops do not model (other activations, clip, peepholes,
// input_forget, layout 1) is imported as opaque; values the operator specification rules
// out (an unknown direction or activation, a hidden_size the weights contradict, shapes
// that do not fit, sequence_lens that is not a constant) are an error naming the node.
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
  const auto& rr = im.shape(n.inputs[2]);
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
  if (const Attribute* a = n.attr("activations"))
    for (const std::string& name : a->strings) {
      std::string lower = name;
      std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return char(std::tolower(c)); });
      if (!onnx_activations().count(lower))
        throw ModelError(where, "activation '" + name + "' is not one of ONNX's activation functions");
    }
  return r;
}

// Why the node is beyond what `lstm`, `gru` and `rnn` model ("" when it is not): a
// non-default activation, clip, peepholes, input_forget, layout 1, weights or initial
// states that are not constants.
std::string unmodelled(Importer& im, const onnx_import::Node& n, const Recurrent& r, int64_t gates) {
  std::vector<std::string> defaults;
  const std::vector<std::string> one = gates == 4   ? std::vector<std::string>{"sigmoid", "tanh", "tanh"}
                                       : gates == 3 ? std::vector<std::string>{"sigmoid", "tanh"}
                                                    : std::vector<std::string>{"tanh"};
  for (int64_t d = 0; d < r.dirs; ++d) defaults.insert(defaults.end(), one.begin(), one.end());
  const std::vector<std::string> acts = activations(n);
  if (!acts.empty() && acts != defaults) return "activations other than the defaults";
  if (n.attr("activation_alpha") || n.attr("activation_beta")) return "activation_alpha or activation_beta";
  if (n.attr("clip")) return "clip";
  if (im.attr_i(n, "layout", 0) != 0) return "layout 1 (batch first)";
  if (gates == 4 && im.attr_i(n, "input_forget", 0) != 0) return "input_forget";
  if (gates == 4 && present(n, 7)) return "peepholes (input P)";
  for (size_t k : {size_t(1), size_t(2), size_t(3), size_t(5), size_t(6)})
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

// RNN: `rnn` runs forward from a zero state over batch-first [N, T, F] with one bias, so
// a forward RNN without initial_h (or a zero one) and with all sequences of full length is
// transpose -> rnn (W, R, Wb + Rb) -> transpose (Y) or slice of the last step (Y_h).
void map_onnx_rnn(Importer& im, const onnx_import::Node& n, size_t i) {
  if (!im.is_float_value(n.inputs[0])) return im.opaque(i, "an integer operand");
  const Recurrent r = check_recurrent(im, n, i, 1);
  if (const std::string why = unmodelled(im, n, r, 1); !why.empty()) return im.opaque(i, why);
  if (r.direction != "forward") return im.opaque(i, "direction '" + r.direction + "' (rnn runs forward)");
  if (!initial_state(im, n, 5).empty()) return im.opaque(i, "a non-zero initial_h (rnn starts from 0)");
  if (!r.lens.empty()) return im.opaque(i, "sequences shorter than seq_length");
  const int64_t H = r.hidden;
  std::string bias;
  if (present(n, 3)) {
    const std::vector<double> b = im.floats(n.inputs[3]);
    std::vector<double> sum(static_cast<size_t>(H));
    for (int64_t j = 0; j < H; ++j) {
      sum[size_t(j)] = b[size_t(j)] + b[size_t(H + j)];
      // rnn holds one bias: Wb + Rb must be exact in double (it is for float32 values of
      // comparable magnitude).
      if (sum[size_t(j)] - b[size_t(j)] != b[size_t(H + j)] || sum[size_t(j)] - b[size_t(H + j)] != b[size_t(j)])
        return im.opaque(i, "a bias whose Wb + Rb is not exact in double");
    }
    bias = im.new_param((n.name.empty() ? n.outputs[0] : n.name) + ".bias", {H}, std::move(sum));
  }
  lnv::Node tx = im.node(n, i, Op::transpose, {im.value(n.inputs[0])}, "batch_first");
  tx.perm = {1, 0, 2};
  lnv::Node c = im.node(n, i, Op::rnn, {im.emit(std::move(tx))}, "steps");
  c.weight_ih = im.param_as(n.inputs[1], {H, r.f});
  c.weight_hh = im.param_as(n.inputs[2], {H, H});
  c.bias = bias;
  const std::string h = im.emit(std::move(c));  // [N, T, H]
  if (present(n, 0) && n.outputs.size() > 0 && !n.outputs[0].empty() && im.used(n, 0)) {
    lnv::Node ty = im.node(n, i, Op::transpose, {h}, "time_first");
    ty.perm = {1, 0, 2};
    lnv::Node y = im.node(n, i, Op::reshape, {im.emit(std::move(ty))}, "y");
    y.shape = {r.t, 1, r.batch, H};
    im.emit_final(std::move(y), n.outputs[0]);
  }
  if (n.outputs.size() > 1 && !n.outputs[1].empty() && im.used(n, 1)) {
    lnv::Node last = im.node(n, i, Op::slice, {h}, "last_step");
    last.axes = {1};
    last.starts = {r.t - 1};
    last.ends = {r.t};
    last.steps = {1};
    lnv::Node yh = im.node(n, i, Op::transpose, {im.emit(std::move(last))}, "y_h");
    yh.perm = {1, 0, 2};  // [N, 1, H] -> [1, N, H]
    im.emit_final(std::move(yh), n.outputs[1]);
  }
}

}  // namespace lnv::onnx_import
