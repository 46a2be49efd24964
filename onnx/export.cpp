// model.json -> ONNX opset 17 (onnx/export.h). One function per op family; each emits the
// ONNX nodes computing the model.json node's value under the value name `<node name>`.
#include "onnx/export.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

#include "core/error.h"
#include "onnx/onnx_checker.h"
#include "onnx/spellings.h"

namespace lnv::onnx_export {
namespace {

namespace ox = ::onnx;
using onnx_import::onnx_op_of;
using onnx_import::RmsStep;
using onnx_import::UniqueNames;

// The largest finite float32: an additive causal mask of this magnitude gives a masked
// score exactly zero probability (exp underflows to 0 in float32, double and MPFR alike),
// where -inf would not be a finite model.json param on re-import.
constexpr double kMaskFill = -static_cast<double>(std::numeric_limits<float>::max());

std::string where(const Node& n) {
  return "node '" + n.name + "' (" + std::string(op_name(n.op)) + ")";
}

// `v` (row-major, shape `s`) minus its mean over `axis`.
std::vector<double> centered(std::vector<double> v, const Shape& s, int64_t axis) {
  int64_t outer = 1, inner = 1;
  for (int64_t a = 0; a < axis; ++a) outer *= s[a];
  for (size_t a = size_t(axis) + 1; a < s.size(); ++a) inner *= s[a];
  const int64_t m = s[axis];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double sum = 0;
      for (int64_t k = 0; k < m; ++k) sum += v[(o * m + k) * inner + i];
      const double mean = sum / double(m);
      for (int64_t k = 0; k < m; ++k) v[(o * m + k) * inner + i] -= mean;
    }
  return v;
}

class Exporter {
 public:
  Exporter(const Graph& g, bool float64) : g_(g), float64_(float64) {
    for (const Input& in : g.inputs) names_.take(in.name);
    for (const Param& p : g.params) names_.take(p.name);
    for (const Node& n : g.nodes) names_.take(n.name);
  }

  ox::ModelProto run() {
    ox::ModelProto mp;
    mp.set_ir_version(8);  // the IR of opset 17
    mp.set_producer_name("lnverify");
    auto* opset = mp.add_opset_import();
    opset->set_domain("");
    opset->set_version(kOpset);
    gp_ = mp.mutable_graph();
    gp_->set_name(g_.name.empty() ? "lnverify" : g_.name);
    for (const Input& in : g_.inputs)
      value_info(gp_->add_input(), in.name, in.dtype == DType::index, in.shape);
    for (int32_t i : g_.order) export_node(i);
    for (size_t k = 0; k < g_.outputs.size(); ++k) {
      const ValueRef& r = g_.output_refs[k];
      const bool index = r.kind == ValueRef::Kind::input && g_.inputs[r.index].dtype == DType::index;
      if (r.kind == ValueRef::Kind::param) param(g_.outputs[k], -1);
      value_info(gp_->add_output(), g_.outputs[k], index, g_.shape_of(r));
    }
    return mp;
  }

 private:
  // ------------------------------------------------------------ names, nodes, constants

  std::string fresh(const std::string& want) { return names_.fresh(want); }

  int32_t float_type() const { return float64_ ? ox::TensorProto::DOUBLE : ox::TensorProto::FLOAT; }

  void value_info(ox::ValueInfoProto* v, const std::string& name, bool index, const Shape& s) const {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(index ? ox::TensorProto::INT64 : float_type());
    auto* shape = t->mutable_shape();
    for (int64_t d : s) shape->add_dim()->set_dim_value(d);
  }

  // Adds an ONNX node; returns its output value.
  std::string emit(const std::string& op, const std::string& name, const std::vector<std::string>& inputs,
                   const std::string& output, ox::NodeProto** out = nullptr) {
    auto* np = gp_->add_node();
    np->set_op_type(op);
    np->set_name(name);
    for (const auto& in : inputs) np->add_input(in);
    np->add_output(output);
    if (out) *out = np;
    return output;
  }
  // A helper step of node `base`: the node and its value named `<base>.<step>`.
  std::string step(const std::string& op, const std::string& base, const std::string& what,
                   const std::vector<std::string>& inputs, ox::NodeProto** out = nullptr) {
    const std::string name = fresh(base + "." + what);
    return emit(op, name, inputs, name, out);
  }

