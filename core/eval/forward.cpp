// Forward evaluation of every op (one switch), random inputs and loss cotangents.
#include <algorithm>

#include "core/eval/bounded.h"
#include "core/eval/kernels.h"
#include "core/eval/recurrent.h"

namespace lnv::eval {
namespace {

using detail::Fibers;
using detail::fibers_of;
using detail::node_where;

template <class T>
Tensor<T> from_doubles(const Shape& s, const std::vector<double>& v) {
  Tensor<T> t;
  t.shape = s;
  t.data.reserve(v.size());
  for (double x : v) t.data.emplace_back(x);
  return t;
}

template <class T>
void check_inputs(const Graph& g, const std::vector<Tensor<T>>& inputs) {
  using std::floor;
  if (inputs.size() != g.inputs.size())
    throw ModelError("/inputs", "expected " + std::to_string(g.inputs.size()) +
                                    " input tensors, got " + std::to_string(inputs.size()));
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Input& in = g.inputs[k];
    const std::string where = "/inputs/" + std::to_string(k) + " (input '" + in.name + "')";
    if (inputs[k].shape != in.shape || inputs[k].size() != numel(in.shape))
      throw ModelError(where, "expected a tensor of shape " + to_string(in.shape) + ", got " +
                                  to_string(inputs[k].shape));
    if (in.dtype != DType::index) continue;
    for (int64_t i = 0; i < inputs[k].size(); ++i) {
      const T& id = inputs[k].data[i];
      if (!(id >= 0 && id < T(in.range) && floor(id) == id))
        throw ModelError(where, "id " + std::to_string(static_cast<double>(id)) +
                                    " at flat index " + std::to_string(i) +
                                    " is not an integer in [0, " + std::to_string(in.range) +
                                    ")");
    }
  }
}

// Moves from `stored` where a param's effective values are its stored ones (no copy).
template <class T>
std::vector<Tensor<T>> effective_params(const Graph& g, std::vector<Tensor<T>>&& stored) {
  if (stored.size() != g.params.size())
    throw ModelError("/params", "expected " + std::to_string(g.params.size()) +
                                    " param tensors, got " + std::to_string(stored.size()));
  std::vector<Tensor<T>> out;
  out.reserve(stored.size());
  for (size_t k = 0; k < stored.size(); ++k) {
    const Param& p = g.params[k];
    if (stored[k].shape != p.shape || stored[k].size() != numel(p.shape))
      throw ModelError("/params/" + std::to_string(k),
                       "param '" + p.name + "': expected values of shape " +
                           to_string(p.shape) + ", got " + to_string(stored[k].shape));
    Tensor<T> scaled = p.scale.empty() ? std::move(stored[k])
                                       : detail::scaled_along(stored[k], p.scale, p.scale_axis);
    if (p.center_axes.empty()) {
      out.push_back(std::move(scaled));
    } else {
      const Axes axes = normalize_axes(p.center_axes, static_cast<int64_t>(p.shape.size()),
                                       "/params/" + std::to_string(k) + "/center_axes");
      out.push_back(detail::centered(scaled, axes));
    }
  }
  return out;
}

// Evaluates the nodes of a finalized graph in topological order.
template <class T>
class Forward {
 public:
  Forward(const Graph& g, const RunOptions& opt, Evaluation<T>& ev,
          const std::vector<const Tensor<T>*>* known = nullptr)
      : g_(g), opt_(opt), ev_(ev), known_(known) {}

  void run() {
    ev_.nodes.assign(g_.nodes.size(), Tensor<T>());
    for (int32_t i : g_.order) ev_.nodes[i] = known_ && (*known_)[i] ? *(*known_)[i] : node(i);
    ev_.outputs.clear();
    for (const ValueRef& r : g_.output_refs) ev_.outputs.push_back(value(r));
  }

 private:
  const Tensor<T>& value(const ValueRef& r) const {
    switch (r.kind) {
      case ValueRef::Kind::input: return ev_.inputs[r.index];
      case ValueRef::Kind::param: return ev_.params[r.index];
      case ValueRef::Kind::node: return ev_.nodes[r.index];
    }
    throw InternalError("bad ValueRef kind");
  }

