// The LibTorch engine (torch/engine.h): one switch over ops on ATen tensors; reverse mode
// by ATen autograd.
#include "torch/engine.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "core/error.h"
#include "core/eval/evaluator.h"
#include "core/model_json.h"
#include "core/random.h"
#include "torch/kernels/norm_kernels.h"

namespace lnv::torch_engine {
namespace {

at::ScalarType scalar_type(Precision p) { return p == Precision::f32 ? at::kFloat : at::kDouble; }

at::Tensor from_doubles(const Shape& shape, const std::vector<double>& v, at::ScalarType t) {
  at::Tensor d = at::from_blob(const_cast<double*>(v.data()), at::IntArrayRef(shape), at::kDouble)
                     .clone();
  return t == at::kDouble ? d : d.to(t);
}

Tensor<double> to_lnv(const at::Tensor& t) {
  const at::Tensor d = t.detach().to(at::kDouble).contiguous();
  Tensor<double> out;
  out.shape = d.sizes().vec();
  out.data.assign(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
  return out;
}

std::string where_of(const Node& n) { return "node '" + n.name + "'"; }

// A unary op outside its domain (sqrt of a negative value, reciprocal of 0) is an error,
// as in the exact evaluators, not a NaN or an infinity passed on.
void refuse_outside_domain(const Node& n, const at::Tensor& outside, const char* what) {
  if (at::any(outside).item<bool>())
    throw ModelError(where_of(n), std::string(what) + " (some element is outside the domain)");
}

// An `opaque` node: what it computes is not known (as the exact evaluators say).
NotEvaluableError not_evaluable(const Node& n) {
  return NotEvaluableError(where_of(n), "cannot evaluate op '" + n.op_type +
                                            "' (imported as opaque: lnverify does not model "
                                            "what it computes)");
}

// The axis CBWC centers a param attribute over (core/graph.h), or -1.
int64_t cbwc_axis(const Node& n, const std::string& attr) {
  return n.cbwc ? cbwc_attr_axis(n.op, attr) : -1;
}

at::Tensor centered(const at::Tensor& t, at::IntArrayRef axes) {
  return t - t.mean(axes, /*keepdim=*/true);
}

// Per-spatial-axis conv attribute (one entry applies to every axis).
std::vector<int64_t> per_axis(const std::vector<int64_t>& v, int spatial) {
  return v.size() == 1 ? std::vector<int64_t>(spatial, v[0]) : v;
}

bool trailing(const Axes& axes, int64_t rank) {
  for (size_t k = 0; k < axes.size(); ++k)
    if (axes[k] != rank - static_cast<int64_t>(axes.size()) + static_cast<int64_t>(k))
      return false;
  return true;
}

// A norm's weight/bias (shape of the input over `axes`) viewed to broadcast against x.
at::Tensor over_axes(const at::Tensor& p, int64_t rank, const Axes& axes) {
  std::vector<int64_t> shape(rank, 1);
  for (size_t k = 0; k < axes.size(); ++k) shape[axes[k]] = p.size(static_cast<int64_t>(k));
  return p.reshape(shape);
}

at::Tensor layer_norm(const at::Tensor& x, const Axes& axes, const at::Tensor& w,
                      const at::Tensor& b, double eps) {
  const int64_t rank = x.dim();
  std::vector<int64_t> normalized;
  for (int64_t a : axes) normalized.push_back(x.size(a));
  if (trailing(axes, rank)) return at::layer_norm(x, normalized, w, b, eps);
  // Move the normalized axes to the end (in order), normalize, move them back.
  std::vector<int64_t> perm, inverse(rank);
  for (int64_t a = 0; a < rank; ++a)
    if (!std::binary_search(axes.begin(), axes.end(), a)) perm.push_back(a);
  perm.insert(perm.end(), axes.begin(), axes.end());
  for (int64_t k = 0; k < rank; ++k) inverse[perm[k]] = k;
  return at::layer_norm(x.permute(perm), normalized, w, b, eps).permute(inverse);
}

at::Tensor rms_norm_composed(const at::Tensor& x, const Axes& axes, const at::Tensor& w,
                             const at::Tensor& b, double eps) {
  at::Tensor y = x * at::rsqrt(x.square().mean(axes, /*keepdim=*/true) + eps);
  if (w.defined()) y = y * over_axes(w, x.dim(), axes);
  if (b.defined()) y = y + over_axes(b, x.dim(), axes);
  return y;
}

}  // namespace

struct Engine::Impl {
  const Graph* g;
  EngineOptions opt;
  at::ScalarType dt;
  std::vector<at::Tensor> stored;  // per param, in dt, as stored (before center_axes)

  // The current run.
  RunOptions run;
  bool grad = false;
  std::vector<at::Tensor> leaves;  // grad runs: the stored params, requiring grad
  std::vector<at::Tensor> inputs;  // float inputs in dt, index inputs as int64
  std::vector<at::Tensor> values;  // per node
  std::vector<at::Tensor> outputs;

  // Gradient-free runs: param reads computed once (in double, then rounded to dt), and
  // per-node output buffers reused from run to run.
  std::vector<at::Tensor> effective_cache;
  std::map<std::pair<int32_t, std::string>, at::Tensor> read_cache;
  std::vector<at::Tensor> buffers;