  static void attr_i(ox::NodeProto* n, const char* key, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(key);
    a->set_type(ox::AttributeProto::INT);
    a->set_i(v);
  }
  static void attr_f(ox::NodeProto* n, const char* key, double v) {
    auto* a = n->add_attribute();
    a->set_name(key);
    a->set_type(ox::AttributeProto::FLOAT);
    a->set_f(static_cast<float>(v));
  }
  static void attr_ints(ox::NodeProto* n, const char* key, const std::vector<int64_t>& v) {
    auto* a = n->add_attribute();
    a->set_name(key);
    a->set_type(ox::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }

  std::string float_init(const std::string& name, const Shape& s, const std::vector<double>& v,
                         const std::string& what, bool minus_inf_ok = false) {
    auto* t = gp_->add_initializer();
    t->set_name(name);
    t->set_data_type(float_type());
    for (int64_t d : s) t->add_dims(d);
    if (float64_) {
      std::string raw(v.size() * sizeof(double), '\0');
      if (!v.empty()) std::memcpy(raw.data(), v.data(), raw.size());
      t->set_raw_data(std::move(raw));
      return name;
    }
    std::string raw(v.size() * sizeof(float), '\0');
    for (size_t i = 0; i < v.size(); ++i) {
      if (std::fabs(v[i]) > double(std::numeric_limits<float>::max()) &&
          !(minus_inf_ok && v[i] == -std::numeric_limits<double>::infinity()))
        throw ModelError(what, "value " + std::to_string(v[i]) + " at flat index " + std::to_string(i) +
                                   " is beyond float32's range; ONNX export writes float32");
      const float f = static_cast<float>(v[i]);
      std::memcpy(raw.data() + i * sizeof(float), &f, sizeof(float));
    }
    t->set_raw_data(std::move(raw));
    return name;
  }
  std::string float_const(const std::string& base, const std::string& what, const Shape& s,
                          const std::vector<double>& v) {
    return float_init(fresh(base + "." + what), s, v, "node '" + base + "'");
  }
  std::string scalar(const std::string& base, const std::string& what, double v) {
    return float_const(base, what, {}, {v});
  }
  std::string ints(const std::string& base, const std::string& what, const std::vector<int64_t>& v) {
    auto* t = gp_->add_initializer();
    const std::string name = fresh(base + "." + what);
    t->set_name(name);
    t->set_data_type(ox::TensorProto::INT64);
    t->add_dims(int64_t(v.size()));
    std::string raw(v.size() * sizeof(int64_t), '\0');
    if (!v.empty()) std::memcpy(raw.data(), v.data(), raw.size());
    t->set_raw_data(std::move(raw));
    return name;
  }

  // The initializer holding param `name` as a node reads it: its effective values, centered
  // over `axis` of its shape for a cbwc producer (a copy `<name>.cbwc`), transposed (a 2-D
  // weight, for MatMul: `<name>.transposed`).
  std::string param(const std::string& name, int64_t axis, bool transposed = false) {
    const auto key = std::make_tuple(name, axis, transposed);
    if (auto it = params_.find(key); it != params_.end()) return it->second;
    const Param& p = g_.params[size_t(g_.param_index(name))];
    std::vector<double> v = effective_values(p);
    Shape shape = p.shape;
    if (axis >= 0) v = centered(std::move(v), p.shape, axis);
    if (transposed) {
      const int64_t rows = shape[0], cols = shape[1];
      std::vector<double> t(v.size());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) t[size_t(c * rows + r)] = v[size_t(r * cols + c)];
      v = std::move(t);
      shape = {cols, rows};
    }
    const std::string init = axis < 0 && !transposed ? name
                             : fresh(name + (axis >= 0 ? ".cbwc" : "") + (transposed ? ".transposed" : ""));
    float_init(init, shape, v, "param '" + name + "'");
    return params_[key] = init;
  }
  // The CBWC axis of a param attribute of `n` (-1: read as stored).
  static int64_t cbwc_axis(const Node& n, const std::string& attr) {
    return n.cbwc ? cbwc_attr_axis(n.op, attr) : -1;
  }
  std::string param_attr(const Node& n, const std::string& attr, const std::string& name) {
    if (name.empty()) return "";
    return param(name, cbwc_axis(n, attr));
  }
  // The ONNX value of a model.json name read by a node.
  std::string value(const std::string& name) {
    const ValueRef& r = g_.ref(name);
    return r.kind == ValueRef::Kind::param ? param(name, -1) : name;
  }

  // ------------------------------------------------------------ shared spellings

