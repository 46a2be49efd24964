#include "core/graph.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace lnv {
namespace {

bool valid_name(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == ':' || c == '/' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string node_where(const Graph& g, size_t i) {
  return "/nodes/" + std::to_string(i) + " (node '" + g.nodes[i].name + "')";
}

// The nodes Kahn's order left out (indegree > 0) are on a cycle or downstream of one.
// Each reads another one left out, so walking back through such inputs comes round to a
// node twice; the nodes between the two visits are a cycle. Thrown as an error about the
// whole model ("/"), which load_model reports with the file's name.
[[noreturn]] void throw_cycle(const Graph& g, const std::vector<std::vector<int32_t>>& preds,
                              const std::vector<int>& indegree) {
  auto left_out = [&](int32_t i) { return indegree[i] > 0; };
  std::vector<int> seen_at(g.nodes.size(), -1);
  std::vector<int32_t> walk;  // each reads the next
  int32_t i = 0;
  while (!left_out(i)) ++i;
  while (seen_at[i] < 0) {
    seen_at[i] = static_cast<int>(walk.size());
    walk.push_back(i);
    i = *std::find_if(preds[i].begin(), preds[i].end(), left_out);
  }
  // In data-flow order from i: i, then the walk after it backwards, then i again.
  std::string flow = "'" + g.nodes[i].name + "'";
  for (size_t k = walk.size(); k-- > size_t(seen_at[i]);)
    flow += " -> '" + g.nodes[walk[k]].name + "'";
  throw ModelError("/", "the graph has a cycle through node '" + g.nodes[i].name + "' (" +
                            node_where(g, i) + "): " + flow + ", each an input of the next");
}

}  // namespace

std::vector<std::pair<std::string, std::string>> Node::param_attrs() const {
  std::vector<std::pair<std::string, std::string>> out;
  auto add = [&](const char* attr, const std::string& v) {
    if (!v.empty()) out.emplace_back(attr, v);
  };
  add("weight", weight);
  add("bias", bias);
  add("weight_ih", weight_ih);
  add("weight_hh", weight_hh);
  add("wq", wq);
  add("wk", wk);
  add("wv", wv);
  add("wo", wo);
  add("bq", bq);
  add("bk", bk);
  add("bv", bv);
  add("bo", bo);
  add("initial_h", initial_h);
  add("initial_c", initial_c);
  if (norm) {
    add("norm/weight", norm->weight);
    add("norm/bias", norm->bias);
  }
  return out;
}

void Graph::finalize() {
  finalized_ = false;
  index_.clear();
  auto declare = [&](const std::string& n, ValueRef r, const std::string& where) {
    if (!valid_name(n))
      throw ModelError(where, "invalid name '" + n +
                                  "' (use letters, digits and _ . : / - only, not empty)");
    auto [it, fresh] = index_.emplace(n, r);
    if (!fresh) {
      const ValueRef first = it->second;
      const char* list = first.kind == ValueRef::Kind::input   ? "/inputs/"
                         : first.kind == ValueRef::Kind::param ? "/params/"
                                                               : "/nodes/";
      throw ModelError(where, "duplicate name '" + n + "' (first used at " + list +
                                  std::to_string(first.index) + ")");
    }
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string where = "/inputs/" + std::to_string(i);
    declare(inputs[i].name, {ValueRef::Kind::input, int32_t(i)}, where + "/name");
    for (int64_t d : inputs[i].shape)
      if (d <= 0) throw ModelError(where + "/shape", "dimensions must be positive");
    if (inputs[i].dtype == DType::index && inputs[i].range <= 0)
      throw ModelError(where + "/range", "an index input needs a positive range");
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string where = "/params/" + std::to_string(i);
    const Param& p = params[i];
    declare(p.name, {ValueRef::Kind::param, int32_t(i)}, where + "/name");
    for (int64_t d : p.shape)
      if (d <= 0) throw ModelError(where + "/shape", "dimensions must be positive");
    if (p.values_deferred) {  // checked on load from the stored data
      LNV_INTERNAL_ASSERT(p.values.empty() && (p.lazy || p.source == ParamSource::file),
                          "param '" + p.name + "' is deferred but holds values or has no source");
      continue;
    }
    if (static_cast<int64_t>(p.values.size()) != numel(p.shape))
      throw ModelError(where, "param '" + p.name + "' has " + std::to_string(p.values.size()) +
                                  " values but shape " + to_string(p.shape) + " needs " +
                                  std::to_string(numel(p.shape)));
    for (size_t k = 0; k < p.values.size(); ++k)
      if (!std::isfinite(p.values[k]))
        throw ModelError(where, "param '" + p.name + "' has a non-finite value (" +
                                    std::to_string(p.values[k]) + ") at flat index " +
                                    std::to_string(k));
  }
  for (size_t i = 0; i < nodes.size(); ++i)
    declare(nodes[i].name, {ValueRef::Kind::node, int32_t(i)}, node_where(*this, i) + "/name");

  // Resolve inputs and param attributes; check arity.
  node_inputs.assign(nodes.size(), {});
  std::vector<std::vector<int32_t>> preds(nodes.size());
  consumers.assign(nodes.size(), {});
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    const OpInfo& info = op_info(n.op);
    const int count = static_cast<int>(n.inputs.size());
    if (count < info.min_inputs || (info.max_inputs >= 0 && count > info.max_inputs))
      throw ModelError(node_where(*this, i) + "/inputs",
                       std::string(info.name) + " takes " +
                           (info.max_inputs < 0 ? "at least " + std::to_string(info.min_inputs)
                            : info.min_inputs == info.max_inputs
                                ? std::to_string(info.min_inputs)
                                : std::to_string(info.min_inputs) + " to " +
                                      std::to_string(info.max_inputs)) +
                           " inputs, got " + std::to_string(count));
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      auto it = index_.find(n.inputs[k]);
      if (it == index_.end())
        throw ModelError(node_where(*this, i) + "/inputs/" + std::to_string(k),
                         "unknown name '" + n.inputs[k] + "'");
      node_inputs[i].push_back(it->second);
      if (it->second.kind == ValueRef::Kind::node) {
        preds[i].push_back(it->second.index);
        consumers[it->second.index].push_back(int32_t(i));
      }
    }
    for (const auto& [attr, pname] : n.param_attrs()) {
      auto it = index_.find(pname);
      if (it == index_.end() || it->second.kind != ValueRef::Kind::param)
        throw ModelError(node_where(*this, i) + "/" + attr,
                         "'" + pname + "' is not a param of the model");
    }
  }

  // Topological order (Kahn); what is left over lies on a cycle.
  order.clear();
  std::vector<int> indegree(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) indegree[i] = static_cast<int>(preds[i].size());
  for (size_t i = 0; i < nodes.size(); ++i)
    if (indegree[i] == 0) order.push_back(int32_t(i));
  for (size_t head = 0; head < order.size(); ++head)
    for (int32_t c : consumers[order[head]])
      if (--indegree[c] == 0) order.push_back(c);
  if (order.size() != nodes.size()) throw_cycle(*this, preds, indegree);

  node_shapes.assign(nodes.size(), {});
  for (int32_t i : order) {
    std::vector<Shape> in;
    for (const ValueRef& r : node_inputs[i]) in.push_back(shape_of(r));
    try {
      node_shapes[i] = infer_shape(*this, nodes[i], in);
      // A matmul's CBWC centers a param operand: refused here, where the model is read,
      // rather than when a command first centers it.
      if (nodes[i].op == Op::matmul && nodes[i].cbwc) cbwc_matmul_operand(*this, i);
    } catch (const ModelError& e) {
      // infer_shape names the node as "node '<name>'<rest>"; re-anchor it at its JSON path.
      if (e.where().rfind("/nodes/", 0) == 0) throw;
      const std::string prefix = "node '" + nodes[i].name + "'";
      if (e.where().rfind(prefix, 0) == 0) {
        const std::string what = std::string(e.what()).substr(e.where().size() + 2);
        throw ModelError(node_where(*this, i) + e.where().substr(prefix.size()), what);
      }
      throw ModelError(node_where(*this, i), e.what());
    }
  }

  if (outputs.empty()) throw ModelError("/outputs", "a model needs at least one output");
  output_refs.clear();
  for (size_t k = 0; k < outputs.size(); ++k) {
    auto it = index_.find(outputs[k]);
    if (it == index_.end())
      throw ModelError("/outputs/" + std::to_string(k), "unknown name '" + outputs[k] + "'");
    output_refs.push_back(it->second);
  }
  finalized_ = true;
}

