// Norms and Gelu's Erf spelling in an ONNX graph (docs/onnx.md, "Norms"), matched before
// the nodes are mapped one by one (onnx/import_context.h, match_patterns).
//
// A decomposition matches only whole: every value between its first and its last node is
// read by the pattern alone (not by another node, not a graph output), the reductions
// agree on their axes and keep them, and eps and the exponent are constants. Casts between
// float types and Identity may sit between any two steps (they are identities here). A
// spelling that matches in part is not a norm: its nodes are mapped one by one.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/shape.h"
#include "onnx/import_context.h"
#include "onnx/spellings.h"

namespace lnv::onnx_import {
namespace {

using Nodes = std::vector<size_t>;

class Matcher {
 public:
  explicit Matcher(Importer& im) : im_(im), nodes_(im.nodes()) {}

  std::map<size_t, std::function<void(Importer&)>> run() {
    // Whole LayerNorm decompositions first: their inner `d = x - mean` is an RMSNorm's
    // spelling too.
    for (size_t i = 0; i < nodes_.size(); ++i)
      if (is(i, "ReduceMean")) try_layer_norm_decomposed(i);
    for (size_t i = 0; i < nodes_.size(); ++i)
      if (is(i, "Pow") || is(i, "Mul")) try_rms_norm_decomposed(i);
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (is(i, "LayerNormalization") || is(i, "RMSNormalization") ||
          is(i, "SimplifiedLayerNormalization") ||
          is(i, "SimplifiedLayerNormalization", "com.microsoft"))
        try_norm_op(i);
      if (is(i, "SkipLayerNormalization", "com.microsoft")) try_skip_layer_norm(i, false);
      if (is(i, "SkipSimplifiedLayerNormalization", "com.microsoft")) try_skip_layer_norm(i, true);
      if (is(i, "EmbedLayerNormalization", "com.microsoft")) try_embed_layer_norm(i);
      if (is(i, "Erf")) try_gelu(i);
      if (is(i, "Softmax")) try_masked_softmax(i);
    }
    return std::move(matches_);
  }

 private:
  bool is(size_t i, const char* op, const char* domain = "") const {
    const auto& n = nodes_[i];
    const bool domain_ok = n.domain == domain || (*domain == 0 && n.domain == "ai.onnx");
    return n.op_type == op && domain_ok && !im_.consumed(i);
  }
  bool is_alias(size_t i) const {
    const auto& n = nodes_[i];
    if (n.op_type == "Identity" && n.domain.empty()) return true;
    return n.op_type == "Cast" && n.domain.empty() && is_float_type(im_.elem_type(n.inputs[0])) &&
           is_float_type(im_.elem_type(n.outputs[0]));
  }
  // The value `v` is an alias of (through Casts and Identity).
  std::string root(std::string v) const {
    for (int p = im_.producer(v); p >= 0 && is_alias(p); p = im_.producer(v)) v = nodes_[p].inputs[0];
    return v;
  }
  // The nodes reading `v`, through aliases (added to `path`); nullopt when `v` or an
  // alias of it is a graph output.
  std::optional<Nodes> uses(const std::string& v, Nodes& path) const {
    if (im_.is_graph_output(v)) return std::nullopt;
    Nodes out;
    for (int c : im_.consumers(v)) {
      if (im_.consumed(c)) return std::nullopt;
      if (!is_alias(c)) {
        out.push_back(c);
        continue;
      }
      path.push_back(c);
      auto more = uses(nodes_[c].outputs[0], path);
      if (!more) return std::nullopt;
      out.insert(out.end(), more->begin(), more->end());
    }
    return out;
  }
  // The one node reading `v` (through aliases), if it is of type `op`.
  std::optional<size_t> sole_use(const std::string& v, const char* op, Nodes& path) const {
    auto u = uses(v, path);
    if (!u || u->size() != 1 || !is((*u)[0], op)) return std::nullopt;
    path.push_back((*u)[0]);
    return (*u)[0];
  }
  // The operand of binary node i that is not (an alias of) `v`, if the other one is.
  std::optional<std::string> other(size_t i, const std::string& v) const {
    const auto& in = nodes_[i].inputs;
    if (in.size() != 2) return std::nullopt;
    if (root(in[0]) == v) return in[1];
    if (root(in[1]) == v) return in[0];
    return std::nullopt;
  }
  std::optional<double> constant_scalar(const std::optional<std::string>& v) const {
    if (!v) return std::nullopt;
    return im_.scalar(root(*v));
  }
  // Normalized, sorted axes of a ReduceMean that keeps them; nullopt otherwise. Of a
  // value whose rank is unknown (`rank` nullopt), the axes as written, sorted.
  std::optional<Axes> kept_axes(size_t i, std::optional<int64_t> rank) const {
    if (im_.attr_i(nodes_[i], "keepdims", 1) == 0) return std::nullopt;
    const auto axes = im_.reduce_axes(nodes_[i]);
    if (!axes || axes->empty()) return std::nullopt;
    Axes a;
    for (int64_t x : *axes) {
      if (rank && (x < -*rank || x >= *rank)) return std::nullopt;
      a.push_back(rank && x < 0 ? x + *rank : x);
    }
    std::sort(a.begin(), a.end());
    return a;
  }
  // The rank of `x`, or nullopt when its shape is unknown (it depends on an op nobody
  // infers shapes for: the norm reading it is kept as a "no" naming that op, leave_out).
  std::optional<int64_t> rank_of(const std::string& x) const {
    if (!im_.has_shape(x)) return std::nullopt;
    return static_cast<int64_t>(im_.shape(x).size());
  }