  // y = x Wᵀ + b over x's last axis into the value `out`, its last node named `name`: for a
  // matrix x, Gemm(x, W, b, transB) (which the importer reads as `linear`); else
  // MatMul(x, Wᵀ) (`<name>.product` when a bias follows) and Add(b), as PyTorch exports
  // nn.Linear (the importer's `matmul` by a param and `add` of one). `w` is the weight's
  // param name and `axis` its CBWC axis.
  std::string linear(const std::string& name, const std::string& x, const Shape& xs,
                     const std::string& w, int64_t axis, const std::string& b, const std::string& out) {
    ox::NodeProto* np = nullptr;
    if (xs.size() == 2) {
      std::vector<std::string> in = {x, param(w, axis)};
      if (!b.empty()) in.push_back(b);
      emit("Gemm", name, in, out, &np);
      attr_i(np, "transB", 1);
      return out;
    }
    // With a bias the Add computes `out`, so it carries the name (the importer names a value
    // after the node computing it: a graph output keeps its name).
    if (b.empty()) return emit("MatMul", name, {x, param(w, axis, /*transposed=*/true)}, out);
    const std::string product = fresh(name + ".product");
    emit("MatMul", product, {x, param(w, axis, /*transposed=*/true)}, product);
    return emit("Add", name, {product, b}, out);
  }

  // A LayerNorm or RMSNorm of x (shape xs) over `axes` (as written) into value `out`, the
  // norm's first node named `name`. Axes that are not the trailing ones in order are moved
  // there by a Transpose, and back after: then the Transpose back computes `out` and carries
  // `name`, and the norm is `<name>.normalize` (the importer names a value after the node
  // computing it, so a graph output keeps its name).
  std::string norm(const std::string& name, Op kind, const std::string& x, const Shape& xs,
                   const Axes& written, double eps, const std::string& w, const std::string& b,
                   const std::string& out) {
    const int64_t rank = int64_t(xs.size());
    const Axes axes = normalize_axes(written, rank, "node '" + name + "'/axes");
    const int64_t k = int64_t(axes.size());
    bool trailing = true;
    for (int64_t i = 0; i < k; ++i) trailing = trailing && axes[i] == rank - k + i;
    std::vector<int64_t> perm;
    for (int64_t a = 0; a < rank; ++a)
      if (std::find(axes.begin(), axes.end(), a) == axes.end()) perm.push_back(a);
    perm.insert(perm.end(), axes.begin(), axes.end());
    std::string in = x;
    ox::NodeProto* np = nullptr;
    const std::string norm_name = trailing ? name : fresh(name + ".normalize");
    if (!trailing) {
      in = step("Transpose", name, "to_last", {x}, &np);
      attr_ints(np, "perm", perm);
    }
    const std::string normed = trailing ? out : fresh(name + ".normalized");
    // The reduction axes as written when no transpose moved them (so a re-import reads the
    // same `axes`), else the trailing k.
    std::vector<int64_t> red;
    for (int64_t i = 0; i < k; ++i) red.push_back(rank - k + i);
    if (trailing) red = written;
    // In float64 the decomposed spelling keeps the epsilon a double (LayerNormalization's
    // is a float32 attribute).
    if (kind == Op::layer_norm && !w.empty() && !float64_) {
      std::vector<std::string> inputs = {in, w};
      if (!b.empty()) inputs.push_back(b);
      emit("LayerNormalization", norm_name, inputs, normed, &np);
      attr_i(np, "axis", trailing ? rank - k - (written.front() < 0 ? rank : 0) : rank - k);
      attr_f(np, "epsilon", eps);
    } else {
      decomposed_norm(norm_name, kind, in, red, eps, w, b, normed);
    }
    if (trailing) return out;
    std::vector<int64_t> inverse(size_t(rank), 0);
    for (int64_t i = 0; i < rank; ++i) inverse[size_t(perm[i])] = i;
    emit("Transpose", name, {normed}, out, &np);
    attr_ints(np, "perm", inverse);
    return out;
  }