const ValueRef& Graph::ref(const std::string& n) const {
  auto it = index_.find(n);
  if (it == index_.end()) throw ModelError("", "unknown name '" + n + "'");
  return it->second;
}

int Graph::param_index(const std::string& n) const {
  if (n.empty()) return -1;
  const ValueRef& r = ref(n);
  if (r.kind != ValueRef::Kind::param) throw ModelError("", "'" + n + "' is not a param");
  return r.index;
}

int Graph::node_index(const std::string& n) const {
  const ValueRef& r = ref(n);
  if (r.kind != ValueRef::Kind::node) throw ModelError("", "'" + n + "' is not a node");
  return r.index;
}

const Shape& Graph::shape_of(const ValueRef& r) const {
  switch (r.kind) {
    case ValueRef::Kind::input: return inputs[r.index].shape;
    case ValueRef::Kind::param: return params[r.index].shape;
    case ValueRef::Kind::node: return node_shapes[r.index];
  }
  throw InternalError("bad ValueRef kind");
}

std::vector<SliceAxis> slice_layout(const Node& n, const Shape& in, const std::string& where) {
  const int64_t R = static_cast<int64_t>(in.size());
  std::vector<SliceAxis> out(in.size());
  for (int64_t a = 0; a < R; ++a) out[a] = {0, 1, in[a]};
  const size_t k = n.axes.size();
  if (k == 0) throw ModelError(where + "/axes", "expected at least one axis");
  if (n.starts.size() != k || n.ends.size() != k || (!n.steps.empty() && n.steps.size() != k))
    throw ModelError(where + "/starts", "expected starts, ends (and steps, when given) with one "
                                        "entry per axis of axes (" + std::to_string(k) + ")");
  std::vector<bool> seen(in.size(), false);
  for (size_t i = 0; i < k; ++i) {
    const int64_t a = normalize_axis(n.axes[i], R, where + "/axes");
    if (seen[a]) throw ModelError(where + "/axes", "axis " + std::to_string(n.axes[i]) + " is repeated");
    seen[a] = true;
    const int64_t d = in[a];
    int64_t step = n.steps.empty() ? 1 : n.steps[i];
    if (step == 0) throw ModelError(where + "/steps", "expected a nonzero step");
    // A step longer than the axis takes at most one index, as a step of d does.
    step = std::clamp<int64_t>(step, -d, d);
    // Negative indices count from the end (without overflow: below -d is before the start).
    auto from_end = [d](int64_t v) { return v >= 0 ? v : (v < -d ? -1 : v + d); };
    int64_t s = from_end(n.starts[i]), e = from_end(n.ends[i]);
    int64_t count = 0;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, d);
      e = std::clamp<int64_t>(e, 0, d);
      count = e > s ? (e - s + step - 1) / step : 0;
    } else {
      s = std::clamp<int64_t>(s, 0, d - 1);
      e = std::clamp<int64_t>(e, -1, d - 1);
      count = s > e ? (s - e - step - 1) / -step : 0;
    }
    if (count == 0)
      throw ModelError(where + "/starts", "the slice takes no element of axis " +
                                              std::to_string(n.axes[i]) + " (size " +
                                              std::to_string(d) + ")");
    out[a] = {s, step, count};
  }
  return out;
}