  // `v`'s mean of squares, plus a constant eps, square-rooted: the node reading the root,
  // and eps. `path` gets the nodes.
  struct Denominator {
    std::string sqrt_out;
    double eps = 0;
  };
  std::optional<Denominator> eps_sqrt(const std::string& mean_sq, Nodes& path) const {
    const auto add = sole_use(mean_sq, "Add", path);
    if (!add) return std::nullopt;
    const auto eps = constant_scalar(other(*add, mean_sq));
    if (!eps || !std::isfinite(*eps) || *eps < 0) return std::nullopt;
    const auto sq = sole_use(nodes_[*add].outputs[0], "Sqrt", path);
    if (!sq) return std::nullopt;
    return Denominator{nodes_[*sq].outputs[0], *eps};
  }
  // num / s, spelled Div(num, s) or Mul(num, Reciprocal(s)): the dividing node, which must
  // be `expected` when given.
  std::optional<size_t> divide(const std::string& num, const std::string& s, Nodes& path) const {
    Nodes p;
    auto u = uses(s, p);
    if (!u || u->size() != 1) return std::nullopt;
    size_t d = (*u)[0];
    if (is(d, "Div")) {
      if (nodes_[d].inputs.size() != 2 || root(nodes_[d].inputs[0]) != num || root(nodes_[d].inputs[1]) != s)
        return std::nullopt;
    } else if (is(d, "Reciprocal")) {
      p.push_back(d);
      const auto mul = sole_use(nodes_[d].outputs[0], "Mul", p);
      if (!mul) return std::nullopt;
      const auto o = other(*mul, nodes_[d].outputs[0]);
      if (!o || root(*o) != num) return std::nullopt;
      d = *mul;
      p.pop_back();
    } else {
      return std::nullopt;
    }
    path.insert(path.end(), p.begin(), p.end());
    path.push_back(d);
    return d;
  }
  // Whether `c` is a constant whose dims, without leading 1s, are x's dims over trailing
  // `axes`.
  bool affine_fits(const std::string& c, const std::vector<int64_t>& x, const Axes& axes) const {
    const Initializer* init = im_.constant(c);
    if (!init || !init->value.is_float()) return false;
    if (!x.empty() && x.front() == kUnknownRank) return unranked_affine_dims(im_, c, axes.size()).has_value();
    const int64_t rank = static_cast<int64_t>(x.size());
    for (size_t k = 0; k < axes.size(); ++k)
      if (axes[k] != rank - static_cast<int64_t>(axes.size() - k)) return false;
    std::vector<int64_t> d = init->value.dims;
    while (!d.empty() && d.front() == 1 && d.size() > axes.size()) d.erase(d.begin());
    return d == std::vector<int64_t>(x.end() - static_cast<int64_t>(axes.size()), x.end());
  }

  // Stands for the shape of a value that has none in affine_fits.
  static constexpr int64_t kUnknownRank = -1;
  // The dims of constant `c` without leading 1s, when they are `k` (the weight or bias of
  // a norm over k axes of a value whose shape is unknown).
  static std::optional<std::vector<int64_t>> unranked_affine_dims(const Importer& im, const std::string& c,
                                                                  size_t k) {
    const Initializer* init = im.constant(c);
    if (!init || !init->value.is_float()) return std::nullopt;
    std::vector<int64_t> d = init->value.dims;
    while (!d.empty() && d.front() == 1 && d.size() > k) d.erase(d.begin());
    if (d.size() != k) return std::nullopt;
    return d;
  }
  const std::vector<int64_t>& shape_or_unknown(const std::string& x) const {
    static const std::vector<int64_t> unknown = {kUnknownRank};
    return im_.has_shape(x) ? im_.shape(x) : unknown;
  }

  struct Norm {
    Op op = Op::layer_norm;
    std::string x;
    Axes axes;  // as the file writes them
    Axes normalized;
    double eps = 0;
    std::string weight, bias;  // ONNX constants, empty when absent
    std::string out;           // the ONNX value the norm computes
    std::string mean_out, inv_std_out;  // LayerNormalization's statistics outputs, if read
    // A LayerNorm spelled as a centering and an RMSNorm of it (absorb_centering): the value
    // the norm reads, transposed by `perm` (when not empty) into the shape of `x`.
    std::string source;
    std::vector<int64_t> perm;
    std::string transpose_name;
    Nodes nodes;
    std::string name;  // empty: from the nodes' common path
  };
  // After the normalized value at `n_out`: an optional Mul by a weight, then an optional
  // Add of a bias.
  void affine_tail(Norm& norm) const {
    const std::vector<int64_t>& x = shape_or_unknown(norm.x);
    Nodes p;
    if (auto mul = sole_use(norm.out, "Mul", p)) {
      const auto w = other(*mul, norm.out);
      if (w && affine_fits(root(*w), x, norm.normalized)) {
        norm.weight = root(*w);
        norm.out = nodes_[*mul].outputs[0];
        norm.nodes.insert(norm.nodes.end(), p.begin(), p.end());
      }
    }
    bias_tail(norm);
  }
  // After the (weighted) normalized value: an optional Add of a bias.
  void bias_tail(Norm& norm) const {
    const std::vector<int64_t>& x = shape_or_unknown(norm.x);
    Nodes p;
    if (auto add = sole_use(norm.out, "Add", p)) {
      const auto b = other(*add, norm.out);
      if (b && affine_fits(root(*b), x, norm.normalized)) {
        norm.bias = root(*b);
        norm.out = nodes_[*add].outputs[0];
        norm.nodes.insert(norm.nodes.end(), p.begin(), p.end());
      }
    }
  }