  // A norm over the trailing axes `red` of `in`, spelled as the importer
  // (onnx/import_patterns.cpp) reads it back, its first node named `name`:
  // layer_norm: ReduceMean -> Sub, then the RMSNorm's steps (onnx/ops.def,
  // LNV_ONNX_RMS_STEP): Pow 2 -> ReduceMean -> Add eps -> Sqrt -> Div -> [Mul weight] -> [Add bias].
  // (LayerNormalization needs a Scale: a layer_norm without weight is spelled out, so that
  // it reads back without one.)
  void decomposed_norm(const std::string& name, Op kind, const std::string& in,
                       const std::vector<int64_t>& red, double eps, const std::string& w,
                       const std::string& b, const std::string& out) {
    ox::NodeProto* np = nullptr;
    auto reduce_mean = [&](const std::string& node, const std::string& x, const std::string& value) {
      emit(onnx_op_of(RmsStep::mean_square), node, {x}, value, &np);
      attr_ints(np, "axes", red);
      attr_i(np, "keepdims", 1);
      return value;
    };
    const bool rms = kind == Op::rms_norm;
    std::string d = in;
    if (!rms) d = step("Sub", name, "centered", {in, reduce_mean(name, in, fresh(name + ".mean"))});
    const std::string two = scalar(name, "two", 2.0);
    const char* pow = onnx_op_of(RmsStep::square);
    const std::string sq = rms ? emit(pow, name, {d, two}, fresh(name + ".square")) : step(pow, name, "square", {d, two});
    const std::string var = reduce_mean(fresh(name + ".mean_square"), sq, fresh(name + ".mean_square_value"));
    const std::string ve = step(onnx_op_of(RmsStep::plus_eps), name, "mean_square_eps", {var, scalar(name, "eps", eps)});
    const std::string den = step(onnx_op_of(RmsStep::root), name, "root", {ve});
    std::vector<std::pair<std::string, std::string>> tail = {{onnx_op_of(RmsStep::normalize), den}};
    if (!w.empty()) tail.push_back({onnx_op_of(RmsStep::weight), w});
    if (!b.empty()) tail.push_back({onnx_op_of(RmsStep::bias), b});
    std::string v = d;
    for (size_t i = 0; i < tail.size(); ++i) {
      const std::string node = fresh(name + "." + (i == 0 ? "normalized" : i == 1 && !w.empty() ? "weighted" : "biased"));
      v = emit(tail[i].first, node, {v, tail[i].second}, i + 1 == tail.size() ? out : node);
    }
  }

  // ------------------------------------------------------------ one function per family

  void export_node(int32_t i) {
    const Node& n = g_.nodes[size_t(i)];
    switch (op_family(n.op)) {
      case OpFamily::weighted_producer:
        switch (family_member<WeightedOp>(n.op)) {
          case WeightedOp::linear: return export_linear(n);
          case WeightedOp::matmul: return export_matmul(n, i);
          case WeightedOp::embedding: return export_embedding(n);
          case WeightedOp::conv1d: case WeightedOp::conv2d: return export_conv(n);
          case WeightedOp::rnn: return export_rnn(n, i);
          case WeightedOp::lstm: case WeightedOp::gru: return export_gated_recurrent(n);
          case WeightedOp::attention: return export_attention(n);
        }
        break;
      case OpFamily::elementwise_binary: return export_binary(n);
      case OpFamily::scale: emit("Mul", n.name, {value(n.inputs[0]), scalar(n.name, "factor", n.factor)}, n.name); return;
      case OpFamily::dropout: emit(onnx_op_of(n.op), n.name, {value(n.inputs[0]), scalar(n.name, "ratio", n.p)}, n.name); return;
      case OpFamily::unary_nonlinearity: return export_unary(n);
      case OpFamily::softmax: {
        ox::NodeProto* np = nullptr;
        std::string x = value(n.inputs[0]);
        if (is_masked_softmax(n)) {  // + a constant of 0 and -inf: imported back as this mask
          std::vector<double> m;
          for (int64_t c : n.condition) m.push_back(c != 0 ? 0.0 : -std::numeric_limits<double>::infinity());
          x = step("Add", n.name, "masked", {x, float_init(fresh(n.name + ".mask"), n.condition_shape, m,
                                                             where(n), true)});
        }
        emit(onnx_op_of(n.op), n.name, {x}, n.name, &np);
        attr_i(np, "axis", n.axis);
        return;
      }
      case OpFamily::reduction: {
        ox::NodeProto* np = nullptr;
        emit(onnx_op_of(n.op), n.name, {value(n.inputs[0])}, n.name, &np);
        attr_ints(np, "axes", n.axes);
        attr_i(np, "keepdims", n.keepdims ? 1 : 0);
        return;
      }
      case OpFamily::shape_op:
        return export_shape_op(n, i);
      case OpFamily::concat: return export_concat(n);
      case OpFamily::select: return export_where(n);
      case OpFamily::center: {
        ox::NodeProto* np = nullptr;
        const std::string x = value(n.inputs[0]);
        const std::string m = step("ReduceMean", n.name, "mean", {x}, &np);
        attr_ints(np, "axes", n.axes);
        attr_i(np, "keepdims", 1);
        emit("Sub", n.name, {x, m}, n.name);
        return;
      }
      case OpFamily::norm:
        norm(n.name, n.op, value(n.inputs[0]), g_.shape_of(n.inputs[0]), n.axes, n.eps,
             param_attr(n, "weight", n.weight), param_attr(n, "bias", n.bias), n.name);
        return;
      case OpFamily::opaque:
        throw ModelError(where(n), "cannot be exported: it stands for the source op '" + n.op_type +
                                       "', which lnverify does not model, so there is nothing to "
                                       "write in its place");
    }
  }

