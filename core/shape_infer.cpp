// Shape rules of every op of docs/spec/format.md v1, and the attribute checks that belong to
// them (param shapes, conv geometry, axes, probabilities). Called by Graph::finalize()
// for each node in topological order.
//
// Errors are ModelErrors whose `where` starts with "node '<name>'" followed by the
// attribute or input they concern ("node 'h'/weight"); finalize() replaces that prefix
// by the node's JSON path.
#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "core/graph.h"

namespace lnv {
namespace {

const Param* find_param(const Graph& g, const std::string& name) {
  if (g.has(name)) {  // fast path: the name index is built before shapes are inferred
    const ValueRef& r = g.ref(name);
    if (r.kind == ValueRef::Kind::param && r.index >= 0 &&
        static_cast<size_t>(r.index) < g.params.size() && g.params[r.index].name == name)
      return &g.params[r.index];
  }
  for (const Param& p : g.params)
    if (p.name == name) return &p;
  return nullptr;
}

const Input* find_input(const Graph& g, const std::string& name) {
  for (const Input& in : g.inputs)
    if (in.name == name) return &in;
  return nullptr;
}

// The rules for one node; `fail` and friends build errors that name it.
class Rules {
 public:
  Rules(const Graph& g, const Node& n, const std::vector<Shape>& in)
      : g_(g), n_(n), in_(in), where_("node '" + n.name + "'") {}

  Shape infer() {
    check_arity();
    check_param_attrs_apply();
    check_index_inputs();
    switch (op_family(n_.op)) {
      case OpFamily::weighted_producer:
        switch (family_member<WeightedOp>(n_.op)) {
          case WeightedOp::linear: return linear();
          case WeightedOp::matmul: return matmul();
          case WeightedOp::embedding: return embedding();
          case WeightedOp::conv1d: return conv(1);
          case WeightedOp::conv2d: return conv(2);
          case WeightedOp::rnn: return rnn();
          case WeightedOp::lstm:
          case WeightedOp::gru: return gated_recurrent();
          case WeightedOp::attention: return attention();
        }
        break;
      case OpFamily::elementwise_binary:
        return broadcast_shapes(in_[0], in_[1], where_ + "/inputs");
      case OpFamily::scale:
        if (!std::isfinite(n_.factor))
          fail("/factor", "expected a finite number, got " + std::to_string(n_.factor));
        return in_[0];
      case OpFamily::dropout:
        if (!(n_.p >= 0.0 && n_.p < 1.0))
          fail("/p", "expected a probability 0 <= p < 1, got " + std::to_string(n_.p));
        return in_[0];
      // Elementwise: the shape of its input. Of the attributes, only clip's bounds have a
      // rule beyond their JSON type.
      case OpFamily::unary_nonlinearity:
        if (n_.op == Op::clip) check_clip_bounds();
        return in_[0];
      case OpFamily::softmax: return softmax();
      case OpFamily::reduction: return reduce();
      case OpFamily::shape_op:
        switch (family_member<ShapeOp>(n_.op)) {
          case ShapeOp::transpose: return transpose();
          case ShapeOp::reshape: return reshape();
          case ShapeOp::slice: {
            Shape out;
            for (const SliceAxis& s : slice_layout(n_, in_[0], where_)) out.push_back(s.count);
            return out;
          }
          case ShapeOp::expand:
            for (int64_t d : n_.shape)
              if (d <= 0 || d > kMaxElements)
                fail("/shape", "expected entries 1 ... 2^31, got " + std::to_string(d));
            return broadcast_shapes(in_[0], n_.shape, where_ + "/shape");
          case ShapeOp::pad: {
            Shape out = in_[0];
            const std::vector<PadAxis> l = pad_layout(n_, in_[0], where_);
            for (size_t a = 0; a < out.size(); ++a) out[a] += l[a].before + l[a].after;
            return out;
          }
        }
        break;
      case OpFamily::select:
        check_where_condition(n_, where_);
        return broadcast_shapes(broadcast_shapes(n_.condition_shape, in_[0], where_ + "/inputs"),
                                in_[1], where_ + "/inputs");
      case OpFamily::concat: return concat();
      case OpFamily::center:
        axes_of(in_[0]);
        return in_[0];
      case OpFamily::norm: return norm();
      case OpFamily::opaque: return opaque();
    }
    throw InternalError("infer_shape: bad op");
  }