  // ReduceMean -> Sub -> Pow 2 | Mul -> ReduceMean -> Add eps -> Sqrt -> Div | Reciprocal.Mul
  // -> [Mul weight] -> [Add bias].
  void try_layer_norm_decomposed(size_t r1) {
    Norm norm;
    norm.x = root(nodes_[r1].inputs[0]);
    const auto rank = rank_of(norm.x);
    const auto axes = kept_axes(r1, rank);
    if (!axes || (rank && !im_.is_float_value(norm.x))) return;
    norm.normalized = *axes;
    norm.axes = *im_.reduce_axes(nodes_[r1]);
    Nodes& path = norm.nodes;
    path.push_back(r1);
    const std::string mean = nodes_[r1].outputs[0];
    const auto sub = sole_use(mean, "Sub", path);
    if (!sub || root(nodes_[*sub].inputs[0]) != norm.x || root(nodes_[*sub].inputs[1]) != mean) return;
    const std::string d = nodes_[*sub].outputs[0];
    auto d_uses = uses(d, path);
    if (!d_uses || d_uses->size() != 2) return;
    std::optional<size_t> square;
    for (size_t u : *d_uses) {
      const auto& n = nodes_[u];
      if (n.inputs.size() != 2) continue;
      const bool pow2 = is(u, "Pow") && root(n.inputs[0]) == d && im_.scalar(root(n.inputs[1])) == 2.0;
      const bool mul = is(u, "Mul") && root(n.inputs[0]) == d && root(n.inputs[1]) == d;
      if (pow2 || mul) square = u;
    }
    if (!square) return;
    path.push_back(*square);
    const auto r2 = sole_use(nodes_[*square].outputs[0], "ReduceMean", path);
    if (!r2 || kept_axes(*r2, rank) != norm.normalized) return;
    const auto den = eps_sqrt(nodes_[*r2].outputs[0], path);
    if (!den) return;
    const auto div = divide(d, den->sqrt_out, path);
    const size_t other_use = (*d_uses)[0] == *square ? (*d_uses)[1] : (*d_uses)[0];
    if (!div) return;
    // The division reads d directly, or through the Reciprocal's Mul.
    if (*div != other_use) return;
    norm.eps = den->eps;
    norm.out = nodes_[*div].outputs[0];
    affine_tail(norm);
    add(std::move(norm), "LayerNormalization");
  }

  // Whether `v` is Sub(y, ReduceMean(y)): the rest of a LayerNorm spelling that did not
  // match whole (a partial match), which is imported op by op, not as an RMSNorm of it.
  bool centered_by_sub(const std::string& v) const {
    const int s = im_.producer(v);
    if (s < 0 || nodes_[s].op_type != "Sub" || nodes_[s].inputs.size() != 2) return false;
    const int m = im_.producer(root(nodes_[s].inputs[1]));
    return m >= 0 && nodes_[m].op_type == "ReduceMean" &&
           root(nodes_[m].inputs[0]) == root(nodes_[s].inputs[0]);
  }

  // An RMSNorm of Transpose(Sub(y, ReduceMean(y, A))) (ONNX Runtime's transpose optimizer
  // pushes a channels-last Transpose behind the centering of torch's decomposed LayerNorm;
  // its SimplifiedLayerNormFusion then fuses the rest): a LayerNorm of y transposed, when
  // the reduced axes A, carried through the Transpose, are the RMSNorm's axes and the
  // centering's values are read by the norm alone. Turns `norm` into that LayerNorm.
  bool absorb_centering(Norm& norm) const {
    std::string c = root(norm.x);
    Nodes path;
    std::vector<int64_t> perm;
    std::string transpose_name;
    int p = im_.producer(c);
    if (p >= 0 && is(size_t(p), "Transpose")) {
      const auto& t = nodes_[size_t(p)];
      const int64_t rank = int64_t(im_.shape(norm.x).size());
      perm = im_.attr_ints(t, "perm", {});
      if (int64_t(perm.size()) != rank) return false;
      transpose_name = t.name.empty() ? t.outputs[0] : t.name;
      path.push_back(size_t(p));
      c = root(t.inputs[0]);
      p = im_.producer(c);
    }
    // Without the Transpose, Sub(y, mean(y)) before an RMSNorm is what `fold --mode
    // training` writes for a centered lookup: it stays a centering and an RMSNorm.
    if (perm.empty()) return false;
    if (p < 0 || !is(size_t(p), "Sub") || nodes_[size_t(p)].inputs.size() != 2) return false;
    const auto& sub = nodes_[size_t(p)];
    const std::string y = root(sub.inputs[0]);
    const int m = im_.producer(root(sub.inputs[1]));
    if (m < 0 || !is(size_t(m), "ReduceMean") || root(nodes_[size_t(m)].inputs[0]) != y ||
        !im_.has_shape(y) || !im_.is_float_value(y))
      return false;
    const auto axes = kept_axes(size_t(m), int64_t(im_.shape(y).size()));
    if (!axes) return false;
    Axes mapped;
    for (int64_t a : *axes) {
      if (perm.empty()) {
        mapped.push_back(a);
        continue;
      }
      for (size_t j = 0; j < perm.size(); ++j)
        if (perm[j] == a) mapped.push_back(int64_t(j));
    }
    std::sort(mapped.begin(), mapped.end());
    if (mapped != norm.normalized) return false;
    path.push_back(size_t(p));
    path.push_back(size_t(m));
    // Every value from the mean to the norm's input is read inside the norm only.
    Nodes all = norm.nodes;
    all.insert(all.end(), path.begin(), path.end());
    const Nodes centering = path;
    for (size_t k : centering)
      for (const std::string& out : nodes_[k].outputs) {
        Nodes aliases;
        const auto u = uses(out, aliases);
        if (!u) return false;
        for (size_t r : *u)
          if (std::find(all.begin(), all.end(), r) == all.end()) return false;
        all.insert(all.end(), aliases.begin(), aliases.end());
        path.insert(path.end(), aliases.begin(), aliases.end());
      }
    norm.op = Op::layer_norm;
    norm.source = y;
    norm.perm = perm;
    norm.transpose_name = transpose_name;
    norm.nodes.insert(norm.nodes.end(), path.begin(), path.end());
    return true;
  }