  void export_linear(const Node& n) {
    linear(n.name, value(n.inputs[0]), g_.shape_of(n.inputs[0]), n.weight, cbwc_axis(n, "weight"),
           param_attr(n, "bias", n.bias), n.name);
  }

  void export_matmul(const Node& n, int32_t i) {
    const MatmulCentering c = n.cbwc ? cbwc_matmul_operand(g_, i) : MatmulCentering{};
    std::string in[2];
    for (int k = 0; k < 2; ++k)
      in[k] = c.operand == k ? param(n.inputs[size_t(k)], c.axis) : value(n.inputs[size_t(k)]);
    if (n.transpose_b) {
      const int64_t rank = int64_t(g_.shape_of(n.inputs[1]).size());
      std::vector<int64_t> perm(static_cast<size_t>(rank));
      std::iota(perm.begin(), perm.end(), 0);
      std::swap(perm[size_t(rank - 1)], perm[size_t(rank - 2)]);
      ox::NodeProto* np = nullptr;
      in[1] = step("Transpose", n.name, "b_transposed", {in[1]}, &np);
      attr_ints(np, "perm", perm);
    }
    emit(onnx_op_of(n.op), n.name, {in[0], in[1]}, n.name);
  }

  void export_embedding(const Node& n) {
    ox::NodeProto* np = nullptr;
    emit(onnx_op_of(n.op), n.name, {param_attr(n, "weight", n.weight), value(n.inputs[0])}, n.name, &np);
    attr_i(np, "axis", 0);
  }

  void export_conv(const Node& n) {
    const Shape& w = g_.params[g_.param_index(n.weight)].shape;
    const size_t spatial = w.size() - 2;
    auto per_axis = [&](const std::vector<int64_t>& v) {
      return v.size() == 1 ? std::vector<int64_t>(spatial, v[0]) : v;
    };
    std::vector<std::string> in = {value(n.inputs[0]), param_attr(n, "weight", n.weight)};
    if (!n.bias.empty()) in.push_back(param_attr(n, "bias", n.bias));
    ox::NodeProto* np = nullptr;
    emit(onnx_op_of(n.op), n.name, in, n.name, &np);
    const std::vector<int64_t> begin = per_axis(n.padding);
    std::vector<int64_t> pads = begin;  // ONNX: all begins, then all ends
    pads.insert(pads.end(), begin.begin(), begin.end());
    attr_ints(np, "kernel_shape", std::vector<int64_t>(w.begin() + 2, w.end()));
    attr_ints(np, "strides", per_axis(n.stride));
    attr_ints(np, "pads", pads);
    attr_ints(np, "dilations", per_axis(n.dilation));
    attr_i(np, "group", n.groups);
  }