 private:
  [[noreturn]] void fail(const std::string& at, const std::string& what) const {
    throw ModelError(where_ + at, what);
  }

  int64_t rank(size_t k) const { return static_cast<int64_t>(in_[k].size()); }

  void check_clip_bounds() const {
    if (std::isnan(n_.min) || std::isnan(n_.max) || n_.min > n_.max)
      fail("/min", "expected min <= max, got min " + std::to_string(n_.min) + " and max " +
                       std::to_string(n_.max));
    if (std::isinf(n_.min) && std::isinf(n_.max))
      fail("", "clip without min and max is the identity: expected at least one bound");
  }

  // A softmax's mask (a condition, as where's) broadcasts to its input without enlarging
  // it, and keeps at least one position of every row: the softmax of a row with nothing
  // kept is 0/0.
  Shape softmax() const {
    const int64_t axis = normalize_axis(n_.axis, rank(0), where_ + "/axis");
    if (!is_masked_softmax(n_)) return in_[0];
    check_where_condition(n_, where_);
    if (broadcast_shapes(n_.condition_shape, in_[0], where_ + "/condition_shape") != in_[0])
      fail("/condition_shape", "the mask " + to_string(n_.condition_shape) +
                                   " does not broadcast to the input " + to_string(in_[0]));
    const Shape& cs = n_.condition_shape;
    const int64_t ca = axis - (rank(0) - int64_t(cs.size()));  // the axis in the mask
    const std::vector<int64_t> st = strides_of(cs);
    const int64_t len = ca >= 0 ? cs[size_t(ca)] : 1, step = ca >= 0 ? st[size_t(ca)] : 1;
    for (size_t i = 0; i < n_.condition.size(); ++i) {
      if (ca >= 0 && (int64_t(i) / step) % len != 0) continue;  // one row start each
      bool kept = false;
      for (int64_t j = 0; j < len && !kept; ++j) kept = n_.condition[size_t(int64_t(i) + j * step)] != 0;
      if (!kept)
        fail("/condition", "the mask keeps no position of the row starting at element " +
                               std::to_string(i) + ": a softmax over no position is undefined");
    }
    return in_[0];
  }

  std::string input_desc(size_t k) const {
    return "input '" + n_.inputs[k] + "' of shape " + to_string(in_[k]);
  }

  void check_arity() const {
    const OpInfo& info = op_info(n_.op);
    const int count = static_cast<int>(in_.size());
    if (count < info.min_inputs || (info.max_inputs >= 0 && count > info.max_inputs))
      fail("/inputs", std::string(info.name) + " takes " +
                          (info.max_inputs < 0 ? "at least " + std::to_string(info.min_inputs)
                                               : std::to_string(info.max_inputs)) +
                          " inputs, got " + std::to_string(count));
    if (n_.inputs.size() != in_.size())
      throw InternalError("infer_shape: " + std::to_string(in_.size()) + " shapes for " +
                          std::to_string(n_.inputs.size()) + " inputs of '" + n_.name + "'");
  }

  // A param attribute set on an op that has no such attribute is an error, not ignored.
  void check_param_attrs_apply() const {
    const std::string op(op_name(n_.op));
    for (const auto& [attr, pname] : n_.param_attrs()) {
      const std::string top = attr.substr(0, attr.find('/'));
      if (!op_attr(n_.op, top)) fail("/" + attr, "op " + op + " has no attribute '" + top + "'");
    }
    if (n_.norm && !op_attr(n_.op, "norm")) fail("/norm", "op " + op + " has no attribute 'norm'");
  }

  // Integer ids (index inputs) feed `embedding` only, and `embedding` reads only them.
  void check_index_inputs() const {
    for (size_t k = 0; k < n_.inputs.size(); ++k) {
      const Input* in = find_input(g_, n_.inputs[k]);
      const bool is_index = in && in->dtype == DType::index;
      if (n_.op == Op::embedding) {
        if (!is_index)
          fail("/inputs/" + std::to_string(k),
               "embedding reads integer ids: expected a graph input of dtype index, got " +
                   std::string(in ? "the float input '" : "the float value '") + n_.inputs[k] +
                   "'");
      } else if (is_index && n_.op != Op::opaque) {
        fail("/inputs/" + std::to_string(k),
             "'" + n_.inputs[k] + "' is an index input (integer ids); only embedding may read "
             "it, not " + std::string(op_name(n_.op)));
      }
    }
  }