  // Pow 2 | Mul(x, x) -> ReduceMean -> Add eps -> Sqrt -> Div | Reciprocal.Mul -> [Mul weight]
  // -> [Add bias].
  void try_rms_norm_decomposed(size_t q) {
    const auto& n = nodes_[q];
    if (n.inputs.size() != 2) return;
    Norm norm;
    norm.op = Op::rms_norm;
    norm.x = root(n.inputs[0]);
    const bool square = n.op_type == "Pow" ? im_.scalar(root(n.inputs[1])) == 2.0
                                           : root(n.inputs[1]) == norm.x;
    const auto rank = rank_of(norm.x);
    if (!square || (rank && !im_.is_float_value(norm.x))) return;
    Nodes& path = norm.nodes;
    path.push_back(q);
    const auto r = sole_use(n.outputs[0], "ReduceMean", path);
    if (!r) return;
    const auto axes = kept_axes(*r, rank);
    if (!axes) return;
    norm.normalized = *axes;
    norm.axes = *im_.reduce_axes(nodes_[*r]);
    const auto den = eps_sqrt(nodes_[*r].outputs[0], path);
    if (!den) return;
    const auto div = divide(norm.x, den->sqrt_out, path);
    if (!div) return;
    norm.eps = den->eps;
    norm.out = nodes_[*div].outputs[0];
    const bool centered = rank && absorb_centering(norm);
    if (!centered && centered_by_sub(norm.x)) return;
    affine_tail(norm);
    add(std::move(norm), centered ? "LayerNormalization" : "RMSNormalization");
  }

  // Softmax(x + M) with M a constant of 0 and -inf (nn.MultiheadAttention's additive
  // causal mask) read by the softmax alone: a softmax masked where M is -inf, which is
  // exact where M itself is not a finite param. M must not enlarge x, and every row must
  // keep a position (ONNX gives NaN for a row of -inf; that Add stays opaque). Before
  // opset 13 only a softmax over the last axis matches (the flattening one is not a
  // masked softmax over one axis). M is read here wherever it lies: a mask of 128 x 128
  // float32 or more is left in its file on load (Tensor::stored) like a weight.
  void try_masked_softmax(size_t s) {
    const auto& sn = nodes_[s];
    const int a = im_.producer(root(sn.inputs[0]));
    if (a < 0 || !is(size_t(a), "Add")) return;
    const auto& an = nodes_[size_t(a)];
    std::optional<std::string> x;
    const Initializer* m = nullptr;
    for (int k = 0; k < 2 && !m; ++k) {
      const Initializer* c = im_.constant(root(an.inputs[size_t(k)]));
      if (c && c->value.is_float()) m = c, x = root(an.inputs[size_t(1 - k)]);
    }
    if (!m || !im_.is_float_value(*x) || !im_.has_shape(*x) || !im_.has_shape(an.outputs[0])) return;
    const std::vector<int64_t>& xs = im_.shape(*x);
    if (xs != im_.shape(an.outputs[0]) || m->value.dims.size() > xs.size()) return;
    lnv::Node masked;
    masked.condition_shape = m->value.dims;
    bool any_masked = false;
    for (double v : stored_floats(m->value)) {
      if (v != 0.0 && v != -std::numeric_limits<double>::infinity()) return;
      any_masked = any_masked || v != 0.0;
      masked.condition.push_back(v == 0.0 ? 1 : 0);
    }
    if (!any_masked) return;
    const int64_t rank = int64_t(xs.size());
    const bool flattening = im_.model().opset("") < 13;
    int64_t axis = im_.attr_i(sn, "axis", flattening ? 1 : -1);
    if (axis < -rank || axis >= rank) return;
    if (axis < 0) axis += rank;
    if (flattening && axis != rank - 1) return;
    masked.op = Op::softmax;
    masked.axis = axis;
    try {
      masked.name = sn.name, masked.inputs = {*x};  // the mask broadcasts, keeps a position per row
      infer_shape(lnv::Graph{}, masked, {xs});
    } catch (const lnv::ModelError&) {
      return;
    }
    Nodes path{size_t(a)};
    const auto read = uses(an.outputs[0], path);
    if (!read || read->size() != 1 || (*read)[0] != s) return;
    path.push_back(s);
    for (size_t k : path) im_.consume(k);
    const std::string in = *x;
    matches_[s] = [=](Importer& im) {
      lnv::Node n = im.node(sn, s, Op::softmax, {im.value(in)});
      n.axis = masked.axis;
      n.condition = masked.condition;
      n.condition_shape = masked.condition_shape;
      im.emit_final(std::move(n), sn.outputs[0]);
    };
  }