std::vector<PadAxis> pad_layout(const Node& n, const Shape& in, const std::string& where) {
  const size_t R = in.size();
  if (n.pads.size() != 2 * R)
    throw ModelError(where + "/pads", "expected 2 entries per axis of the input (" +
                                          std::to_string(2 * R) + "), got " +
                                          std::to_string(n.pads.size()));
  for (int64_t v : n.pads)
    if (v < 0 || v > kMaxElements)
      throw ModelError(where + "/pads", "expected entries 0 ... 2^31, got " + std::to_string(v));
  if (!std::isfinite(n.value))
    throw ModelError(where + "/value", "expected a finite number");
  std::vector<PadAxis> out(R);
  for (size_t a = 0; a < R; ++a) out[a] = {n.pads[a], n.pads[a + R]};
  return out;
}

void check_where_condition(const Node& n, const std::string& where) {
  if (!within_max_elements(n.condition_shape))
    throw ModelError(where + "/condition_shape",
                     "expected positive dims and at most 2^31 elements, got " +
                         to_string(n.condition_shape));
  if (static_cast<int64_t>(n.condition.size()) != numel(n.condition_shape))
    throw ModelError(where + "/condition",
                     "expected " + std::to_string(numel(n.condition_shape)) +
                         " entries (condition_shape " + to_string(n.condition_shape) + "), got " +
                         std::to_string(n.condition.size()));
  for (size_t i = 0; i < n.condition.size(); ++i)
    if (n.condition[i] != 0 && n.condition[i] != 1)
      throw ModelError(where + "/condition/" + std::to_string(i),
                       "expected 0 or 1, got " + std::to_string(n.condition[i]));
}