  // Unrolled over time (ONNX's RNN op has no norm inside, and the importer maps the
  // unrolled spelling): the input projection of every step at once, then per step t
  // a_t = xproj_t + h_{t-1} W_hhᵀ (none at t = 0, h_0 = 0), the norm, tanh; the h_t
  // concatenated along time.
  void export_rnn(const Node& n, int32_t i) {
    const Shape& xs = g_.shape_of(n.inputs[0]);
    const int64_t batch = xs[0], steps = xs[1], hidden = g_.node_shapes[size_t(i)][2];
    const std::string whh = param_attr(n, "weight_hh", n.weight_hh);
    const std::string proj = linear(fresh(n.name + ".input_projection"), value(n.inputs[0]), xs, n.weight_ih,
                                    cbwc_axis(n, "weight_ih"), param_attr(n, "bias", n.bias),
                                    fresh(n.name + ".projected"));
    const std::string row_shape = ints(n.name, "step_shape", {batch, hidden});
    const std::string col_shape = ints(n.name, "time_shape", {batch, 1, hidden});
    std::string h;
    std::vector<std::string> hs;
    ox::NodeProto* np = nullptr;
    for (int64_t t = 0; t < steps; ++t) {
      const std::string ts = n.name + ".t" + std::to_string(t);
      const std::string sl = step("Slice", ts, "input",
                                  {proj, ints(ts, "start", {t}), ints(ts, "end", {t + 1}), ints(ts, "axis", {1})});
      std::string a = step("Reshape", ts, "projected", {sl, row_shape});
      if (!h.empty()) {
        const std::string rec = fresh(ts + ".recurrent");
        emit("Gemm", rec, {h, whh}, rec, &np);
        attr_i(np, "transB", 1);
        a = step("Add", ts, "preactivation", {a, rec});
      }
      if (n.norm)
        a = norm(fresh(ts + ".norm"), n.norm->kind, a, {batch, hidden}, {-1}, n.norm->eps,
                 optional_param(n.norm->weight), optional_param(n.norm->bias), fresh(ts + ".normalized"));
      h = step("Tanh", ts, "h", {a});
      hs.push_back(step("Reshape", ts, "h_in_time", {h, col_shape}));
    }
    emit("Concat", n.name, hs, n.name, &np);
    attr_i(np, "axis", 1);
  }
  // One ONNX LSTM or GRU node (default activations); the output the node selects is
  // named as the node, the others are left unnamed.
  void export_gated_recurrent(const Node& n) {
    const bool lstm = n.op == Op::lstm;
    std::vector<std::string> ins = {value(n.inputs[0]), param(n.weight_ih, -1), param(n.weight_hh, -1),
                                    optional_param(n.bias), "", optional_param(n.initial_h)};
    if (!n.sequence_lens.empty()) {
      auto* t = gp_->add_initializer();
      const std::string name = fresh(n.name + ".sequence_lens");
      t->set_name(name);
      t->set_data_type(ox::TensorProto::INT32);
      t->add_dims(int64_t(n.sequence_lens.size()));
      for (int64_t v : n.sequence_lens) t->add_int32_data(int32_t(v));
      ins[4] = name;
    }
    if (lstm) ins.push_back(optional_param(n.initial_c));
    while (!ins.empty() && ins.back().empty()) ins.pop_back();
    ox::NodeProto* np = nullptr;
    emit(lstm ? "LSTM" : "GRU", n.name, ins, n.output == "y" ? n.name : "", &np);
    if (n.output != "y") np->add_output(n.output == "y_h" ? n.name : "");
    if (n.output == "y_c") np->add_output(n.name);
    auto* a = np->add_attribute();
    a->set_name("direction");
    a->set_type(ox::AttributeProto::STRING);
    a->set_s(n.direction);
    attr_i(np, "hidden_size", g_.params[size_t(g_.param_index(n.weight_hh))].shape[2]);
    if (!lstm) attr_i(np, "linear_before_reset", n.linear_before_reset ? 1 : 0);
  }
  // A norm's weight or bias (never centered), "" when absent.
  std::string optional_param(const std::string& name) { return name.empty() ? "" : param(name, -1); }

  // q, k, v projections, heads split as [N, heads, T, D/heads], scores q kᵀ scaled by
  // 1/√(D/heads) (+ the causal mask), softmax over keys, heads merged, the output
  // projection named as the node.
  void export_attention(const Node& n) {
    const Shape& xs = g_.shape_of(n.inputs[0]);
    const int64_t batch = xs[0], steps = xs[1], d = xs[2], dh = d / n.heads;
    const std::string x = value(n.inputs[0]);
    const std::string split = ints(n.name, "heads_shape", {batch, steps, n.heads, dh});
    ox::NodeProto* np = nullptr;
    auto head_view = [&](const std::string& what, const std::string& w, const std::string& b,
                         const std::vector<int64_t>& perm) {
      const std::string p = linear(fresh(n.name + "." + what), x, xs, w, cbwc_axis(n, "w" + what),
                                   b, fresh(n.name + "." + what + "_projected"));
      const std::string r = step("Reshape", n.name, std::string(what) + "_heads", {p, split});
      const std::string t = step("Transpose", n.name, std::string(what) + "_by_head", {r}, &np);
      attr_ints(np, "perm", perm);
      return t;
    };
    const std::string q = head_view("q", n.wq, param_attr(n, "bq", n.bq), {0, 2, 1, 3});
    const std::string k = head_view("k", n.wk, param_attr(n, "bk", n.bk), {0, 2, 3, 1});
    const std::string v = head_view("v", n.wv, param_attr(n, "bv", n.bv), {0, 2, 1, 3});
    std::string s = step("MatMul", n.name, "scores", {q, k});
    s = step("Mul", n.name, "scaled_scores", {s, scalar(n.name, "inv_sqrt_head_dim", 1.0 / std::sqrt(double(dh)))});
    if (n.causal) {
      // One mask per sequence length, shared by the attention nodes.
      auto [it, first] = causal_masks_.try_emplace(steps);
      if (first) {
        std::vector<double> mask(size_t(steps * steps), 0.0);
        for (int64_t r = 0; r < steps; ++r)
          for (int64_t c = r + 1; c < steps; ++c) mask[size_t(r * steps + c)] = kMaskFill;
        it->second = float_init(fresh("causal_mask." + std::to_string(steps)), {steps, steps}, mask, where(n));
      }
      s = step("Add", n.name, "masked_scores", {s, it->second});
    }
    const std::string pr = step("Softmax", n.name, "probs", {s}, &np);
    attr_i(np, "axis", -1);
    const std::string o = step("MatMul", n.name, "context", {pr, v});
    const std::string ot = step("Transpose", n.name, "context_by_token", {o}, &np);
    attr_ints(np, "perm", {0, 2, 1, 3});
    const std::string merged = step("Reshape", n.name, "merged", {ot, ints(n.name, "merged_shape", {batch, steps, d})});
    linear(n.name, merged, xs, n.wo, cbwc_axis(n, "wo"), param_attr(n, "bo", n.bo), n.name);
  }