  bool timing = false;
  std::vector<int> timing_slot;  // per node: index into timings, -1 for non-norms
  std::vector<NormTiming> timings;

  // Residual add + norm. Per add node: the norm node (layer_norm or rms_norm over
  // trailing axes; the first in order) that reads it when both operands have the add's
  // shape, or -1. In float32 inference an rms_norm there is computed with its add in one
  // kernel (kernels::add_rms_norm), its output kept here (per node) until node() asks.
  // While timing, such an add's time counts as its norm's (the fused call cannot be
  // split), so that original and folded models are timed alike at these sites.
  std::vector<int32_t> norm_of_add;
  std::vector<at::Tensor> fused_norm_out;

  // Moved biases (docs/spec/semantics.md, "Moving the bias"): the fold writes a reader R as
  // add(R.own, R.moved_bias), R.moved_bias = W·β a value of params only. In gradient-free
  // runs such an add whose first operand is a linear that nothing else reads takes that
  // value into the linear's bias once (addmm with b + W·β): no pass over the output and no
  // product W·β per run. Per add node: the linear absorbing it, or -1; per linear node: the
  // absorbed add's constant operand (node) and the bias it then uses.
  std::vector<int32_t> absorbed_by;
  std::vector<int32_t> absorbed_constant;
  std::vector<at::Tensor> absorbed_bias;
  std::vector<char> skip_no_grad;  // nodes only the absorbed biases read: not run again

  Impl(const Graph& graph, EngineOptions o) : g(&graph), opt(o), dt(scalar_type(o.precision)) {
    LNV_INTERNAL_ASSERT(graph.finalized(), "the torch engine needs a finalized graph");
    // A deferred param's values are read here, one param at a time, and not kept.
    for (const Param& p : graph.params)
      stored.push_back(p.values_deferred ? from_doubles(p.shape, read_values(p, graph.base_dir), dt)
                                         : from_doubles(p.shape, p.values, dt));
    effective_cache.resize(graph.params.size());
    buffers.resize(graph.nodes.size());
    timing_slot.assign(graph.nodes.size(), -1);
    for (int32_t i : graph.order) {
      const Node& n = graph.nodes[i];
      if (n.op != Op::layer_norm && n.op != Op::rms_norm) continue;
      timing_slot[i] = static_cast<int>(timings.size());
      timings.push_back({n.name, n.op, 0, 0, 0, 0.0});
    }
    plan_add_rms_norm_fusion();
    plan_bias_absorption();
  }

  // Which adds the linears before them absorb (see absorbed_by), their biases computed now
  // from the params (the param-only nodes evaluated once, in topological order).
  void plan_bias_absorption() {
    const Graph& graph = *g;
    const size_t n = graph.nodes.size();
    absorbed_by.assign(n, -1);
    absorbed_constant.assign(n, -1);
    absorbed_bias.assign(n, at::Tensor());
    skip_no_grad.assign(n, 0);
    std::vector<char> param_only(n, 0);
    std::vector<int> readers(n, 0);
    for (int32_t i : graph.order) {
      const Node& node = graph.nodes[i];
      bool only = !graph.node_inputs[i].empty() && node.op != Op::dropout && node.op != Op::opaque;
      for (const ValueRef& r : graph.node_inputs[i]) {
        if (r.kind == ValueRef::Kind::node) {
          ++readers[r.index];
          only = only && param_only[r.index];
        } else if (r.kind != ValueRef::Kind::param) {
          only = false;
        }
      }
      param_only[i] = only;
    }
    for (const ValueRef& r : graph.output_refs)
      if (r.kind == ValueRef::Kind::node) readers[r.index] += 1;
    std::vector<int32_t> constants;
    for (int32_t j : graph.order) {
      if (graph.nodes[j].op != Op::add || graph.node_inputs[j].size() != 2) continue;
      const ValueRef& own = graph.node_inputs[j][0];
      const ValueRef& c = graph.node_inputs[j][1];
      if (own.kind != ValueRef::Kind::node || c.kind != ValueRef::Kind::node) continue;
      const int32_t l = own.index;
      if (graph.nodes[l].op != Op::linear || readers[l] != 1 || !param_only[c.index] ||
          param_only[l] || absorbed_constant[l] >= 0)
        continue;
      const Shape& ls = graph.node_shapes[l];
      const Shape& cs = graph.node_shapes[c.index];
      // The constant varies along the linear's output features only: [out] or [1, ..., out].
      if (ls.empty() || cs.empty() || cs.back() != ls.back() || numel(cs) != ls.back() ||
          graph.node_shapes[j] != ls)
        continue;
      absorbed_by[j] = l;
      absorbed_constant[l] = c.index;
      constants.push_back(c.index);
    }
    if (constants.empty()) return;
    // Evaluate the param-only nodes the constants need, once.
    c10::InferenceMode guard;
    grad = false;
    values.assign(n, at::Tensor());
    std::vector<char> needed(n, 0);
    for (int32_t c : constants) needed[c] = 1;
    for (auto it = graph.order.rbegin(); it != graph.order.rend(); ++it)
      if (needed[*it])
        for (const ValueRef& r : graph.node_inputs[*it])
          if (r.kind == ValueRef::Kind::node) needed[r.index] = 1;
    for (int32_t i : graph.order)
      if (needed[i]) values[i] = node(i);
    for (size_t l = 0; l < n; ++l) {
      if (absorbed_constant[l] < 0) continue;
      const Node& lin = graph.nodes[l];
      at::Tensor c = values[absorbed_constant[l]].reshape({-1});
      const at::Tensor b = read(int32_t(l), "bias", lin.bias);
      absorbed_bias[l] = (b.defined() ? b + c : c).contiguous();
    }
    // A param-only node read by nothing but absorbed constants (and such nodes) is skipped.
    std::vector<int> live_readers = readers;
    for (size_t j = 0; j < n; ++j)
      if (absorbed_by[j] >= 0) --live_readers[graph.node_inputs[j][1].index];
    for (auto it = graph.order.rbegin(); it != graph.order.rend(); ++it) {
      const int32_t i = *it;
      if (!param_only[i] || live_readers[i] > 0) continue;
      skip_no_grad[i] = 1;
      for (const ValueRef& r : graph.node_inputs[i])
        if (r.kind == ValueRef::Kind::node) --live_readers[r.index];
    }
    values.assign(n, at::Tensor());
  }