  // The shape of the param named by attribute `attr`; empty optional name -> nullptr.
  const Shape* param_shape(const std::string& attr, const std::string& pname) const {
    if (pname.empty()) return nullptr;
    const Param* p = find_param(g_, pname);
    if (!p) fail("/" + attr, "'" + pname + "' is not a param of the model");
    return &p->shape;
  }

  void require(const std::string& attr, const std::string& pname) const {
    if (pname.empty()) fail("/" + attr, "missing required param attribute '" + attr + "'");
  }

  // Checks the param of `attr` (if named) has shape `want`; `why` explains `want`.
  void expect_param(const std::string& attr, const std::string& pname, const Shape& want,
                    const std::string& why) const {
    const Shape* s = param_shape(attr, pname);
    if (s && *s != want)
      fail("/" + attr, "param '" + pname + "' has shape " + to_string(*s) + ", expected " +
                           to_string(want) + " (" + why + ")");
  }

  void expect_rank(size_t k, int64_t want, const std::string& layout) const {
    if (rank(k) != want)
      fail("/inputs/" + std::to_string(k), "expected a rank-" + std::to_string(want) + " " +
                                               layout + ", got " + input_desc(k));
  }

  void check_eps(double eps, const std::string& at) const {
    if (!(std::isfinite(eps) && eps >= 0.0))
      fail(at, "expected a finite eps >= 0, got " + std::to_string(eps));
  }

  Axes axes_of(const Shape& x) const {
    if (n_.axes.empty()) fail("/axes", "expected at least one axis");
    return normalize_axes(n_.axes, static_cast<int64_t>(x.size()), where_ + "/axes");
  }

  Shape linear() const {
    const Shape& x = in_[0];
    if (x.empty()) fail("/inputs/0", "expected x [..., in], got a scalar");
    require("weight", n_.weight);
    const Shape& w = *param_shape("weight", n_.weight);
    if (w.size() != 2 || w[1] != x.back())
      fail("/weight", "param '" + n_.weight + "' has shape " + to_string(w) +
                          ", expected [out, " + std::to_string(x.back()) + "] for " +
                          input_desc(0));
    expect_param("bias", n_.bias, {w[0]}, "[out]");
    Shape out = x;
    out.back() = w[0];
    return out;
  }

  Shape matmul() const {
    for (size_t k = 0; k < 2; ++k)
      if (rank(k) < 2)
        fail("/inputs/" + std::to_string(k),
             "matmul expects operands of rank >= 2, got " + input_desc(k));
    const Shape& a = in_[0];
    const Shape& b = in_[1];
    const int64_t m = a[a.size() - 2], ka = a.back();
    const int64_t kb = n_.transpose_b ? b.back() : b[b.size() - 2];
    const int64_t n = n_.transpose_b ? b[b.size() - 2] : b.back();
    if (ka != kb)
      fail("/inputs", "inner dimensions differ: a " + to_string(a) + " has k = " +
                          std::to_string(ka) + ", b " + to_string(b) +
                          (n_.transpose_b ? " (transpose_b)" : "") + " has k = " +
                          std::to_string(kb));
    Shape out = broadcast_shapes(Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2),
                                 where_ + "/inputs");
    out.push_back(m);
    out.push_back(n);
    return out;
  }

  Shape embedding() const {
    require("weight", n_.weight);
    const Shape& w = *param_shape("weight", n_.weight);
    if (w.size() != 2) fail("/weight", "param '" + n_.weight + "' has shape " + to_string(w) +
                                           ", expected [num, dim]");
    const Input* ids = find_input(g_, n_.inputs[0]);  // an index input: checked above
    if (ids->range > w[0])
      fail("/weight", "param '" + n_.weight + "' has " + std::to_string(w[0]) +
                          " rows, but ids of input '" + ids->name + "' range up to " +
                          std::to_string(ids->range - 1));
    Shape out = in_[0];
    out.push_back(w[1]);
    return out;
  }

