// Reverse mode: the loss' gradient with respect to every input and param, one switch over
// ops (nodes in reverse topological order, each adding into its inputs' adjoints).
#include <algorithm>

#include "core/eval/bounded.h"
#include "core/eval/kernels.h"
#include "core/eval/recurrent.h"

namespace lnv::eval {
namespace {

using detail::Fibers;
using detail::fibers_of;
using detail::node_where;

// The gradient of one param attribute of a node, collected in a buffer and then added to
// the param's adjoint, centered back through cbwc (centering is its own adjoint).
template <class T>
struct ParamGrad {
  int index = -1;  // -1: the attribute is absent
  int64_t axis = -1;
  Tensor<T> buf;
  Tensor<T>* ptr() { return index < 0 ? nullptr : &buf; }
};

template <class T>
class Backward {
 public:
  Backward(const Graph& g, const Evaluation<T>& ev, const RunOptions& opt,
           const std::vector<Tensor<T>>& cotangents)
      : g_(g), ev_(ev), opt_(opt), r_(cotangents), dnode_(g.nodes.size()),
        dinput_(g.inputs.size()), dparam_(g.params.size()) {}

  Gradients<T> run() {
    const std::vector<Tensor<T>>& r = r_;
    Gradients<T> out{T(0), {}, {}};
    for (size_t k = 0; k < r.size(); ++k) {
      for (int64_t i = 0; i < r[k].size(); ++i) out.loss += ev_.outputs[k].data[i] * r[k].data[i];
      if (Tensor<T>* d = grad_of(g_.output_refs[k])) detail::add_into(*d, r[k]);
    }
    for (auto it = g_.order.rbegin(); it != g_.order.rend(); ++it)
      if (!dnode_[*it].data.empty()) node(*it, dnode_[*it]);

    for (size_t k = 0; k < g_.inputs.size(); ++k) {
      if (g_.inputs[k].dtype == DType::index) {
        out.inputs.emplace_back();
      } else {
        grad_of({ValueRef::Kind::input, int32_t(k)});
        out.inputs.push_back(std::move(dinput_[k]));
      }
    }
    for (size_t k = 0; k < g_.params.size(); ++k) {
      const Param& p = g_.params[k];
      Tensor<T>& d = *grad_of({ValueRef::Kind::param, int32_t(k)});
      Tensor<T> dc = std::move(d);
      if (!p.center_axes.empty()) {
        const Axes axes = normalize_axes(p.center_axes, static_cast<int64_t>(p.shape.size()),
                                         "/params/" + std::to_string(k) + "/center_axes");
        dc = detail::centered(dc, axes);
      }
      out.params.push_back(p.scale.empty() ? std::move(dc)
                                           : detail::scaled_along(dc, p.scale, p.scale_axis));
    }
    return out;
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

  // The adjoint of a value, allocated (zero) on first use; null for index inputs.
  Tensor<T>* grad_of(const ValueRef& r) {
    Tensor<T>* d = nullptr;
    switch (r.kind) {
      case ValueRef::Kind::input:
        if (g_.inputs[r.index].dtype == DType::index) return nullptr;
        d = &dinput_[r.index];
        break;
      case ValueRef::Kind::param: d = &dparam_[r.index]; break;
      case ValueRef::Kind::node: d = &dnode_[r.index]; break;
    }
    if (d->data.empty()) *d = Tensor<T>(g_.shape_of(r));
    return d;
  }

  const Tensor<T>& in(int32_t i, size_t k) const { return value(g_.node_inputs[i][k]); }
  Tensor<T>* din(int32_t i, size_t k) { return grad_of(g_.node_inputs[i][k]); }

  detail::ParamRead<T> param(const Node& n, const std::string& attr,
                             const std::string& name) const {
    return detail::read_param(g_, ev_.params, n, attr, name);
  }

  ParamGrad<T> pgrad(const Node& n, const std::string& attr, const std::string& name) const {
    ParamGrad<T> pg;
    if (name.empty()) return pg;
    pg.index = g_.param_index(name);
    pg.axis = detail::cbwc_axis(n, attr);
    pg.buf = Tensor<T>(g_.params[pg.index].shape);
    return pg;
  }

  void commit(ParamGrad<T>& pg) {
    if (pg.index < 0) return;
    Tensor<T>& d = *grad_of({ValueRef::Kind::param, pg.index});
    detail::add_into(d, pg.axis < 0 ? pg.buf : detail::centered(pg.buf, Axes{pg.axis}));
  }

  void node(int32_t i, const Tensor<T>& dy) {
    const Node& n = g_.nodes[i];
    if (n.op == Op::opaque) throw detail::not_evaluable(n);
    const int64_t rank0 = static_cast<int64_t>(in(i, 0).shape.size());
    switch (op_family(n.op)) {
      case OpFamily::weighted_producer:
        switch (family_member<WeightedOp>(n.op)) {
          case WeightedOp::linear: {
            const auto w = param(n, "weight", n.weight);
            ParamGrad<T> gw = pgrad(n, "weight", n.weight), gb = pgrad(n, "bias", n.bias);
            detail::linear_bwd(in(i, 0), *w, dy, din(i, 0), gw.buf, gb.ptr());
            commit(gw);
            commit(gb);
            return;
          }
          case WeightedOp::matmul: return matmul(i, dy);
          case WeightedOp::embedding: {
            const Tensor<T>& ids = in(i, 0);
            ParamGrad<T> gw = pgrad(n, "weight", n.weight);
            const int64_t dim = gw.buf.shape[1];
            for (int64_t k = 0; k < ids.size(); ++k) {
              const int64_t id = detail::to_index(ids.data[k]);
              for (int64_t e = 0; e < dim; ++e) gw.buf.data[id * dim + e] += dy.data[k * dim + e];
            }
            commit(gw);
            return;
          }
          case WeightedOp::conv1d:
          case WeightedOp::conv2d: {
            const auto w = param(n, "weight", n.weight);
            ParamGrad<T> gw = pgrad(n, "weight", n.weight), gb = pgrad(n, "bias", n.bias);
            const detail::ConvGeom geom = detail::conv_geom(n, in(i, 0).shape, (*w).shape, dy.shape);
            detail::conv_bwd(geom, in(i, 0), *w, dy, din(i, 0), gw.buf, gb.ptr());
            commit(gw);
            commit(gb);
            return;
          }
          case WeightedOp::rnn: {
            const detail::RnnReads<T> r(g_, ev_.params, n);
            const std::string none;
            ParamGrad<T> gih = pgrad(n, "weight_ih", n.weight_ih);
            ParamGrad<T> ghh = pgrad(n, "weight_hh", n.weight_hh);
            ParamGrad<T> gb = pgrad(n, "bias", n.bias);
            ParamGrad<T> gnw = pgrad(n, "norm/weight", n.norm ? n.norm->weight : none);
            ParamGrad<T> gnb = pgrad(n, "norm/bias", n.norm ? n.norm->bias : none);
            detail::rnn_bwd(in(i, 0), r.params, ev_.nodes[i], dy, din(i, 0),
                            {gih.ptr(), ghh.ptr(), gb.ptr(), gnw.ptr(), gnb.ptr()});
            for (ParamGrad<T>* pg : {&gih, &ghh, &gb, &gnw, &gnb}) commit(*pg);
            return;
          }
          case WeightedOp::lstm:
          case WeightedOp::gru: {
            const detail::RecurrentReads<T> r(g_, ev_.params, n);
            const detail::RecurrentGeom geo = detail::recurrent_geom(n, in(i, 0).shape, (*r.w).shape);
            const detail::RecurrentTrace<T> tr = detail::recurrent_run(geo, in(i, 0), r.params);
            ParamGrad<T> gw = pgrad(n, "weight_ih", n.weight_ih), gr = pgrad(n, "weight_hh", n.weight_hh),
                         gb = pgrad(n, "bias", n.bias), gh0 = pgrad(n, "initial_h", n.initial_h),
                         gc0 = pgrad(n, "initial_c", n.initial_c);
            detail::recurrent_bwd(tr, in(i, 0), r.params, dy, din(i, 0),
                                  {gw.ptr(), gr.ptr(), gb.ptr(), gh0.ptr(), gc0.ptr()});
            for (ParamGrad<T>* pg : {&gw, &gr, &gb, &gh0, &gc0}) commit(*pg);
            return;
          }
          case WeightedOp::attention: {
            const detail::AttentionReads<T> r(g_, ev_.params, n);
            const detail::AttentionCache<T> c =
                detail::attention_fwd(in(i, 0), r.view(), n.heads, n.causal);
            ParamGrad<T> gq = pgrad(n, "wq", n.wq), gk = pgrad(n, "wk", n.wk),
                         gv = pgrad(n, "wv", n.wv), go = pgrad(n, "wo", n.wo),
                         gbq = pgrad(n, "bq", n.bq), gbk = pgrad(n, "bk", n.bk),
                         gbv = pgrad(n, "bv", n.bv), gbo = pgrad(n, "bo", n.bo);
            detail::attention_bwd(in(i, 0), r.view(), c, dy, din(i, 0),
                                  {gq.ptr(), gk.ptr(), gv.ptr(), go.ptr(), gbq.ptr(), gbk.ptr(),
                                   gbv.ptr(), gbo.ptr()});
            for (ParamGrad<T>* pg : {&gq, &gk, &gv, &go, &gbq, &gbk, &gbv, &gbo}) commit(*pg);
            return;
          }
        }
        break;
      case OpFamily::elementwise_binary: return binary(i, dy);
      case OpFamily::scale: {
        Tensor<T>& dx = *din(i, 0);
        const T f(n.factor);
        for (int64_t k = 0; k < dy.size(); ++k) dx.data[k] += dy.data[k] * f;
        return;
      }
      case OpFamily::dropout: {
        Tensor<T>& dx = *din(i, 0);
        if (opt_.mode == Mode::inference) return detail::add_into(dx, dy);
        const std::vector<bool> keep = detail::dropout_mask(n.name, opt_.seed, dy.size(), n.p);
        const T denom = T(1) - T(n.p);
        for (int64_t k = 0; k < dy.size(); ++k)
          if (keep[k]) dx.data[k] += dy.data[k] / denom;
        return;
      }
      case OpFamily::unary_nonlinearity: {
        const Tensor<T>& x = in(i, 0);
        const Tensor<T>& y = ev_.nodes[i];
        Tensor<T>& dx = *din(i, 0);
        for (int64_t k = 0; k < dy.size(); ++k) {
          if (const std::string e = detail::unary_domain_error(n, x.data[k], k, true); !e.empty())
            throw ModelError(node_where(n), e);
          dx.data[k] += dy.data[k] * detail::unary_derivative(n, x.data[k], y.data[k]);
        }
        return;
      }
      case OpFamily::softmax:
        return detail::softmax_bwd(ev_.nodes[i], dy,
                                   normalize_axis(n.axis, rank0, node_where(n)), *din(i, 0));
      case OpFamily::reduction: {
        const Tensor<T>& x = in(i, 0);
        Tensor<T>& dx = *din(i, 0);
        const Fibers fb = fibers_of(x.shape, normalize_axes(n.axes, rank0, node_where(n)));
        const T count(fb.size);
        for (int64_t f = 0; f < fb.count; ++f) {
          if (n.op == Op::mean) {
            const T share = dy.data[f] / count;
            for (int64_t j = 0; j < fb.size; ++j) dx.data[fb.at(f, j)] += share;
          } else {
            int64_t arg = fb.at(f, 0);  // the first maximum takes the gradient
            for (int64_t j = 1; j < fb.size; ++j)
              if (x.data[fb.at(f, j)] > x.data[arg]) arg = fb.at(f, j);
            dx.data[arg] += dy.data[f];
          }
        }
        return;
      }
      case OpFamily::shape_op:
        switch (family_member<ShapeOp>(n.op)) {
          case ShapeOp::transpose: {
            Tensor<T>& dx = *din(i, 0);
            const std::vector<int64_t> src = detail::transpose_map(in(i, 0).shape, n.perm);
            for (int64_t k = 0; k < dy.size(); ++k) dx.data[src[k]] += dy.data[k];
            return;
          }
          case ShapeOp::reshape: {
            Tensor<T>& dx = *din(i, 0);
            for (int64_t k = 0; k < dy.size(); ++k) dx.data[k] += dy.data[k];
            return;
          }
          case ShapeOp::slice: {  // scatter back: each taken element gets its output's cotangent
            Tensor<T>& dx = *din(i, 0);
            const std::vector<int64_t> src = detail::slice_sources(n, dx.shape, dy.shape);
            for (size_t k = 0; k < src.size(); ++k) dx.data[src[k]] += dy.data[k];
            return;
          }
          case ShapeOp::expand: {  // each copy's cotangent flows back to the element it copies
            Tensor<T>& dx = *din(i, 0);
            const std::vector<int64_t> src = detail::broadcast_map(dy.shape, dx.shape);
            for (size_t k = 0; k < src.size(); ++k) dx.data[src[k]] += dy.data[k];
            return;
          }
          case ShapeOp::pad: {  // the pad value is a constant: only copied elements get a cotangent
            Tensor<T>& dx = *din(i, 0);
            const std::vector<int64_t> src = detail::pad_sources(n, dx.shape, dy.shape);
            for (size_t k = 0; k < src.size(); ++k)
              if (src[k] >= 0) dx.data[src[k]] += dy.data[k];
            return;
          }
        }
        break;
      case OpFamily::select: {  // each element's cotangent goes to the input it was picked from
        const std::vector<bool> c = detail::where_mask(n, dy.shape);
        Tensor<T>& da = *din(i, 0);
        Tensor<T>& db = *din(i, 1);
        const std::vector<int64_t> ia = detail::broadcast_map(dy.shape, da.shape);
        const std::vector<int64_t> ib = detail::broadcast_map(dy.shape, db.shape);
        for (size_t k = 0; k < c.size(); ++k) {
          if (c[k]) da.data[ia[k]] += dy.data[k];
          else db.data[ib[k]] += dy.data[k];
        }
        return;
      }
      case OpFamily::concat: {
        std::vector<Shape> shapes;
        for (size_t k = 0; k < n.inputs.size(); ++k) shapes.push_back(in(i, k).shape);
        const detail::ConcatLayout l =
            detail::concat_layout(shapes, normalize_axis(n.axis, rank0, node_where(n)));
        int64_t pos = 0;
        for (int64_t o = 0; o < l.outer; ++o)
          for (size_t k = 0; k < shapes.size(); ++k) {
            const int64_t block = l.widths[k] * l.inner;
            Tensor<T>& dx = *din(i, k);
            for (int64_t e = 0; e < block; ++e) dx.data[o * block + e] += dy.data[pos + e];
            pos += block;
          }
        return;
      }
      case OpFamily::center:
        return detail::add_into(*din(i, 0), detail::centered(
                                                dy, normalize_axes(n.axes, rank0, node_where(n))));
      case OpFamily::norm: return norm(i, dy);
      case OpFamily::opaque: throw detail::not_evaluable(n);
    }
    throw InternalError("backward: bad op");
  }

  void matmul(int32_t i, const Tensor<T>& dy) {
    const Node& n = g_.nodes[i];
    const MatmulCentering mc = detail::matmul_center(g_, i);
    if (mc.operand < 0) {
      Tensor<T>* da = din(i, 0);
      Tensor<T>* db = din(i, 1);
      return detail::matmul_bwd(in(i, 0), in(i, 1), dy, n.transpose_b, da, db);
    }
    // The centered operand's gradient goes back through the centering.
    const Axes axes{mc.axis};
    const Tensor<T> c = detail::centered(in(i, mc.operand), axes);
    Tensor<T> dc(c.shape);
    if (mc.operand == 0) {
      detail::matmul_bwd(c, in(i, 1), dy, n.transpose_b, &dc, din(i, 1));
    } else {
      detail::matmul_bwd(in(i, 0), c, dy, n.transpose_b, din(i, 0), &dc);
    }
    detail::add_into(*din(i, mc.operand), detail::centered(dc, axes));
  }

  void binary(int32_t i, const Tensor<T>& dy) {
    const Op op = g_.nodes[i].op;
    const Tensor<T>& a = in(i, 0);
    const Tensor<T>& b = in(i, 1);
    const std::vector<int64_t> ia = detail::broadcast_map(dy.shape, a.shape);
    const std::vector<int64_t> ib = detail::broadcast_map(dy.shape, b.shape);
    Tensor<T>* da = din(i, 0);
    Tensor<T>* db = din(i, 1);
    for (int64_t k = 0; k < dy.size(); ++k) {
      const T& g = dy.data[k];
      const T& u = a.data[ia[k]];
      const T& v = b.data[ib[k]];
      if (op == Op::add) {
        da->data[ia[k]] += g;
        db->data[ib[k]] += g;
      } else if (op == Op::sub) {
        da->data[ia[k]] += g;
        db->data[ib[k]] -= g;
      } else if (op == Op::mul) {
        da->data[ia[k]] += g * v;
        db->data[ib[k]] += g * u;
      } else {  // div
        da->data[ia[k]] += g / v;
        db->data[ib[k]] -= g * u / (v * v);
      }
    }
  }

  void norm(int32_t i, const Tensor<T>& dy) {
    const Node& n = g_.nodes[i];
    const Tensor<T>& x = in(i, 0);
    const auto w = param(n, "weight", n.weight);
    const auto b = param(n, "bias", n.bias);
    ParamGrad<T> gw = pgrad(n, "weight", n.weight), gb = pgrad(n, "bias", n.bias);
    Tensor<T>& dx = *din(i, 0);
    const Fibers fb = fibers_of(
        x.shape, normalize_axes(n.axes, static_cast<int64_t>(x.shape.size()), node_where(n)));
    detail::NormRow<T> nr;
    nr.layer = n.op == Op::layer_norm;
    nr.eps = T(n.eps);
    nr.w = w.get() ? w.get()->data.data() : nullptr;
    nr.b = b.get() ? b.get()->data.data() : nullptr;
    std::vector<T> row(fb.size), drow(fb.size), dxrow(fb.size);
    for (int64_t f = 0; f < fb.count; ++f) {
      for (int64_t j = 0; j < fb.size; ++j) {
        row[j] = x.data[fb.at(f, j)];
        drow[j] = dy.data[fb.at(f, j)];
        dxrow[j] = 0;
      }
      detail::norm_row_bwd(nr, row.data(), fb.size, drow.data(), dxrow.data(),
                           gw.ptr() ? gw.buf.data.data() : nullptr,
                           gb.ptr() ? gb.buf.data.data() : nullptr);
      for (int64_t j = 0; j < fb.size; ++j) dx.data[fb.at(f, j)] += dxrow[j];
    }
    commit(gw);
    commit(gb);
  }

  const Graph& g_;
  const Evaluation<T>& ev_;
  const RunOptions& opt_;
  const std::vector<Tensor<T>>& r_;
  std::vector<Tensor<T>> dnode_, dinput_, dparam_;
};

}  // namespace

template <class T>
Gradients<T> gradients(const Graph& g, const Evaluation<T>& ev, const RunOptions& opt) {
  detail::ensure_default_precision<T>();
  LNV_INTERNAL_ASSERT(g.finalized(), "gradients needs a finalized graph");
  return gradients(g, ev, opt, loss_cotangents<T>(g, opt.seed));
}

template <class T>
Gradients<T> gradients(const Graph& g, const Evaluation<T>& ev, const RunOptions& opt,
                       const std::vector<Tensor<T>>& cotangents) {
  detail::ensure_default_precision<T>();
  LNV_INTERNAL_ASSERT(g.finalized(), "gradients needs a finalized graph");
  LNV_INTERNAL_ASSERT(ev.nodes.size() == g.nodes.size(), "evaluation of another graph");
  LNV_INTERNAL_ASSERT(cotangents.size() == g.outputs.size(), "one cotangent per graph output");
  for (size_t k = 0; k < cotangents.size(); ++k)
    LNV_INTERNAL_ASSERT(cotangents[k].shape == g.shape_of(g.output_refs[k]),
                        "a cotangent of another shape than its output");
  return Backward<T>(g, ev, opt, cotangents).run();
}

template Gradients<double> gradients<double>(const Graph&, const Evaluation<double>&,
                                             const RunOptions&);
template Gradients<Mpfr> gradients<Mpfr>(const Graph&, const Evaluation<Mpfr>&,
                                         const RunOptions&);
template Gradients<double> gradients<double>(const Graph&, const Evaluation<double>&,
                                             const RunOptions&, const std::vector<Tensor<double>>&);
template Gradients<Mpfr> gradients<Mpfr>(const Graph&, const Evaluation<Mpfr>&,
                                         const RunOptions&, const std::vector<Tensor<Mpfr>>&);
template Gradients<Bounded> gradients<Bounded>(const Graph&, const Evaluation<Bounded>&,
                                               const RunOptions&);

}  // namespace lnv::eval