  void plan_add_rms_norm_fusion() {
    const Graph& graph = *g;
    norm_of_add.assign(graph.nodes.size(), -1);
    fused_norm_out.assign(graph.nodes.size(), at::Tensor());
    for (int32_t i : graph.order) {
      const Node& n = graph.nodes[i];
      if (n.op != Op::rms_norm && n.op != Op::layer_norm) continue;
      const ValueRef& r = graph.node_inputs[i][0];
      if (r.kind != ValueRef::Kind::node) continue;
      const int32_t j = r.index;
      if (graph.nodes[j].op != Op::add || norm_of_add[j] >= 0) continue;
      const Shape& s = graph.node_shapes[j];
      if (graph.shape_of(graph.node_inputs[j][0]) != s ||
          graph.shape_of(graph.node_inputs[j][1]) != s)
        continue;
      const int64_t rank = static_cast<int64_t>(s.size());
      if (!trailing(normalize_axes(n.axes, rank, where_of(n) + "/axes"), rank)) continue;
      norm_of_add[j] = i;
    }
  }

  void set_inputs(const std::vector<Tensor<double>>& in) {
    if (in.size() != g->inputs.size())
      throw ModelError("/inputs", "expected " + std::to_string(g->inputs.size()) +
                                      " input tensors, got " + std::to_string(in.size()));
    inputs.clear();
    for (size_t k = 0; k < in.size(); ++k) {
      const Input& spec = g->inputs[k];
      const std::string where = "/inputs/" + std::to_string(k) + " (input '" + spec.name + "')";
      if (in[k].shape != spec.shape || in[k].size() != numel(spec.shape))
        throw ModelError(where, "expected a tensor of shape " + to_string(spec.shape) +
                                    ", got " + to_string(in[k].shape));
      if (spec.dtype == DType::float_) {
        inputs.push_back(from_doubles(spec.shape, in[k].data, dt));
        continue;
      }
      std::vector<int64_t> ids(in[k].data.size());
      for (size_t i = 0; i < ids.size(); ++i) {
        const double id = in[k].data[i];
        if (!(id >= 0 && id < static_cast<double>(spec.range) && std::floor(id) == id))
          throw ModelError(where, "id " + std::to_string(id) + " at flat index " +
                                      std::to_string(i) + " is not an integer in [0, " +
                                      std::to_string(spec.range) + ")");
        ids[i] = static_cast<int64_t>(id);
      }
      inputs.push_back(at::from_blob(ids.data(), at::IntArrayRef(spec.shape), at::kLong).clone());
    }
  }

  // --- params ---

  // `t` (param p's values) times p's LayerScale factor along its scale_axis, if any
  // (Param::scale, core/graph.h).
  static at::Tensor scaled(const Param& p, const at::Tensor& t) {
    if (p.scale.empty()) return t;
    std::vector<int64_t> dims(p.shape.size(), 1);
    dims[size_t(p.scale_axis)] = int64_t(p.scale.size());
    const at::Tensor gamma = from_doubles({int64_t(p.scale.size())}, p.scale, at::kDouble)
                                 .to(t.scalar_type())
                                 .reshape(at::IntArrayRef(dims));
    return t * gamma;
  }

  // The param's value, scaled and with center_axes applied.
  at::Tensor effective(int k) {
    const Param& p = g->params[k];
    if (grad) {
      const at::Tensor t = scaled(p, leaves[k]);
      return p.center_axes.empty() ? t : centered(t, p.center_axes);
    }
    at::Tensor& c = effective_cache[k];
    if (!c.defined()) {
      if (p.center_axes.empty() && p.scale.empty()) {
        c = stored[k];
      } else {
        const at::Tensor d = scaled(p, param_doubles(p));
        c = (p.center_axes.empty() ? d : centered(d, p.center_axes)).to(dt).contiguous();
      }
    }
    return c;
  }