  // conv1d (spatial = 1) and conv2d (spatial = 2), as PyTorch.
  Shape conv(int spatial) const {
    const Shape& x = in_[0];
    const std::string layout = spatial == 1 ? "[N, C, L]" : "[N, C, H, W]";
    expect_rank(0, 2 + spatial, layout);
    require("weight", n_.weight);
    const Shape& w = *param_shape("weight", n_.weight);
    if (n_.groups < 1) fail("/groups", "expected groups >= 1, got " + std::to_string(n_.groups));
    const int64_t c = x[1];
    if (c % n_.groups != 0)
      fail("/groups", "groups = " + std::to_string(n_.groups) + " does not divide the " +
                          std::to_string(c) + " input channels of " + input_desc(0));
    const std::string wlayout = spatial == 1 ? "[out, C/groups, k]" : "[out, C/groups, kh, kw]";
    if (static_cast<int>(w.size()) != 2 + spatial || w[1] != c / n_.groups)
      fail("/weight", "param '" + n_.weight + "' has shape " + to_string(w) + ", expected " +
                          wlayout + " with C/groups = " + std::to_string(c / n_.groups));
    if (w[0] % n_.groups != 0)
      fail("/groups", "groups = " + std::to_string(n_.groups) + " does not divide the " +
                          std::to_string(w[0]) + " output channels of weight '" + n_.weight +
                          "'");
    expect_param("bias", n_.bias, {w[0]}, "[out]");
    // Entries up to 2^31 (like dims) keep the span below in range: at most 2^62.
    auto per_axis = [&](const std::vector<int64_t>& v, const char* attr, int64_t min) {
      if (v.size() != 1 && static_cast<int>(v.size()) != spatial)
        fail(std::string("/") + attr, "expected one entry or " + std::to_string(spatial) +
                                          ", got " + std::to_string(v.size()));
      for (int64_t e : v)
        if (e < min || e > kMaxElements)
          fail(std::string("/") + attr, "expected entries from " + std::to_string(min) +
                                            " to 2^31, got " + std::to_string(e));
      return [v](int i) { return v.size() == 1 ? v[0] : v[i]; };
    };
    auto stride = per_axis(n_.stride, "stride", 1);
    auto padding = per_axis(n_.padding, "padding", 0);
    auto dilation = per_axis(n_.dilation, "dilation", 1);
    Shape out = {x[0], w[0]};
    for (int i = 0; i < spatial; ++i) {
      const int64_t len = x[2 + i], k = w[2 + i];
      const int64_t span = len + 2 * padding(i) - dilation(i) * (k - 1) - 1;
      if (span < 0)
        fail("/weight", "kernel of size " + std::to_string(k) + " with dilation " +
                            std::to_string(dilation(i)) + " does not fit spatial axis " +
                            std::to_string(2 + i) + " of " + input_desc(0) +
                            " with padding " + std::to_string(padding(i)));
      out.push_back(span / stride(i) + 1);
    }
    return out;
  }

  Shape rnn() const {
    expect_rank(0, 3, "[N, T, F]");
    const Shape& x = in_[0];
    require("weight_ih", n_.weight_ih);
    require("weight_hh", n_.weight_hh);
    const Shape& wih = *param_shape("weight_ih", n_.weight_ih);
    if (wih.size() != 2 || wih[1] != x[2])
      fail("/weight_ih", "param '" + n_.weight_ih + "' has shape " + to_string(wih) +
                             ", expected [H, " + std::to_string(x[2]) + "] for " +
                             input_desc(0));
    const int64_t h = wih[0];
    expect_param("weight_hh", n_.weight_hh, {h, h}, "[H, H] with H = " + std::to_string(h));
    expect_param("bias", n_.bias, {h}, "[H]");
    if (n_.activation != "tanh")
      fail("/activation", "expected \"tanh\", got \"" + n_.activation + "\"");
    if (n_.norm) {
      if (n_.norm->kind != Op::layer_norm && n_.norm->kind != Op::rms_norm)
        fail("/norm", "expected a layer_norm or rms_norm, got " +
                          std::string(op_name(n_.norm->kind)));
      check_eps(n_.norm->eps, "/norm/eps");
      expect_param("norm/weight", n_.norm->weight, {h}, "[H]");
      expect_param("norm/bias", n_.norm->bias, {h}, "[H]");
    }
    return {x[0], x[1], h};
  }