  const Tensor<T>& in(int32_t i, size_t k) const { return value(g_.node_inputs[i][k]); }

  detail::ParamRead<T> param(const Node& n, const std::string& attr,
                             const std::string& name) const {
    return detail::read_param(g_, ev_.params, n, attr, name);
  }

  Tensor<T> node(int32_t i) const {
    using std::max;
    const Node& n = g_.nodes[i];
    const Shape& ys = g_.node_shapes[i];
    if (n.op == Op::opaque) throw detail::not_evaluable(n);
    const int64_t rank0 = static_cast<int64_t>(in(i, 0).shape.size());
    switch (op_family(n.op)) {
      case OpFamily::weighted_producer:
        switch (family_member<WeightedOp>(n.op)) {
          case WeightedOp::linear: {
            const auto w = param(n, "weight", n.weight);
            const auto b = param(n, "bias", n.bias);
            return detail::linear_fwd(in(i, 0), *w, b.get());
          }
          case WeightedOp::matmul: {
            const MatmulCentering mc = detail::matmul_center(g_, i);
            if (mc.operand < 0) return detail::matmul_fwd(in(i, 0), in(i, 1), ys, n.transpose_b);
            const Tensor<T> c = detail::centered(in(i, mc.operand), Axes{mc.axis});
            return mc.operand == 0 ? detail::matmul_fwd(c, in(i, 1), ys, n.transpose_b)
                                   : detail::matmul_fwd(in(i, 0), c, ys, n.transpose_b);
          }
          case WeightedOp::embedding: return embedding(i);
          case WeightedOp::conv1d:
          case WeightedOp::conv2d: {
            const auto w = param(n, "weight", n.weight);
            const auto b = param(n, "bias", n.bias);
            const detail::ConvGeom geom = detail::conv_geom(n, in(i, 0).shape, (*w).shape, ys);
            return detail::conv_fwd(geom, ys, in(i, 0), *w, b.get());
          }
          case WeightedOp::rnn: {
            const detail::RnnReads<T> r(g_, ev_.params, n);
            return detail::rnn_fwd(in(i, 0), r.params);
          }
          case WeightedOp::lstm:
          case WeightedOp::gru: {
            const detail::RecurrentReads<T> r(g_, ev_.params, n);
            const detail::RecurrentGeom geo = detail::recurrent_geom(n, in(i, 0).shape, (*r.w).shape);
            return detail::recurrent_output(detail::recurrent_run(geo, in(i, 0), r.params));
          }
          case WeightedOp::attention: {
            const detail::AttentionReads<T> r(g_, ev_.params, n);
            return std::move(detail::attention_fwd(in(i, 0), r.view(), n.heads, n.causal).out);
          }
        }
        break;
      case OpFamily::elementwise_binary: return binary(n.op, in(i, 0), in(i, 1), ys);
      case OpFamily::scale: {
        Tensor<T> y = in(i, 0);
        const T f(n.factor);
        for (T& v : y.data) v *= f;
        return y;
      }
      case OpFamily::dropout: {
        Tensor<T> y = in(i, 0);
        if (opt_.mode == Mode::inference) return y;
        const std::vector<bool> keep = detail::dropout_mask(n.name, opt_.seed, y.size(), n.p);
        const T denom = T(1) - T(n.p);
        for (int64_t k = 0; k < y.size(); ++k)
          y.data[k] = keep[k] ? T(y.data[k] / denom) : T(0);
        return y;
      }
      case OpFamily::unary_nonlinearity: {
        Tensor<T> y = in(i, 0);
        for (int64_t k = 0; k < y.size(); ++k) {
          if (const std::string e = detail::unary_domain_error(n, y.data[k], k, false); !e.empty())
            throw ModelError(node_where(n), e);
          y.data[k] = detail::unary_fwd(n, y.data[k]);
        }
        return y;
      }
      case OpFamily::softmax:
        return detail::softmax_fwd(in(i, 0), normalize_axis(n.axis, rank0, node_where(n)),
                                   is_masked_softmax(n) ? detail::where_mask(n, ys)
                                                        : std::vector<bool>{});
      case OpFamily::reduction: {
        const Tensor<T>& x = in(i, 0);
        const Fibers fb = fibers_of(x.shape, normalize_axes(n.axes, rank0, node_where(n)));
        Tensor<T> y(ys);
        const T count(fb.size);
        for (int64_t f = 0; f < fb.count; ++f) {
          T acc = x.data[fb.at(f, 0)];
          for (int64_t j = 1; j < fb.size; ++j) {
            const T& v = x.data[fb.at(f, j)];
            if (n.op == Op::mean)
              acc += v;
            else if (v > acc)
              acc = v;
          }
          y.data[f] = n.op == Op::mean ? T(acc / count) : acc;
        }
        return y;
      }
      case OpFamily::shape_op:
        switch (family_member<ShapeOp>(n.op)) {
          case ShapeOp::transpose: {
            const Tensor<T>& x = in(i, 0);
            const std::vector<int64_t> src = detail::transpose_map(x.shape, n.perm);
            Tensor<T> y(ys);
            for (int64_t k = 0; k < y.size(); ++k) y.data[k] = x.data[src[k]];
            return y;
          }
          case ShapeOp::reshape: return Tensor<T>(ys, in(i, 0).data);
          case ShapeOp::slice: {
            const Tensor<T>& x = in(i, 0);
            Tensor<T> y(ys);
            const std::vector<int64_t> src = detail::slice_sources(n, x.shape, ys);
            for (size_t k = 0; k < src.size(); ++k) y.data[k] = x.data[src[k]];
            return y;
          }
          case ShapeOp::expand: {
            const Tensor<T>& x = in(i, 0);
            Tensor<T> y(ys);
            const std::vector<int64_t> src = detail::broadcast_map(ys, x.shape);
            for (size_t k = 0; k < src.size(); ++k) y.data[k] = x.data[src[k]];
            return y;
          }
          case ShapeOp::pad: {
            const Tensor<T>& x = in(i, 0);
            Tensor<T> y(ys);
            const std::vector<int64_t> src = detail::pad_sources(n, x.shape, ys);
            const T fill(n.value);
            for (size_t k = 0; k < src.size(); ++k) y.data[k] = src[k] < 0 ? fill : x.data[src[k]];
            return y;
          }
        }
        break;
      case OpFamily::select: {
        const Tensor<T>& a = in(i, 0);
        const Tensor<T>& b = in(i, 1);
        const std::vector<bool> c = detail::where_mask(n, ys);
        const std::vector<int64_t> ia = detail::broadcast_map(ys, a.shape);
        const std::vector<int64_t> ib = detail::broadcast_map(ys, b.shape);
        Tensor<T> y(ys);
        for (size_t k = 0; k < c.size(); ++k) y.data[k] = c[k] ? a.data[ia[k]] : b.data[ib[k]];
        return y;
      }
      case OpFamily::concat: {
        std::vector<Shape> shapes;
        for (size_t k = 0; k < n.inputs.size(); ++k) shapes.push_back(in(i, k).shape);
        const detail::ConcatLayout l =
            detail::concat_layout(shapes, normalize_axis(n.axis, rank0, node_where(n)));
        Tensor<T> y(ys);
        int64_t pos = 0;
        for (int64_t o = 0; o < l.outer; ++o)
          for (size_t k = 0; k < shapes.size(); ++k) {
            const int64_t block = l.widths[k] * l.inner;
            const std::vector<T>& src = in(i, k).data;
            std::copy(src.begin() + o * block, src.begin() + (o + 1) * block,
                      y.data.begin() + pos);
            pos += block;
          }
        return y;
      }
      case OpFamily::center:
        return detail::centered(in(i, 0), normalize_axes(n.axes, rank0, node_where(n)));
      case OpFamily::norm: return norm(i);
      case OpFamily::opaque: throw detail::not_evaluable(n);
    }
    throw InternalError("forward: bad op");
  }