  // Param p's values in double (read from its source when deferred).
  at::Tensor param_doubles(const Param& p) const {
    if (!p.values_deferred) return from_doubles(p.shape, p.values, at::kDouble);
    return from_doubles(p.shape, read_values(p, g->base_dir), at::kDouble);
  }

  // Param `name` read by attribute `attr` of node i (CBWC-centered when the node says so).
  at::Tensor read(int32_t i, const std::string& attr, const std::string& name) {
    if (name.empty()) return {};
    const int k = g->param_index(name);
    const int64_t axis = cbwc_axis(g->nodes[i], attr);
    if (axis < 0) return effective(k);
    return centered_read(i, attr, k, axis);
  }

  at::Tensor centered_read(int32_t i, const std::string& key, int k, int64_t axis) {
    if (grad) return centered(effective(k), {axis});
    at::Tensor& c = read_cache[{i, key}];
    if (!c.defined()) {
      const Param& p = g->params[k];
      at::Tensor d = scaled(p, param_doubles(p));
      if (!p.center_axes.empty()) d = centered(d, p.center_axes);
      c = centered(d, {axis}).to(dt).contiguous();
    }
    return c;
  }

  at::Tensor value(const ValueRef& r) {
    switch (r.kind) {
      case ValueRef::Kind::input: return inputs[r.index];
      case ValueRef::Kind::param: return effective(r.index);
      case ValueRef::Kind::node: return values[r.index];
    }
    throw InternalError("bad ValueRef kind");
  }

  at::Tensor in(int32_t i, size_t k) { return value(g->node_inputs[i][k]); }

  // --- running ---

  void forward_all() {
    values.assign(g->nodes.size(), at::Tensor());
    for (at::Tensor& t : fused_norm_out) t = at::Tensor();
    for (int32_t i : g->order)
      if (grad || !skip_no_grad[i]) values[i] = node(i);
    outputs.clear();
    for (const ValueRef& r : g->output_refs) outputs.push_back(value(r));
  }

  void forward_no_grad(const RunOptions& r) {
    c10::InferenceMode guard;
    run = r;
    grad = false;
    forward_all();
  }

  // A reusable output buffer of node i with the given sizes.
  at::Tensor& buffer(int32_t i, at::IntArrayRef sizes) {
    at::Tensor& b = buffers[i];
    if (!b.defined() || b.sizes() != sizes || b.scalar_type() != dt)
      b = at::empty(sizes, at::TensorOptions().dtype(dt));
    return b;
  }

  at::Tensor linear(int32_t i, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
    if (grad) return at::linear(x, w, b);
    // Into the node's buffer: [rows, out] = x [rows, in] · wᵀ (+ b).
    const int64_t in_features = w.size(1), out_features = w.size(0);
    std::vector<int64_t> ys = x.sizes().vec();
    ys.back() = out_features;
    at::Tensor& y = buffer(i, ys);
    at::Tensor y2 = y.view({-1, out_features});
    const at::Tensor x2 = x.reshape({-1, in_features});
    if (b.defined())
      at::addmm_out(y2, b, x2, w.t());
    else
      at::mm_out(y2, x2, w.t());
    return y;
  }

  at::Tensor norm(int32_t i, const at::Tensor& x, Op op, const Axes& axes, const at::Tensor& w,
                  const at::Tensor& b, double eps) {
    using Clock = std::chrono::steady_clock;
    const auto start = timing ? Clock::now() : Clock::time_point();
    at::Tensor y;
    if (op == Op::layer_norm) {
      y = layer_norm(x, axes, w, b, eps);
    } else if (!grad && dt == at::kFloat && opt.fused_rms_norm && trailing(axes, x.dim())) {
      const at::Tensor xc = x.contiguous();
      int64_t cols = 1;
      for (int64_t a : axes) cols *= x.size(a);
      y = buffer(i, x.sizes());
      kernels::rms_norm(xc.data_ptr<float>(), w.defined() ? w.data_ptr<float>() : nullptr,
                        b.defined() ? b.data_ptr<float>() : nullptr, y.data_ptr<float>(),
                        x.numel() / cols, cols, static_cast<float>(eps));
    } else {
      y = rms_norm_composed(x, axes, w, b, eps);
    }
    if (timing && i >= 0 && timing_slot[i] >= 0) {
      NormTiming& t = timings[timing_slot[i]];
      t.cols = 1;
      for (int64_t a : axes) t.cols *= x.size(a);
      t.rows = x.numel() / t.cols;
      t.calls += 1;
      t.seconds += std::chrono::duration<double>(Clock::now() - start).count();
    }
    return y;
  }

  void record_norm_timing(int32_t i, int64_t rows, int64_t cols, double seconds) {
    if (!timing || i < 0 || timing_slot[i] < 0) return;
    NormTiming& t = timings[timing_slot[i]];
    t.rows = rows;
    t.cols = cols;
    t.calls += 1;
    t.seconds += seconds;
  }