  // lstm, gru in ONNX's layout: x [T, N, F], weights [D, G·H, F] and [D, G·H, H], bias
  // [D, 2·G·H], initial states [D, N, H]; y [T, D, N, H], y_h and y_c [D, N, H].
  Shape gated_recurrent() const {
    const bool lstm = n_.op == Op::lstm;
    const int64_t gates = lstm ? 4 : 3;
    expect_rank(0, 3, "[T, N, F]");
    const Shape& x = in_[0];
    const int64_t t = x[0], batch = x[1];
    int64_t dirs = 1;
    if (n_.direction == "bidirectional")
      dirs = 2;
    else if (n_.direction != "forward" && n_.direction != "reverse")
      fail("/direction", "expected \"forward\", \"reverse\" or \"bidirectional\", got \"" +
                             n_.direction + "\"");
    require("weight_ih", n_.weight_ih);
    require("weight_hh", n_.weight_hh);
    const Shape& wih = *param_shape("weight_ih", n_.weight_ih);
    const std::string g = std::to_string(gates);
    if (wih.size() != 3 || wih[0] != dirs || wih[1] % gates != 0 || wih[1] == 0 || wih[2] != x[2])
      fail("/weight_ih", "param '" + n_.weight_ih + "' has shape " + to_string(wih) +
                             ", expected [" + std::to_string(dirs) + ", " + g + "·H, " +
                             std::to_string(x[2]) + "] for " + input_desc(0) + " and direction \"" +
                             n_.direction + "\"");
    const int64_t h = wih[1] / gates;
    const std::string hs = "H = " + std::to_string(h);
    expect_param("weight_hh", n_.weight_hh, {dirs, gates * h, h}, "[D, " + g + "·H, H] with " + hs);
    expect_param("bias", n_.bias, {dirs, 2 * gates * h}, "[D, " + std::to_string(2 * gates) + "·H]");
    expect_param("initial_h", n_.initial_h, {dirs, batch, h}, "[D, N, H]");
    if (lstm) expect_param("initial_c", n_.initial_c, {dirs, batch, h}, "[D, N, H]");
    if (!n_.sequence_lens.empty()) {
      if (int64_t(n_.sequence_lens.size()) != batch)
        fail("/sequence_lens", "expected " + std::to_string(batch) + " lengths (one per batch entry of " +
                                   input_desc(0) + "), got " + std::to_string(n_.sequence_lens.size()));
      for (size_t k = 0; k < n_.sequence_lens.size(); ++k)
        if (n_.sequence_lens[k] < 1 || n_.sequence_lens[k] > t)
          fail("/sequence_lens/" + std::to_string(k), "expected a length in [1, " + std::to_string(t) +
                                                          "], got " + std::to_string(n_.sequence_lens[k]));
    }
    if (n_.output == "y") return {t, dirs, batch, h};
    if (n_.output == "y_h" || (lstm && n_.output == "y_c")) return {dirs, batch, h};
    fail("/output", std::string("expected \"y\", \"y_h\"") + (lstm ? " or \"y_c\"" : "") +
                        ", got \"" + n_.output + "\"");
  }

  Shape attention() const {
    expect_rank(0, 3, "[N, T, D]");
    const int64_t d = in_[0][2];
    if (n_.heads < 1) fail("/heads", "expected heads >= 1, got " + std::to_string(n_.heads));
    if (d % n_.heads != 0)
      fail("/heads", std::to_string(n_.heads) + " heads do not divide D = " +
                         std::to_string(d) + " of " + input_desc(0));
    const std::pair<const char*, const std::string*> mats[] = {
        {"wq", &n_.wq}, {"wk", &n_.wk}, {"wv", &n_.wv}, {"wo", &n_.wo}};
    for (const auto& [attr, pname] : mats) {
      require(attr, *pname);
      expect_param(attr, *pname, {d, d}, "[D, D] with D = " + std::to_string(d));
    }
    const std::pair<const char*, const std::string*> biases[] = {
        {"bq", &n_.bq}, {"bk", &n_.bk}, {"bv", &n_.bv}, {"bo", &n_.bo}};
    for (const auto& [attr, pname] : biases)
      expect_param(attr, *pname, {d}, "[D] with D = " + std::to_string(d));
    return in_[0];
  }

  Shape reduce() const {
    const Axes axes = axes_of(in_[0]);
    Shape out;
    for (int64_t i = 0; i < rank(0); ++i) {
      if (!std::binary_search(axes.begin(), axes.end(), i))
        out.push_back(in_[0][i]);
      else if (n_.keepdims)
        out.push_back(1);
    }
    return out;
  }