  Tensor<T> embedding(int32_t i) const {
    const Node& n = g_.nodes[i];
    const auto w = param(n, "weight", n.weight);
    const Tensor<T>& ids = in(i, 0);
    const int64_t num = (*w).shape[0], dim = (*w).shape[1];
    Tensor<T> y(g_.node_shapes[i]);
    for (int64_t k = 0; k < ids.size(); ++k) {
      const int64_t id = detail::to_index(ids.data[k]);
      if (id < 0 || id >= num)
        throw ModelError(node_where(n), "id " + std::to_string(id) + " is out of range [0, " +
                                            std::to_string(num) + ") of weight '" + n.weight +
                                            "'");
      std::copy(w.get()->data.begin() + id * dim, w.get()->data.begin() + (id + 1) * dim,
                y.data.begin() + k * dim);
    }
    return y;
  }

  static Tensor<T> binary(Op op, const Tensor<T>& a, const Tensor<T>& b, const Shape& ys) {
    const std::vector<int64_t> ia = detail::broadcast_map(ys, a.shape);
    const std::vector<int64_t> ib = detail::broadcast_map(ys, b.shape);
    Tensor<T> y(ys);
    for (int64_t k = 0; k < y.size(); ++k) {
      const T& u = a.data[ia[k]];
      const T& v = b.data[ib[k]];
      T& out = y.data[k];
      if (op == Op::add)
        out = u + v;
      else if (op == Op::sub)
        out = u - v;
      else if (op == Op::mul)
        out = u * v;
      else
        out = u / v;
    }
    return y;
  }