  // LayerNormalization (opset 17), RMSNormalization (opset 23), and ONNX Runtime's
  // SimplifiedLayerNormalization: axis, epsilon, a constant scale (and bias). A norm whose
  // Mean or InvStdDev output is read is not a plain norm: it stays one node (opaque).
  void try_norm_op(size_t i) {
    const auto& n = nodes_[i];
    Norm norm;
    norm.op = *norm_op_of(n.domain, n.op_type);
    for (size_t k = 1; k < n.outputs.size(); ++k)
      if (im_.used(n, k) && !(norm.op == Op::layer_norm && k <= 2)) return;
    // LayerNormalization's Mean and InvStdDev, when read, are computed beside the norm from
    // the same input: mean(x), and 1/sqrt(mean(center(x)^2) + eps) (which needs model.json's
    // sqrt and reciprocal; without them the node stays whole, opaque).
    if (im_.used(n, 1)) norm.mean_out = n.outputs[1];
    if (im_.used(n, 2)) {
      if (!op_from_name("sqrt") || !op_from_name("reciprocal")) return;
      norm.inv_std_out = n.outputs[2];
    }
    if (norm.op == Op::rms_norm && n.inputs.size() > 2) return;  // no bias in an RMSNorm op
    norm.x = n.inputs[0];
    if (!im_.has_shape(norm.x)) return;
    const std::vector<int64_t>& x = im_.shape(norm.x);
    const int64_t rank = static_cast<int64_t>(x.size());
    const int64_t axis = im_.attr_i(n, "axis", -1);
    if (axis < -rank || axis >= rank || !im_.is_float_value(norm.x)) return;
    for (int64_t a = axis; a < (axis < 0 ? 0 : rank); ++a) {
      norm.axes.push_back(a);
      norm.normalized.push_back(a < 0 ? a + rank : a);
    }
    norm.eps = im_.attr_f(n, "epsilon", 1e-5);
    if (n.inputs.size() < 2 || !affine_fits(n.inputs[1], x, norm.normalized)) return;
    norm.weight = n.inputs[1];
    if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
      if (!affine_fits(n.inputs[2], x, norm.normalized)) return;
      norm.bias = n.inputs[2];
    }
    norm.out = n.outputs[0];
    norm.nodes = {i};
    norm.name = n.name.empty() ? n.outputs[0] : n.name;
    if (norm.op == Op::rms_norm && norm.inv_std_out.empty() && absorb_centering(norm)) bias_tail(norm);
    add(std::move(norm), "");
  }

  // ONNX Runtime's SkipLayerNormalization (input, skip, gamma, beta, bias) and
  // SkipSimplifiedLayerNormalization (input, skip, gamma, bias): s = input + skip (+ bias),
  // then a LayerNorm (an RMSNorm) of s over the last axis with epsilon (default 1e-12);
  // output 3 is s. Outputs 1 and 2 (mean and inverse standard deviation of s, kept as a
  // last dim of 1), when read, are computed beside the norm as LayerNormalization's are
  // (statistics); the simplified norm's output 1 is not defined and stays opaque.
  void try_skip_layer_norm(size_t i, bool simplified) {
    const auto& n = nodes_[i];
    if (n.inputs.size() < 3 || !im_.has_shape(n.inputs[0]) || !im_.has_shape(n.inputs[1])) return;
    if (simplified && im_.used(n, 1)) return;
    if (im_.used(n, 2) && (!op_from_name("sqrt") || !op_from_name("reciprocal"))) return;
    const std::vector<int64_t>& x = im_.shape(n.inputs[0]);
    if (x.empty()) return;
    const Axes last = {static_cast<int64_t>(x.size()) - 1};
    if (!affine_fits(n.inputs[2], x, last)) return;
    const size_t bias_at = simplified ? 3 : 4;
    const bool has_beta = !simplified && n.inputs.size() > 3 && !n.inputs[3].empty();
    const bool has_bias = n.inputs.size() > bias_at && !n.inputs[bias_at].empty();
    if ((has_beta && !affine_fits(n.inputs[3], x, last)) ||
        (has_bias && !affine_fits(n.inputs[bias_at], x, last)))
      return;
    Norm norm;
    norm.op = simplified ? Op::rms_norm : Op::layer_norm;
    norm.axes = {-1};
    norm.normalized = last;
    norm.eps = im_.attr_f(n, "epsilon", 1e-12);
    norm.name = n.name.empty() ? n.outputs[0] : n.name;
    if (im_.used(n, 1)) norm.mean_out = n.outputs[1];
    if (im_.used(n, 2)) norm.inv_std_out = n.outputs[2];
    im_.consume(i);
    matches_[i] = [=, &n](Importer& im) {
      std::string s = im.emit(im.named_node(norm.name + ".sum", Op::add, {im.value(n.inputs[0]), im.value(n.inputs[1])}));
      if (has_bias)
        s = im.emit(im.named_node(norm.name + ".sum_bias", Op::add, {s, im.param_as(n.inputs[bias_at], {x.back()})}));
      if (n.outputs.size() > 3 && !n.outputs[3].empty()) im.alias_lnv(n.outputs[3], s);
      lnv::Node ln = im.named_node(norm.name, norm.op, {s});
      ln.axes = norm.axes;
      ln.eps = norm.eps;
      ln.weight = im.param_as(n.inputs[2], {x.back()});
      if (has_beta) ln.bias = im.param_as(n.inputs[3], {x.back()});
      const std::string ln_name = ln.name;
      im.emit_final(std::move(ln), n.outputs[0]);
      if (!norm.mean_out.empty() || !norm.inv_std_out.empty()) statistics(im, norm, s);
      im.record_norm(ln_name, {i});
    };
  }

  // ONNX Runtime's EmbedLayerNormalization: word_embedding[input_ids] +
  // position_embedding[position_ids] (rows 0 .. S-1 when position_ids is absent) (+
  // segment_embedding[segment_ids]), then a LayerNorm over the last axis with gamma, beta and
  // epsilon (default 1e-12); output 2 is the sum. Matched when the ids are integer graph
  // inputs and the tables constants (or centered in the graph, as `fold --mode training`
  // writes them: table_centered_in_graph); a read mask_index output (an integer) when
  // every reader is an Attention and the mask an integer graph input, otherwise opaque.
  // The integer graph input `v` is, directly or through a Cast (ONNX Runtime's transformer
  // optimizer casts int64 ids to int32), or "".
  std::string index_source(const std::string& v) const {
    if (im_.is_index_input(v)) return v;
    const int p = im_.producer(v);
    if (p >= 0 && nodes_[size_t(p)].op_type == "Cast" && nodes_[size_t(p)].domain.empty() &&
        im_.is_index_input(nodes_[size_t(p)].inputs[0]))
      return nodes_[size_t(p)].inputs[0];
    return "";
  }