  Shape transpose() const {
    const int64_t r = rank(0);
    if (static_cast<int64_t>(n_.perm.size()) != r)
      fail("/perm", "expected a permutation of " + std::to_string(r) + " axes, got " +
                        std::to_string(n_.perm.size()) + " entries for " + input_desc(0));
    std::vector<bool> seen(r, false);
    Shape out;
    for (int64_t p : n_.perm) {
      const int64_t a = normalize_axis(p, r, where_ + "/perm");
      if (seen[a]) fail("/perm", "axis " + std::to_string(p) + " appears twice");
      seen[a] = true;
      out.push_back(in_[0][a]);
    }
    return out;
  }

  Shape reshape() const {
    Shape out = n_.shape;
    int64_t known = 1;
    int free_axis = -1;
    for (size_t i = 0; i < out.size(); ++i) {
      if (out[i] == -1) {
        if (free_axis >= 0) fail("/shape", "only one entry may be -1");
        free_axis = static_cast<int>(i);
      } else if (out[i] <= 0) {
        fail("/shape", "expected positive entries or -1, got " + std::to_string(out[i]));
      } else if (out[i] > kMaxElements / known) {
        fail("/shape", "shape " + to_string(n_.shape) + " has more than 2^31 elements");
      } else {
        known *= out[i];
      }
    }
    const int64_t total = numel(in_[0]);
    if (free_axis >= 0) {
      if (total % known != 0)
        fail("/shape", "cannot reshape " + input_desc(0) + " (" + std::to_string(total) +
                           " elements) to " + to_string(n_.shape));
      out[free_axis] = total / known;
    } else if (known != total) {
      fail("/shape", "cannot reshape " + input_desc(0) + " (" + std::to_string(total) +
                         " elements) to " + to_string(n_.shape) + " (" +
                         std::to_string(known) + " elements)");
    }
    return out;
  }

  // An op lnverify does not model: its output shape is given (from the exporter's shape
  // inference), its inputs may be anything, index inputs included.
  Shape opaque() const {
    if (n_.op_type.empty()) fail("/op_type", "expected the source op's name, got \"\"");
    Shape out = n_.shape;
    int64_t known = 1;
    for (int64_t d : out) {
      if (d <= 0) fail("/shape", "expected positive dimensions, got " + to_string(n_.shape));
      if (d > kMaxElements / known)
        fail("/shape", "shape " + to_string(n_.shape) + " has more than 2^31 elements");
      known *= d;
    }
    return out;
  }

  Shape concat() const {
    const int64_t r = rank(0);
    const int64_t axis = normalize_axis(n_.axis, r, where_ + "/axis");
    Shape out = in_[0];
    for (size_t k = 1; k < in_.size(); ++k) {
      bool ok = rank(k) == r;
      for (int64_t i = 0; ok && i < r; ++i) ok = i == axis || in_[k][i] == in_[0][i];
      if (!ok)
        fail("/inputs/" + std::to_string(k),
             "expected shape " + to_string(in_[0]) + " except along axis " +
                 std::to_string(n_.axis) + ", got " + input_desc(k));
      out[axis] += in_[k][axis];
    }
    return out;
  }

  Shape norm() const {
    const Axes axes = axes_of(in_[0]);
    check_eps(n_.eps, "/eps");
    Shape affine;
    for (int64_t a : axes) affine.push_back(in_[0][a]);
    const std::string why = "the input's dims over axes, for " + input_desc(0);
    expect_param("weight", n_.weight, affine, why);
    expect_param("bias", n_.bias, affine, why);
    return in_[0];
  }

  const Graph& g_;
  const Node& n_;
  const std::vector<Shape>& in_;
  const std::string where_;
};

}  // namespace

Shape infer_shape(const Graph& g, const Node& node, const std::vector<Shape>& input_shapes) {
  Shape out = Rules(g, node, input_shapes).infer();
  // Each rule keeps its own arithmetic in range (inputs are bounded the same way); a
  // product of bounded inputs (a broadcast, a matmul, a padded conv) can still be huge.
  if (!within_max_elements(out))
    throw ModelError("node '" + node.name + "'",
                     "its output shape " + to_string(out) + " has more than 2^31 elements");
  return out;
}

}  // namespace lnv