  Tensor<T> norm(int32_t i) const {
    const Node& n = g_.nodes[i];
    const Tensor<T>& x = in(i, 0);
    const auto w = param(n, "weight", n.weight);
    const auto b = param(n, "bias", n.bias);
    const Fibers fb = fibers_of(
        x.shape, normalize_axes(n.axes, static_cast<int64_t>(x.shape.size()), node_where(n)));
    detail::NormRow<T> nr;
    nr.layer = n.op == Op::layer_norm;
    nr.eps = T(n.eps);
    nr.w = w.get() ? w.get()->data.data() : nullptr;
    nr.b = b.get() ? b.get()->data.data() : nullptr;
    Tensor<T> y(x.shape);
    std::vector<T> row(fb.size), out(fb.size);
    for (int64_t f = 0; f < fb.count; ++f) {
      for (int64_t j = 0; j < fb.size; ++j) row[j] = x.data[fb.at(f, j)];
      detail::norm_row_fwd(nr, row.data(), fb.size, out.data());
      for (int64_t j = 0; j < fb.size; ++j) y.data[fb.at(f, j)] = out[j];
    }
    return y;
  }

  const Graph& g_;
  const RunOptions& opt_;
  Evaluation<T>& ev_;
  const std::vector<const Tensor<T>*>* known_;
};

}  // namespace

template <class T>
std::vector<Tensor<T>> param_values(const Graph& g) {
  detail::ensure_default_precision<T>();
  std::vector<Tensor<T>> out;
  for (const Param& p : g.params) {
    LNV_INTERNAL_ASSERT(!p.values_deferred, "evaluating param '" + p.name +
                                                "', whose values were not loaded (deferred)");
    out.push_back(from_doubles<T>(p.shape, p.values));
  }
  return out;
}

template <class T>
std::vector<Tensor<T>> random_inputs(const Graph& g, uint64_t seed) {
  detail::ensure_default_precision<T>();
  std::vector<Tensor<T>> out;
  for (const Input& in : g.inputs) {
    SplitMix64 rng(seed, in.name);
    std::vector<double> v(numel(in.shape));
    for (double& x : v)
      x = in.dtype == DType::float_ ? rng.normal()
                                    : std::floor(rng.uniform() * static_cast<double>(in.range));
    out.push_back(from_doubles<T>(in.shape, v));
  }
  return out;
}