  // A table as `fold --mode training` writes it: Sub(T, ReduceMean(T, [-1], keepdims=1))
  // of a float constant T [rows, d] that only this centering reads; the Sub and the
  // ReduceMean (added to `path`), T's name in `table`. False otherwise.
  bool table_centered_in_graph(const std::string& v, std::string& table, Nodes& path) const {
    const int s = im_.producer(v);
    if (s < 0 || !is(size_t(s), "Sub") || nodes_[size_t(s)].inputs.size() != 2) return false;
    const std::string t = nodes_[size_t(s)].inputs[0];
    const int m = im_.producer(nodes_[size_t(s)].inputs[1]);
    if (m < 0 || !is(size_t(m), "ReduceMean") || nodes_[size_t(m)].inputs[0] != t ||
        !im_.is_constant(t) || !im_.is_float_value(t) || im_.shape(t).size() != 2)
      return false;
    const auto axes = kept_axes(size_t(m), 2);
    const auto& t_readers = im_.consumers(t);
    const auto& mean_readers = im_.consumers(nodes_[size_t(m)].outputs[0]);
    if (!axes || *axes != Axes{1} || t_readers.size() != 2 || mean_readers.size() != 1 ||
        im_.consumers(v).size() != 1 || im_.is_graph_output(v) ||
        im_.is_graph_output(nodes_[size_t(m)].outputs[0]))
      return false;
    table = t;
    path.push_back(size_t(s));
    path.push_back(size_t(m));
    return true;
  }

  void try_embed_layer_norm(size_t i) {
    const auto& n = nodes_[i];
    auto given = [&](size_t k) { return k < n.inputs.size() && !n.inputs[k].empty(); };
    if (n.inputs.size() < 7) return;
    const std::string ids_in = index_source(n.inputs[0]);
    // A read mask_index: ONNX Runtime's CPU kernel counts the entries equal to 1 in each
    // row of `mask` ([B]: the key lengths its Attention reads, whatever the padding).
    // Modelled when the mask is an integer graph input [B, S] (directly or through a Cast)
    // and every reader is an Attention's mask_index: the count of an `embedding` of the
    // mask in the table [[0], [1]] (mask ids in {0, 1}), summed by a `matmul` by ones.
    const bool counts_mask = im_.used(n, 1);
    const std::string mask_in = counts_mask && given(7) ? index_source(n.inputs[7]) : "";
    if (counts_mask) {
      if (mask_in.empty() || im_.is_graph_output(n.outputs[1]) || !im_.has_shape(n.inputs[7]) ||
          !im_.has_shape(n.inputs[0]) || im_.shape(n.inputs[7]) != im_.shape(n.inputs[0]))
        return;
      for (int r : im_.consumers(n.outputs[1])) {
        const auto& a = nodes_[size_t(r)];
        if (a.op_type != "Attention" || a.domain != "com.microsoft" || a.inputs.size() < 4 ||
            std::count(a.inputs.begin(), a.inputs.end(), n.outputs[1]) != 1 || a.inputs[3] != n.outputs[1])
          return;
      }
    }
    const std::string seg_in = given(1) ? index_source(n.inputs[1]) : "";
    const std::string pos_in = given(8) ? index_source(n.inputs[8]) : "";
    if (ids_in.empty() || given(1) != given(4) || (given(1) && seg_in.empty()) || (given(8) && pos_in.empty()))
      return;
    // The stored table each lookup reads, and whether it is centered in the graph.
    std::map<size_t, std::string> tables;
    std::set<size_t> centered;
    Nodes centering;
    for (size_t k : {2, 3, 4}) {
      if (!given(k)) continue;
      tables[k] = n.inputs[k];
      if (table_centered_in_graph(n.inputs[k], tables[k], centering)) centered.insert(k);
    }
    for (size_t k : {2, 3, 4, 5, 6}) {
      const std::string v = tables.count(k) ? tables[k] : given(k) ? n.inputs[k] : "";
      if (!v.empty() && (!im_.is_constant(v) || !im_.is_float_value(v))) return;
    }
    const auto& ids = im_.shape(n.inputs[0]);
    const auto& word = im_.shape(n.inputs[2]);
    const auto& pos = im_.shape(n.inputs[3]);
    if (ids.size() != 2 || word.size() != 2 || pos.size() != 2 || pos[1] != word[1] || pos[0] < ids[1]) return;
    const int64_t d = word[1];
    if (im_.numel(n.inputs[5]) != d || im_.numel(n.inputs[6]) != d) return;
    if (given(4) && (im_.shape(n.inputs[4]).size() != 2 || im_.shape(n.inputs[4])[1] != d)) return;
    Norm norm;
    norm.axes = {-1};
    norm.eps = im_.attr_f(n, "epsilon", 1e-12);
    norm.name = n.name.empty() ? n.outputs[0] : n.name;
    im_.consume(i);
    for (size_t c : centering) im_.consume(c);
    // A Cast of the ids (or of the counted mask) that only this node reads goes with it.
    for (size_t k : {size_t(0), size_t(1), size_t(7), size_t(8)}) {
      if (k == 7 && !counts_mask) continue;
      if (!given(k) || im_.is_index_input(n.inputs[k])) continue;
      const int c = im_.producer(n.inputs[k]);
      const auto& readers = im_.consumers(n.inputs[k]);
      if (c >= 0 && !im_.is_graph_output(n.inputs[k]) &&
          std::all_of(readers.begin(), readers.end(), [&](int r) { return size_t(r) == i; }))
        im_.consume(size_t(c));
    }
    matches_[i] = [=, &n](Importer& im) {
      // Rows of a table centered in the graph are the stored rows centered: centering
      // along the features commutes with taking rows.
      auto center_rows = [&](size_t table, std::string rows) {
        if (!centered.count(table)) return rows;
        lnv::Node c = im.named_node(rows + ".centered", Op::center, {rows});
        c.axes = {-1};
        return im.emit(std::move(c));
      };
      auto lookup = [&](size_t table, const std::string& index, const char* what) {
        lnv::Node e = im.named_node(norm.name + "." + what, Op::embedding, {im.value(index)});
        e.weight = im.value(tables.at(table));
        im.note_index_range(index, im.shape(tables.at(table))[0]);
        return center_rows(table, im.emit(std::move(e)));
      };
      std::string sum = lookup(2, ids_in, "word");
      std::string position;
      if (given(8)) {
        position = lookup(3, pos_in, "position");
      } else {
        lnv::Node rows = im.named_node(norm.name + ".position", Op::slice, {im.value(tables.at(3))});
        rows.axes = {0};
        rows.starts = {0};
        rows.ends = {ids[1]};
        rows.steps = {1};
        position = center_rows(3, im.emit(std::move(rows)));
      }
      sum = im.emit(im.named_node(norm.name + ".sum", Op::add, {sum, position}));
      if (given(1)) sum = im.emit(im.named_node(norm.name + ".sum_segment", Op::add, {sum, lookup(4, seg_in, "segment")}));
      if (n.outputs.size() > 2 && !n.outputs[2].empty()) im.alias_lnv(n.outputs[2], sum);
      if (counts_mask) {
        const auto& bs = im.shape(n.inputs[7]);
        lnv::Node ones = im.named_node(norm.name + ".mask_ones", Op::embedding, {im.value(mask_in)});
        ones.weight = im.new_param(norm.name + ".mask_ones_table", {2, 1}, {0.0, 1.0});
        im.note_index_range(mask_in, 2);
        lnv::Node rows = im.named_node(norm.name + ".mask_rows", Op::reshape, {im.emit(std::move(ones))});
        rows.shape = bs;
        lnv::Node count = im.named_node(norm.name + ".mask_count", Op::matmul,
                                        {im.emit(std::move(rows)),
                                         im.new_param(norm.name + ".mask_sum", {bs[1], 1},
                                                      std::vector<double>(size_t(bs[1]), 1.0))});
        lnv::Node lengths = im.named_node(norm.name + ".mask_index", Op::reshape, {im.emit(std::move(count))});
        lengths.shape = {bs[0]};
        im.alias_lnv(n.outputs[1], im.emit(std::move(lengths)));
        im.note_key_lengths(n.outputs[1]);
      }
      lnv::Node ln = im.named_node(norm.name, Op::layer_norm, {sum});
      ln.axes = norm.axes;
      ln.eps = norm.eps;
      ln.weight = im.param_as(n.inputs[5], {d});
      ln.bias = im.param_as(n.inputs[6], {d});
      const std::string ln_name = ln.name;
      im.emit_final(std::move(ln), n.outputs[0]);
      im.record_norm(ln_name, {i});
      im.note_fused_norm(ln_name);
    };
  }