  // Add node j. Where it feeds a norm (norm_of_add) that is an rms_norm, in float32
  // inference with float operands of equal sizes, it also computes that norm into the
  // norm's buffer, for node() to pick up; the fused call is timed as the norm's call.
  // Elsewhere a feeding add is timed into its norm's seconds (the norm counts the call).
  at::Tensor add(int32_t j) {
    using Clock = std::chrono::steady_clock;
    const at::Tensor a = in(j, 0), b = in(j, 1);
    const int32_t i = norm_of_add[j];
    const bool fuse = i >= 0 && !grad && dt == at::kFloat && opt.fused_rms_norm &&
                      g->nodes[i].op == Op::rms_norm && a.scalar_type() == at::kFloat &&
                      b.scalar_type() == at::kFloat && a.sizes() == b.sizes();
    if (!fuse) {
      if (!(timing && i >= 0 && timing_slot[i] >= 0)) return at::add(a, b);
      const auto start = Clock::now();
      at::Tensor sum = at::add(a, b);
      timings[timing_slot[i]].seconds +=
          std::chrono::duration<double>(Clock::now() - start).count();
      return sum;
    }
    const Node& n = g->nodes[i];
    const at::Tensor w = read(i, "weight", n.weight), bias = read(i, "bias", n.bias);
    const at::Tensor ac = a.contiguous(), bc = b.contiguous();
    const int64_t rank = a.dim();
    int64_t cols = 1;
    for (int64_t ax : normalize_axes(n.axes, rank, where_of(n) + "/axes")) cols *= a.size(ax);
    at::Tensor sum = buffer(j, a.sizes());
    at::Tensor y = buffer(i, a.sizes());
    const auto start = timing ? Clock::now() : Clock::time_point();
    kernels::add_rms_norm(ac.data_ptr<float>(), bc.data_ptr<float>(),
                          w.defined() ? w.data_ptr<float>() : nullptr,
                          bias.defined() ? bias.data_ptr<float>() : nullptr,
                          sum.data_ptr<float>(), y.data_ptr<float>(), a.numel() / cols, cols,
                          static_cast<float>(n.eps));
    if (timing)
      record_norm_timing(i, a.numel() / cols, cols,
                         std::chrono::duration<double>(Clock::now() - start).count());
    fused_norm_out[i] = y;
    return sum;
  }

  at::Tensor dropout(const Node& n, const at::Tensor& x) {
    if (run.mode == Mode::inference) return x;
    SplitMix64 rng(run.seed, n.name);
    std::vector<double> keep(static_cast<size_t>(x.numel()));
    for (double& k : keep) k = rng.uniform() >= n.p ? 1.0 : 0.0;
    const at::Tensor mask = from_doubles(x.sizes().vec(), keep, dt);
    return x.div(1.0 - n.p).mul(mask);
  }

  at::Tensor attention(int32_t i, const at::Tensor& x) {
    const Node& n = g->nodes[i];
    const int64_t N = x.size(0), T = x.size(1), D = x.size(2), H = n.heads, dh = D / H;
    auto heads = [&](const char* wa, const std::string& w, const char* ba,
                     const std::string& b) {
      return at::linear(x, read(i, wa, w), read(i, ba, b)).view({N, T, H, dh}).transpose(1, 2);
    };
    const at::Tensor q = heads("wq", n.wq, "bq", n.bq);
    const at::Tensor k = heads("wk", n.wk, "bk", n.bk);
    const at::Tensor v = heads("wv", n.wv, "bv", n.bv);
    at::Tensor s = at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(dh)));
    if (n.causal) {
      const at::Tensor later = at::ones({T, T}, at::TensorOptions().dtype(at::kBool)).triu(1);
      s = s.masked_fill(later, -std::numeric_limits<double>::infinity());
    }
    const at::Tensor ctx = at::matmul(at::softmax(s, -1), v).transpose(1, 2).reshape({N, T, D});
    return at::linear(ctx, read(i, "wo", n.wo), read(i, "bo", n.bo));
  }

  at::Tensor rnn(int32_t i, const at::Tensor& x) {
    const Node& n = g->nodes[i];
    const at::Tensor wih = read(i, "weight_ih", n.weight_ih);
    const at::Tensor whh = read(i, "weight_hh", n.weight_hh);
    const at::Tensor b = read(i, "bias", n.bias);
    at::Tensor nw, nb;
    if (n.norm) {
      nw = read(i, "norm/weight", n.norm->weight);
      nb = read(i, "norm/bias", n.norm->bias);
    }
    const at::Tensor xin = at::linear(x, wih, b);  // [N, T, H]: W_ih x_t + b for every t
    std::vector<at::Tensor> hs;
    at::Tensor h;
    for (int64_t t = 0; t < x.size(1); ++t) {
      at::Tensor a = xin.select(1, t);
      if (h.defined()) a = a + at::linear(h, whh);
      if (n.norm)
        a = n.norm->kind == Op::layer_norm
                ? at::layer_norm(a, {a.size(-1)}, nw, nb, n.norm->eps)
                : rms_norm_composed(a, {1}, nw, nb, n.norm->eps);
      h = at::tanh(a);
      hs.push_back(h);
    }
    return at::stack(hs, 1);
  }