  void export_binary(const Node& n) {
    emit(onnx_op_of(n.op), n.name, {value(n.inputs[0]), value(n.inputs[1])}, n.name);
  }

  void export_unary(const Node& n) {
    const std::string x = value(n.inputs[0]);
    ox::NodeProto* np = nullptr;
    switch (family_member<UnaryOp>(n.op)) {
      case UnaryOp::relu: case UnaryOp::tanh: case UnaryOp::sigmoid: case UnaryOp::exp: case UnaryOp::sqrt:
      case UnaryOp::reciprocal: case UnaryOp::erf: case UnaryOp::hard_swish:
      case UnaryOp::log: case UnaryOp::sin: case UnaryOp::cos: case UnaryOp::atan:
        emit(onnx_op_of(n.op), n.name, {x}, n.name);
        return;
      case UnaryOp::silu: {
        const std::string s = step("Sigmoid", n.name, "sigmoid", {x});
        emit("Mul", n.name, {x, s}, n.name);
        return;
      }
      case UnaryOp::gelu: {
        // x · 0.5 · (1 + erf(x/√2)): Gelu's Erf spelling, read back as gelu (named after
        // the Div).
        const std::string u = emit("Div", n.name, {x, scalar(n.name, "sqrt2", std::sqrt(2.0))}, fresh(n.name + ".scaled"));
        const std::string e = step("Erf", n.name, "erf", {u});
        const std::string one = step("Add", n.name, "one_plus_erf", {e, scalar(n.name, "one", 1.0)});
        const std::string xm = step("Mul", n.name, "x_times", {x, one});
        emit("Mul", fresh(n.name + ".half"), {xm, scalar(n.name, "half_factor", 0.5)}, n.name);
        return;
      }
      case UnaryOp::hard_sigmoid: {
        // HardSigmoid's alpha and beta are float32 attributes: in float64 an alpha or beta
        // that float32 does not hold is spelled max(0, min(1, alpha·x + beta)) instead.
        const auto f32 = [](double v) { return double(static_cast<float>(v)) == v; };
        if (float64_ && !(f32(n.alpha) && f32(n.beta))) {
          const std::string ax = step("Mul", n.name, "times_alpha", {x, scalar(n.name, "alpha", n.alpha)});
          const std::string lin = step("Add", n.name, "plus_beta", {ax, scalar(n.name, "beta", n.beta)});
          emit("Clip", n.name, {lin, scalar(n.name, "min", 0.0), scalar(n.name, "max", 1.0)}, n.name);
          return;
        }
        emit(onnx_op_of(n.op), n.name, {x}, n.name, &np);
        attr_f(np, "alpha", n.alpha);
        attr_f(np, "beta", n.beta);
        return;
      }
      case UnaryOp::clip: {
        const bool lo = std::isfinite(n.min), hi = std::isfinite(n.max);
        std::vector<std::string> in = {x, lo ? scalar(n.name, "min", n.min) : ""};
        if (hi) in.push_back(scalar(n.name, "max", n.max));
        emit(onnx_op_of(n.op), n.name, in, n.name);
        return;
      }
    }
  }