  // 0.5 * x * (1 + erf(x / sqrt(2))), with x * (1/sqrt(2)) for the division and the 0.5
  // applied first, last or to x.
  void try_gelu(size_t e) {
    Nodes path;
    const std::string u = root(nodes_[e].inputs[0]);
    const int pu = im_.producer(u);
    if (pu < 0 || im_.consumed(pu)) return;
    std::string x;
    const auto& un = nodes_[pu];
    if (un.inputs.size() != 2) return;
    const auto c = im_.scalar(root(un.inputs[1]));
    if (!c) return;
    if (un.op_type == "Div" && std::fabs(*c - std::sqrt(2.0)) < 1e-6) x = root(un.inputs[0]);
    else if (un.op_type == "Mul" && std::fabs(*c - std::sqrt(0.5)) < 1e-6) x = root(un.inputs[0]);
    else return;
    path.push_back(pu);
    Nodes p0;
    const auto u_uses = uses(u, p0);
    if (!u_uses || u_uses->size() != 1 || (*u_uses)[0] != e) return;
    path.insert(path.end(), p0.begin(), p0.end());
    path.push_back(e);
    const auto one = sole_use(nodes_[e].outputs[0], "Add", path);
    if (!one || constant_scalar(other(*one, nodes_[e].outputs[0])) != 1.0) return;
    const std::string a = nodes_[*one].outputs[0];
    const auto m1 = sole_use(a, "Mul", path);
    if (!m1) return;
    const auto f = other(*m1, a);
    if (!f) return;
    std::string out;
    if (root(*f) == x) {  // x * (1 + erf) then * 0.5
      const auto m2 = sole_use(nodes_[*m1].outputs[0], "Mul", path);
      if (!m2 || constant_scalar(other(*m2, nodes_[*m1].outputs[0])) != 0.5) return;
      out = nodes_[*m2].outputs[0];
    } else if (constant_scalar(f) == 0.5) {  // (1 + erf) * 0.5 then * x
      const auto m2 = sole_use(nodes_[*m1].outputs[0], "Mul", path);
      if (!m2) return;
      const auto o = other(*m2, nodes_[*m1].outputs[0]);
      if (!o || root(*o) != x) return;
      out = nodes_[*m2].outputs[0];
    } else {  // (x * 0.5) * (1 + erf)
      const int h = im_.producer(root(*f));
      if (h < 0 || !is(h, "Mul") || constant_scalar(other(h, x)) != 0.5) return;
      Nodes ph;
      const auto hu = uses(root(*f), ph);
      if (!hu || hu->size() != 1 || (*hu)[0] != *m1) return;
      path.push_back(h);
      path.insert(path.end(), ph.begin(), ph.end());
      out = nodes_[*m1].outputs[0];
    }
    if (!im_.is_float_value(x)) return;
    for (size_t k : path) im_.consume(k);
    const std::string name = common_path(path, "Gelu");
    matches_[*std::max_element(path.begin(), path.end())] = [=](Importer& im) {
      im.emit_final(im.named_node(name, Op::gelu, {im.value(x)}), out);
    };
  }