  // lstm, gru (docs/spec/format.md): ONNX's cell equations written out in ATen ops, one
  // batch entry at a time (each runs over its own sequence length).
  at::Tensor gated_recurrent(int32_t i, const at::Tensor& x) {
    const Node& n = g->nodes[i];
    const bool lstm = n.op == Op::lstm;
    const at::Tensor W = read(i, "weight_ih", n.weight_ih), R = read(i, "weight_hh", n.weight_hh);
    const at::Tensor B = read(i, "bias", n.bias), h0 = read(i, "initial_h", n.initial_h),
                     c0 = read(i, "initial_c", n.initial_c);
    const int64_t T = x.size(0), N = x.size(1), D = W.size(0), H = R.size(2);
    std::vector<at::Tensor> ys, hs, cs;  // per direction: [T, N, H], [N, H], [N, H]
    for (int64_t d = 0; d < D; ++d) {
      const bool rev = n.direction == "reverse" || d == 1;
      const at::Tensor w = W[d], r = R[d];
      at::Tensor wb, rb;
      if (B.defined()) {
        const auto parts = B[d].chunk(2);
        wb = parts[0], rb = parts[1];
      }
      std::vector<at::Tensor> yb, hb, cb;
      for (int64_t b = 0; b < N; ++b) {
        const int64_t L = n.sequence_lens.empty() ? T : n.sequence_lens[size_t(b)];
        at::Tensor h = h0.defined() ? h0[d][b] : at::zeros({H}, x.options());
        at::Tensor c = c0.defined() ? c0[d][b] : at::zeros({H}, x.options());
        std::vector<at::Tensor> steps(size_t(T), at::zeros({H}, x.options()));
        for (int64_t k = 0; k < L; ++k) {
          const int64_t t = rev ? L - 1 - k : k;
          const at::Tensor xt = x[t][b];
          at::Tensor a = at::mv(w, xt);
          if (wb.defined()) a = a + wb;
          if (lstm) {
            a = a + at::mv(r, h);
            if (rb.defined()) a = a + rb;
            const auto gs = a.chunk(4);  // i, o, f, c
            c = at::sigmoid(gs[2]) * c + at::sigmoid(gs[0]) * at::tanh(gs[3]);
            h = at::sigmoid(gs[1]) * at::tanh(c);
          } else {
            const auto ax = a.chunk(3);                 // z, r, h: input parts
            const auto rs = r.chunk(3);
            const std::vector<at::Tensor> rbs = rb.defined() ? rb.chunk(3) : std::vector<at::Tensor>{};
            auto rec = [&](int j, const at::Tensor& v) {
              at::Tensor y = at::mv(rs[size_t(j)], v);
              return rbs.empty() ? y : y + rbs[size_t(j)];
            };
            const at::Tensor z = at::sigmoid(ax[0] + rec(0, h)), rg = at::sigmoid(ax[1] + rec(1, h));
            const at::Tensor cand = at::tanh(n.linear_before_reset ? ax[2] + rg * rec(2, h) : ax[2] + rec(2, rg * h));
            h = (1 - z) * cand + z * h;
          }
          steps[size_t(t)] = h;
        }
        yb.push_back(at::stack(steps, 0));  // [T, H]
        hb.push_back(h);
        cb.push_back(c);
      }
      ys.push_back(at::stack(yb, 1));  // [T, N, H]
      hs.push_back(at::stack(hb, 0));
      cs.push_back(at::stack(cb, 0));
    }
    if (n.output == "y") return at::stack(ys, 1);  // [T, D, N, H]
    return at::stack(n.output == "y_h" ? hs : cs, 0);  // [D, N, H]
  }