template <class T>
std::vector<Tensor<T>> loss_cotangents(const Graph& g, uint64_t seed) {
  detail::ensure_default_precision<T>();
  LNV_INTERNAL_ASSERT(g.finalized(), "loss_cotangents needs a finalized graph");
  std::vector<Tensor<T>> out;
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    SplitMix64 rng(seed, g.outputs[k] + "#cotangent");
    std::vector<double> v(numel(g.shape_of(g.output_refs[k])));
    for (double& x : v) x = rng.normal();
    out.push_back(from_doubles<T>(g.shape_of(g.output_refs[k]), v));
  }
  return out;
}

template <class T>
T loss(const Graph& g, const Evaluation<T>& ev, uint64_t seed) {
  const std::vector<Tensor<T>> r = loss_cotangents<T>(g, seed);
  T total(0);
  for (size_t k = 0; k < r.size(); ++k)
    for (int64_t i = 0; i < r[k].size(); ++i) total += ev.outputs[k].data[i] * r[k].data[i];
  return total;
}

namespace {

// With `known`, node i's value is *known[i] where that is not null (evaluate's overload).
template <class T>
Evaluation<T> evaluate_moving_params(const Graph& g, std::vector<Tensor<T>> inputs,
                                     std::vector<Tensor<T>>&& stored_params,
                                     const RunOptions& opt,
                                     const std::vector<const Tensor<T>*>* known = nullptr) {
  detail::ensure_default_precision<T>();
  LNV_INTERNAL_ASSERT(g.finalized(), "evaluate needs a finalized graph");
  LNV_INTERNAL_ASSERT(!known || known->size() == g.nodes.size(),
                      "evaluate: one known value per node");
  check_inputs(g, inputs);
  Evaluation<T> ev;
  ev.inputs = std::move(inputs);
  ev.params = effective_params(g, std::move(stored_params));
  Forward<T>(g, opt, ev, known).run();
  return ev;
}

}  // namespace

template <class T>
Evaluation<T> evaluate_with_params(const Graph& g, std::vector<Tensor<T>> inputs,
                                   const std::vector<Tensor<T>>& stored_params,
                                   const RunOptions& opt) {
  return evaluate_moving_params(g, std::move(inputs), std::vector<Tensor<T>>(stored_params), opt);
}

template <class T>
Evaluation<T> evaluate(const Graph& g, std::vector<Tensor<T>> inputs, const RunOptions& opt) {
  return evaluate_moving_params(g, std::move(inputs), param_values<T>(g), opt);
}

template <class T>
Evaluation<T> evaluate(const Graph& g, std::vector<Tensor<T>> inputs, const RunOptions& opt,
                       const std::vector<const Tensor<T>*>& known) {
  return evaluate_moving_params(g, std::move(inputs), param_values<T>(g), opt, &known);
}

#define LNV_INSTANTIATE_FORWARD(T)                                                          \
  template std::vector<Tensor<T>> param_values<T>(const Graph&);                           \
  template std::vector<Tensor<T>> random_inputs<T>(const Graph&, uint64_t);                \
  template std::vector<Tensor<T>> loss_cotangents<T>(const Graph&, uint64_t);              \
  template T loss<T>(const Graph&, const Evaluation<T>&, uint64_t);                        \
  template Evaluation<T> evaluate_with_params<T>(const Graph&, std::vector<Tensor<T>>,     \
                                                 const std::vector<Tensor<T>>&,            \
                                                 const RunOptions&);                       \
  template Evaluation<T> evaluate<T>(const Graph&, std::vector<Tensor<T>>, const RunOptions&); \
  template Evaluation<T> evaluate<T>(const Graph&, std::vector<Tensor<T>>, const RunOptions&,  \
                                     const std::vector<const Tensor<T>*>&);

LNV_INSTANTIATE_FORWARD(double)
LNV_INSTANTIATE_FORWARD(Mpfr)
LNV_INSTANTIATE_FORWARD(Bounded)

}  // namespace lnv::eval