  void export_shape_op(const Node& n, int32_t i) {
    const std::string x = value(n.inputs[0]);
    ox::NodeProto* np = nullptr;
    switch (family_member<ShapeOp>(n.op)) {
      case ShapeOp::transpose:
        emit(onnx_op_of(n.op), n.name, {x}, n.name, &np);
        attr_ints(np, "perm", n.perm);
        return;
      case ShapeOp::reshape:
        emit(onnx_op_of(n.op), n.name, {x, ints(n.name, "shape", g_.node_shapes[size_t(i)])}, n.name);
        return;
      case ShapeOp::slice: {
        std::vector<int64_t> steps = n.steps.empty() ? std::vector<int64_t>(n.axes.size(), 1) : n.steps;
        emit(onnx_op_of(n.op), n.name,
             {x, ints(n.name, "starts", n.starts), ints(n.name, "ends", n.ends), ints(n.name, "axes", n.axes),
              ints(n.name, "steps", steps)},
             n.name);
        return;
      }
      case ShapeOp::expand:
        emit(onnx_op_of(n.op), n.name, {x, ints(n.name, "shape", n.shape)}, n.name);
        return;
      case ShapeOp::pad:
        emit(onnx_op_of(n.op), n.name, {x, ints(n.name, "pads", n.pads), scalar(n.name, "value", n.value)}, n.name);
        return;
    }
  }

  void export_concat(const Node& n) {
    std::vector<std::string> in;
    for (const auto& v : n.inputs) in.push_back(value(v));
    ox::NodeProto* np = nullptr;
    emit(onnx_op_of(n.op), n.name, in, n.name, &np);
    attr_i(np, "axis", n.axis);
  }

  // Where with the node's constant condition as a BOOL initializer (which the importer
  // reads back into the node).
  void export_where(const Node& n) {
    auto* t = gp_->add_initializer();
    const std::string c = fresh(n.name + ".condition");
    t->set_name(c);
    t->set_data_type(ox::TensorProto::BOOL);
    for (int64_t d : n.condition_shape) t->add_dims(d);
    std::string raw(n.condition.size(), '\0');
    for (size_t k = 0; k < n.condition.size(); ++k) raw[k] = n.condition[k] ? 1 : 0;
    t->set_raw_data(std::move(raw));
    emit(onnx_op_of(n.op), n.name, {c, value(n.inputs[0]), value(n.inputs[1])}, n.name);
  }

  const Graph& g_;
  const bool float64_;
  ox::GraphProto* gp_ = nullptr;
  UniqueNames names_;
  std::map<std::tuple<std::string, int64_t, bool>, std::string> params_;
  std::map<int64_t, std::string> causal_masks_;  // by sequence length
};

// ONNX's full check (onnx_checker.h); a failure is this exporter's bug. The value_info
// inference adds is dropped again (the model stays as built; no copy of the weights is
// made).
void check(ox::ModelProto& mp) {
  try {
    onnx_import::check_onnx_model(mp, ".", "the exported ONNX model", onnx_import::OnnxCheck::full);
  } catch (const ModelError& e) {
    throw InternalError(e.what());
  }
  mp.mutable_graph()->clear_value_info();
}

// Moves the data of initializers of at least kMinExternalNumel elements into `data`, each
// at an offset aligned to 64 bytes, and points them at `location`.
void externalize(ox::ModelProto& mp, const std::string& location, std::string& data) {
  for (auto& t : *mp.mutable_graph()->mutable_initializer()) {
    int64_t count = 1;
    for (int64_t d : t.dims()) count *= d;
    if (count < kMinExternalNumel) continue;
    data.resize((data.size() + 63) / 64 * 64, '\0');
    const size_t offset = data.size();
    data += t.raw_data();
    t.clear_raw_data();
    t.set_data_location(ox::TensorProto::EXTERNAL);
    auto add = [&](const char* key, const std::string& value) {
      auto* kv = t.add_external_data();
      kv->set_key(key);
      kv->set_value(value);
    };
    add("location", location);
    add("offset", std::to_string(offset));
    add("length", std::to_string(data.size() - offset));
  }
}

}  // namespace

int64_t initializer_bytes(const Graph& g, const ExportOptions& options) {
  const int64_t width = options.float64 ? int64_t(sizeof(double)) : int64_t(sizeof(float));
  int64_t bytes = 0;
  for (const Param& p : g.params) bytes += numel(p.shape) * width;
  return bytes;
}

ExportedModel export_onnx(const Graph& g, const ExportOptions& options) {
  LNV_INTERNAL_ASSERT(g.finalized(), "export_onnx: the graph is not finalized");
  ox::ModelProto mp = Exporter(g, options.float64).run();
  check(mp);
  ExportedModel out;
  out.nodes = mp.graph().node_size();
  out.initializers = mp.graph().initializer_size();
  for (const auto& t : mp.graph().initializer()) out.initializer_bytes += int64_t(t.raw_data().size());
  if (!options.external_data.empty()) externalize(mp, options.external_data, out.data);
  if (!mp.SerializeToString(&out.model))
    throw ModelError("ONNX export", "the model does not fit in one protobuf message (2 GiB); "
                                    "write its weights to external data");
  return out;
}

}  // namespace lnv::onnx_export