  at::Tensor node(int32_t i) {
    const Node& n = g->nodes[i];
    if (n.op == Op::opaque) throw not_evaluable(n);
    const int64_t rank0 = static_cast<int64_t>(g->shape_of(g->node_inputs[i][0]).size());
    auto axes = [&]() { return normalize_axes(n.axes, rank0, where_of(n) + "/axes"); };
    switch (op_family(n.op)) {
      case OpFamily::weighted_producer:
        switch (family_member<WeightedOp>(n.op)) {
          case WeightedOp::linear:
            return linear(i, in(i, 0), read(i, "weight", n.weight),
                          !grad && absorbed_bias[i].defined() ? absorbed_bias[i] : read(i, "bias", n.bias));
          case WeightedOp::matmul: {
            const auto [operand, axis] =
                n.cbwc ? cbwc_matmul_operand(*g, i) : MatmulCentering{};
            at::Tensor a = in(i, 0), b = in(i, 1);
            if (operand == 0) a = centered_read(i, "inputs/0", g->node_inputs[i][0].index, axis);
            if (operand == 1) b = centered_read(i, "inputs/1", g->node_inputs[i][1].index, axis);
            return at::matmul(a, n.transpose_b ? b.transpose(-2, -1) : b);
          }
          case WeightedOp::embedding: return at::embedding(read(i, "weight", n.weight), in(i, 0));
          case WeightedOp::conv1d:
          case WeightedOp::conv2d: {
            const int spatial = n.op == Op::conv1d ? 1 : 2;
            const at::Tensor w = read(i, "weight", n.weight), b = read(i, "bias", n.bias);
            const auto stride = per_axis(n.stride, spatial), padding = per_axis(n.padding, spatial),
                       dilation = per_axis(n.dilation, spatial);
            return spatial == 1 ? at::conv1d(in(i, 0), w, b, stride, padding, dilation, n.groups)
                                : at::conv2d(in(i, 0), w, b, stride, padding, dilation, n.groups);
          }
          case WeightedOp::rnn: return rnn(i, in(i, 0));
          case WeightedOp::lstm:
          case WeightedOp::gru: return gated_recurrent(i, in(i, 0));
          case WeightedOp::attention: return attention(i, in(i, 0));
        }
        break;
      case OpFamily::elementwise_binary:
        switch (family_member<BinaryOp>(n.op)) {
          case BinaryOp::add:
            if (!grad && absorbed_by[i] >= 0) return values[absorbed_by[i]];
            return add(i);
          case BinaryOp::sub: return at::sub(in(i, 0), in(i, 1));
          case BinaryOp::mul: return at::mul(in(i, 0), in(i, 1));
          case BinaryOp::div: return at::div(in(i, 0), in(i, 1));
        }
        break;
      case OpFamily::scale: return in(i, 0) * n.factor;
      case OpFamily::dropout: return dropout(n, in(i, 0));
      case OpFamily::unary_nonlinearity:
        switch (family_member<UnaryOp>(n.op)) {
          case UnaryOp::relu: return at::relu(in(i, 0));
          case UnaryOp::gelu: return at::gelu(in(i, 0));  // erf form (approximate = "none")
          case UnaryOp::tanh: return at::tanh(in(i, 0));
          case UnaryOp::sigmoid: return at::sigmoid(in(i, 0));
          case UnaryOp::silu: return at::silu(in(i, 0));
          case UnaryOp::exp: return at::exp(in(i, 0));
          case UnaryOp::sqrt:
            refuse_outside_domain(n, in(i, 0) < 0, "sqrt of a negative value");
            return at::sqrt(in(i, 0));
          case UnaryOp::reciprocal:
            refuse_outside_domain(n, in(i, 0) == 0, "reciprocal of 0");
            return at::reciprocal(in(i, 0));
          case UnaryOp::erf: return at::erf(in(i, 0));
          case UnaryOp::log:
            refuse_outside_domain(n, in(i, 0) <= 0, "log of a value that is not positive");
            return at::log(in(i, 0));
          case UnaryOp::sin: return at::sin(in(i, 0));
          case UnaryOp::cos: return at::cos(in(i, 0));
          case UnaryOp::atan: return at::atan(in(i, 0));
          case UnaryOp::hard_sigmoid: return at::clamp(in(i, 0) * n.alpha + n.beta, 0.0, 1.0);
          case UnaryOp::hard_swish: return in(i, 0) * at::clamp(in(i, 0) / 6.0 + 0.5, 0.0, 1.0);
          case UnaryOp::clip: {
            c10::optional<at::Scalar> lo, hi;
            if (!std::isinf(n.min)) lo = n.min;
            if (!std::isinf(n.max)) hi = n.max;
            return at::clamp(in(i, 0), lo, hi);
          }
        }
        break;
      case OpFamily::softmax: {
        const int64_t axis = normalize_axis(n.axis, rank0, where_of(n) + "/axis");
        if (!is_masked_softmax(n)) return at::softmax(in(i, 0), axis);
        const at::Tensor drop =
            at::tensor(at::ArrayRef<int64_t>(n.condition), at::TensorOptions().dtype(at::kLong))
                .reshape(n.condition_shape)
                .to(in(i, 0).device())
                .eq(0);
        return at::softmax(in(i, 0).masked_fill(drop, -std::numeric_limits<double>::infinity()), axis);
      }
      case OpFamily::reduction:
        switch (family_member<ReductionOp>(n.op)) {
          case ReductionOp::mean: return at::mean(in(i, 0), axes(), n.keepdims);
          case ReductionOp::max: return at::amax(in(i, 0), axes(), n.keepdims);
        }
        break;
      case OpFamily::shape_op:
        switch (family_member<ShapeOp>(n.op)) {
          case ShapeOp::transpose: {
            std::vector<int64_t> perm;
            for (int64_t p : n.perm) perm.push_back(normalize_axis(p, rank0, where_of(n) + "/perm"));
            return in(i, 0).permute(perm);
          }
          case ShapeOp::reshape: return in(i, 0).reshape(g->node_shapes[i]);
          case ShapeOp::slice: {
            const std::vector<SliceAxis> l =
                slice_layout(n, g->shape_of(g->node_inputs[i][0]), where_of(n));
            at::Tensor y = in(i, 0);
            for (size_t a = 0; a < l.size(); ++a) {
              if (l[a].whole(y.size(int64_t(a)))) continue;
              const at::Tensor idx =
                  at::arange(l[a].count, at::TensorOptions().dtype(at::kLong)) * l[a].step + l[a].start;
              y = y.index_select(int64_t(a), idx);
            }
            return y;
          }
          case ShapeOp::expand: return in(i, 0).expand(g->node_shapes[i]).contiguous();
          case ShapeOp::pad: {
            const std::vector<PadAxis> l = pad_layout(n, g->shape_of(g->node_inputs[i][0]), where_of(n));
            std::vector<int64_t> pads;  // at::constant_pad_nd: last axis first, (before, after)
            for (size_t a = l.size(); a-- > 0;) {
              pads.push_back(l[a].before);
              pads.push_back(l[a].after);
            }
            return at::constant_pad_nd(in(i, 0), pads, n.value);
          }
        }
        break;
      case OpFamily::select: {
        const at::Tensor c =
            at::tensor(at::ArrayRef<int64_t>(n.condition), at::TensorOptions().dtype(at::kLong))
                .reshape(n.condition_shape)
                .to(in(i, 0).device())
                .ne(0);
        return at::where(c, in(i, 0), in(i, 1));
      }
      case OpFamily::concat: {
        std::vector<at::Tensor> parts;
        for (size_t k = 0; k < n.inputs.size(); ++k) parts.push_back(in(i, k));
        return at::cat(parts, normalize_axis(n.axis, rank0, where_of(n) + "/axis"));
      }
      case OpFamily::center: return centered(in(i, 0), axes());
      case OpFamily::norm:
        if (fused_norm_out[i].defined()) return std::move(fused_norm_out[i]);
        return norm(i, in(i, 0), n.op, axes(), read(i, "weight", n.weight),
                    read(i, "bias", n.bias), n.eps);
      case OpFamily::opaque: throw not_evaluable(n);
    }
    throw InternalError("torch engine: bad op");
  }
};