  // The nodes' common path ("/h.0/ln_1/") + `kind`; the first node's name without one.
  std::string common_path(const Nodes& path, const std::string& kind) const {
    std::string prefix;
    bool first = true;
    for (size_t i : path) {
      const std::string& name = nodes_[i].name;
      const std::string dir = name.substr(0, name.rfind('/') == std::string::npos ? 0 : name.rfind('/') + 1);
      if (first) prefix = dir;
      first = false;
      size_t k = 0;
      while (k < prefix.size() && k < dir.size() && prefix[k] == dir[k]) ++k;
      prefix = prefix.substr(0, k);
    }
    prefix = prefix.substr(0, prefix.rfind('/') == std::string::npos ? 0 : prefix.rfind('/') + 1);
    if (!prefix.empty()) return prefix + kind;
    const auto& n = nodes_[*std::min_element(path.begin(), path.end())];
    return n.name.empty() ? n.outputs[0] : n.name;
  }

  // Mean = mean(x) and InvStdDev = 1 / sqrt(mean(center(x)^2) + eps) over the norm's axes,
  // kept (LayerNormalization's outputs 1 and 2).
  static void statistics(Importer& im, const Norm& norm, const std::string& lnv_x) {
    const std::string x = lnv_x;
    auto reduce = [&](const std::string& want, const std::string& in) {
      lnv::Node m = im.named_node(want, Op::mean, {in});
      m.axes = norm.axes;
      m.keepdims = true;
      return m;
    };
    if (!norm.mean_out.empty()) im.emit_final(reduce(norm.name + ".Mean", x), norm.mean_out);
    if (norm.inv_std_out.empty()) return;
    std::string centered = x;  // an RMSNorm's "variance" is the mean square of x itself
    if (norm.op == Op::layer_norm) {
      lnv::Node c = im.named_node(norm.name + ".centered", Op::center, {x});
      c.axes = norm.axes;
      centered = im.emit(std::move(c));
    }
    const std::string sq = im.emit(im.named_node(norm.name + ".square", Op::mul, {centered, centered}));
    const std::string var = im.emit(reduce(norm.name + ".var", sq));
    const std::string ve = im.emit(im.named_node(norm.name + ".var_eps", Op::add,
                                                 {var, im.new_param(norm.name + ".eps", {}, {norm.eps})}));
    const std::string s = im.emit(im.named_node(norm.name + ".std", *op_from_name("sqrt"), {ve}));
    im.emit_final(im.named_node(norm.name + ".InvStdDev", *op_from_name("reciprocal"), {s}),
                  norm.inv_std_out);
  }

  void add(Norm norm, const std::string& kind) {
    for (size_t k : norm.nodes) im_.consume(k);
    if (norm.name.empty()) norm.name = common_path(norm.nodes, kind);
    const size_t last = *std::max_element(norm.nodes.begin(), norm.nodes.end());
    matches_[last] = [norm = std::move(norm)](Importer& im) {
      if (!im.has_shape(norm.x)) return leave_out(im, norm);
      std::string in = im.value(norm.source.empty() ? norm.x : norm.source);
      if (!norm.perm.empty()) {
        lnv::Node t = im.named_node(norm.transpose_name, Op::transpose, {in});
        t.perm = norm.perm;
        in = im.emit(std::move(t));
      }
      lnv::Node ln = im.named_node(norm.name, norm.op, {in});
      ln.axes = norm.axes;
      ln.eps = norm.eps;
      const std::vector<int64_t>& x = im.shape(norm.x);
      const Shape over(x.end() - static_cast<int64_t>(norm.normalized.size()), x.end());
      if (!norm.weight.empty()) ln.weight = im.param_as(norm.weight, over);
      if (!norm.bias.empty()) ln.bias = im.param_as(norm.bias, over);
      const std::string name = ln.name;
      im.emit_final(std::move(ln), norm.out);
      if (!norm.mean_out.empty() || !norm.inv_std_out.empty()) statistics(im, norm, im.value(norm.x));
      Nodes sorted = norm.nodes;
      std::sort(sorted.begin(), sorted.end());
      im.record_norm(name, sorted);
    };
  }

  // A decomposed norm whose input has no shape: kept over its weight's (or bias's) dims
  // as a "no" naming the op that has no shape (Importer::leave_out_norm); without either,
  // its dims are unknown and it is left out with what it reads.
  static void leave_out(Importer& im, const Norm& norm) {
    const size_t k = norm.normalized.size();
    auto dims = norm.weight.empty() ? std::nullopt : unranked_affine_dims(im, norm.weight, k);
    if (!dims && !norm.bias.empty()) dims = unranked_affine_dims(im, norm.bias, k);
    im.leave_out_norm(norm.x, norm.out, norm.name, norm.op, norm.eps, dims ? *dims : std::vector<int64_t>{});
    if (!dims) return;
    Nodes sorted = norm.nodes;
    std::sort(sorted.begin(), sorted.end());
    im.record_norm(norm.name, sorted);
  }

  Importer& im_;
  const std::vector<onnx_import::Node>& nodes_;
  std::map<size_t, std::function<void(Importer&)>> matches_;
};

}  // namespace

std::map<size_t, std::function<void(Importer&)>> match_patterns(Importer& im) {
  return Matcher(im).run();
}

}  // namespace lnv::onnx_import