int64_t cbwc_attr_axis(Op op, const std::string& attr) {
  // Only a weighted producer's weight matrix is centered.
  if (!is_weighted(op)) return -1;
  switch (family_member<WeightedOp>(op)) {
    case WeightedOp::linear:
    case WeightedOp::conv1d:
    case WeightedOp::conv2d: return attr == "weight" || attr == "bias" ? 0 : -1;
    case WeightedOp::embedding: return attr == "weight" ? 1 : -1;
    case WeightedOp::rnn:
      return attr == "weight_ih" || attr == "weight_hh" || attr == "bias" ? 0 : -1;
    case WeightedOp::attention: return attr == "wo" || attr == "bo" ? 0 : -1;
    case WeightedOp::lstm:  // gated: no centering of the weights reaches the output linearly
    case WeightedOp::gru: return -1;
    case WeightedOp::matmul: return -1;  // centers an operand, not an attribute (below)
  }
  return -1;
}

MatmulCentering cbwc_matmul_operand(const Graph& g, int32_t node) {
  const Node& n = g.nodes[node];
  const auto& in = g.node_inputs[node];
  if (in[1].kind == ValueRef::Kind::param) {
    const int64_t r = static_cast<int64_t>(g.shape_of(in[1]).size());
    return {1, n.transpose_b ? r - 2 : r - 1};
  }
  if (in[0].kind == ValueRef::Kind::param)
    return {0, static_cast<int64_t>(g.shape_of(in[0]).size()) - 2};
  throw ModelError("node '" + n.name + "'/cbwc",
                   "CBWC on a matmul needs a param operand to center, but both inputs are values");
}

std::vector<double> scaled_values(const Param& p) {
  std::vector<double> out(p.values);
  if (p.scale.empty()) return out;
  LNV_INTERNAL_ASSERT(p.scale_axis >= 0 && p.scale_axis < int64_t(p.shape.size()) &&
                          int64_t(p.scale.size()) == p.shape[size_t(p.scale_axis)],
                      "param '" + p.name + "': its scale does not fit its axis");
  int64_t inner = 1;
  for (size_t a = size_t(p.scale_axis) + 1; a < p.shape.size(); ++a) inner *= p.shape[a];
  const int64_t n = p.shape[size_t(p.scale_axis)];
  for (size_t f = 0; f < out.size(); ++f) out[f] *= p.scale[size_t((int64_t(f) / inner) % n)];
  return out;
}

std::vector<double> effective_values(const Param& p) {
  LNV_INTERNAL_ASSERT(!p.values_deferred,
                      "effective_values of param '" + p.name + "', whose values were not loaded");
  if (!p.scale.empty()) {
    Param scaled = p;
    scaled.values = scaled_values(p);
    scaled.scale.clear();
    return effective_values(scaled);
  }
  if (p.center_axes.empty()) return p.values;
  // Center over center_axes: subtract the mean of each fiber spanned by those axes.
  const Shape& s = p.shape;
  std::vector<bool> centered(s.size(), false);
  for (int64_t a : p.center_axes) centered[a] = true;
  int64_t group = 1;
  for (size_t a = 0; a < s.size(); ++a)
    if (centered[a]) group *= s[a];
  std::vector<double> sums(p.values.size() / group, 0.0);
  // The fiber (key) of each flat index in row-major order, kept by an odometer over the
  // multi-index (no division per element): key = sum over uncentered axes of c_a * kst[a].
  const size_t rank = s.size();
  std::vector<int64_t> kst(rank, 0);
  for (int64_t a = int64_t(rank) - 1, k = 1; a >= 0; --a)
    if (!centered[a]) {
      kst[a] = k;
      k *= s[a];
    }
  auto for_each_key = [&](auto&& visit) {
    std::vector<int64_t> idx(rank, 0);
    int64_t key = 0;
    for (int64_t f = 0; f < int64_t(p.values.size()); ++f) {
      visit(f, key);
      for (int64_t a = int64_t(rank) - 1; a >= 0; --a) {
        key += kst[a];
        if (++idx[a] < s[a]) break;
        key -= s[a] * kst[a];
        idx[a] = 0;
      }
    }
  };
  for_each_key([&](int64_t f, int64_t key) { sums[key] += p.values[f]; });
  std::vector<double> out(p.values);
  for_each_key([&](int64_t f, int64_t key) { out[f] -= sums[key] / double(group); });
  return out;
}

}  // namespace lnv