void set_threads(int n) { at::set_num_threads(n); }
int threads() { return at::get_num_threads(); }

Engine::Engine(const Graph& g, EngineOptions options)
    : impl_(std::make_unique<Impl>(g, options)) {}
Engine::~Engine() = default;
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;

const Graph& Engine::graph() const { return *impl_->g; }
size_t Engine::absorbed_biases() const {
  return static_cast<size_t>(std::count_if(impl_->absorbed_by.begin(), impl_->absorbed_by.end(),
                                           [](int32_t l) { return l >= 0; }));
}
Precision Engine::precision() const { return impl_->opt.precision; }

std::vector<Tensor<double>> Engine::forward(const std::vector<Tensor<double>>& inputs,
                                            const RunOptions& run) {
  set_inputs(inputs);
  this->run(run);
  std::vector<Tensor<double>> out;
  for (size_t k = 0; k < impl_->outputs.size(); ++k) out.push_back(output(k));
  return out;
}

GradResult Engine::gradients(const std::vector<Tensor<double>>& inputs, const RunOptions& run) {
  Impl& m = *impl_;
  c10::AutoGradMode enable(true);
  m.set_inputs(inputs);
  for (size_t k = 0; k < m.inputs.size(); ++k)
    if (m.g->inputs[k].dtype == DType::float_) m.inputs[k].requires_grad_(true);
  m.leaves.clear();
  for (const at::Tensor& s : m.stored) m.leaves.push_back(s.detach().clone().requires_grad_(true));
  m.run = run;
  m.grad = true;
  m.forward_all();

  const std::vector<Tensor<double>> r = eval::loss_cotangents<double>(*m.g, run.seed);
  at::Tensor loss = at::zeros({}, at::TensorOptions().dtype(m.dt));
  for (size_t k = 0; k < r.size(); ++k)
    loss = loss + (m.outputs[k] * from_doubles(r[k].shape, r[k].data, m.dt)).sum();
  GradResult res;
  for (const at::Tensor& o : m.outputs) res.outputs.push_back(to_lnv(o));
  res.loss = loss.item<double>();
  if (loss.requires_grad()) loss.backward();
  auto grad_of = [](const at::Tensor& leaf, const Shape& shape) {
    const at::Tensor gr = leaf.grad();
    if (gr.defined()) return to_lnv(gr);
    return Tensor<double>(shape);
  };
  for (size_t k = 0; k < m.inputs.size(); ++k)
    res.inputs.push_back(m.g->inputs[k].dtype == DType::float_
                             ? grad_of(m.inputs[k], m.g->inputs[k].shape)
                             : Tensor<double>());
  for (size_t k = 0; k < m.leaves.size(); ++k)
    res.params.push_back(grad_of(m.leaves[k], m.g->params[k].shape));
  m.grad = false;
  m.leaves.clear();
  m.values.clear();
  m.outputs.clear();
  return res;
}

void Engine::set_inputs(const std::vector<Tensor<double>>& inputs) { impl_->set_inputs(inputs); }

void Engine::run(const RunOptions& run) {
  if (impl_->inputs.size() != impl_->g->inputs.size())
    throw ModelError("/inputs", "no inputs set before run()");
  impl_->forward_no_grad(run);
}

Tensor<double> Engine::output(size_t k) const {
  LNV_INTERNAL_ASSERT(k < impl_->outputs.size(), "output index out of range");
  return to_lnv(impl_->outputs[k]);
}

void Engine::set_norm_timing(bool on) { impl_->timing = on; }
std::vector<NormTiming> Engine::norm_timings() const { return impl_->timings; }
void Engine::reset_norm_timings() {
  for (NormTiming& t : impl_->timings) t.calls = 0, t.seconds = 0.0;
}

}  // namespace lnv::torch_engine
