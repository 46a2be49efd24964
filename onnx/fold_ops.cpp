#include "onnx/fold_ops.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include "core/error.h"
#include "onnx/float_formats.h"

namespace lnv::onnx_import {
namespace {

// Thrown inside an evaluator for a case it does not cover; the node stays unfolded.
struct NotFolded {};

using Dims = std::vector<int64_t>;

// What an evaluator sees: the node, its inputs, the opset, and how errors name the node.
class Args {
 public:
  Args(const Node& node, const std::vector<const Tensor*>& inputs, int64_t opset,
       const std::string& where)
      : node_(node), inputs_(inputs), opset_(opset), where_(where) {}

  int64_t opset() const { return opset_; }
  size_t count() const { return inputs_.size(); }
  bool has(size_t k) const { return k < inputs_.size() && inputs_[k] != nullptr; }
  const Tensor& in(size_t k) const {
    if (!has(k)) fail("input " + std::to_string(k) + " is missing");
    const Tensor& t = *inputs_[k];
    if (t.type == ElemType::Undefined) throw NotFolded{};  // dims only
    return t;
  }
  const Tensor& dims_of(size_t k) const {
    if (!has(k)) fail("input " + std::to_string(k) + " is missing");
    return *inputs_[k];
  }
  const Attribute* attr(const char* name) const { return node_.attr(name); }
  int64_t int_attr(const char* name, int64_t fallback) const {
    const Attribute* a = attr(name);
    if (!a) return fallback;
    if (a->kind != AttrKind::Int) fail(std::string("attribute '") + name + "' is not an int");
    return a->i;
  }
  std::optional<Dims> ints_attr(const char* name) const {
    const Attribute* a = attr(name);
    if (!a) return std::nullopt;
    if (a->kind != AttrKind::Ints) fail(std::string("attribute '") + name + "' is not a list of ints");
    return a->ints;
  }
  // An integer input read as a list of int64 values (axes, shapes, indices).
  Dims ints_input(size_t k) const {
    const Tensor& t = in(k);
    if (t.is_float()) fail("input " + std::to_string(k) + " must be an integer tensor");
    return t.ints;
  }
  [[noreturn]] void fail(const std::string& what) const { throw ModelError(where_, what); }

 private:
  const Node& node_;
  const std::vector<const Tensor*>& inputs_;
  int64_t opset_;
  const std::string& where_;
};

int64_t numel_of(const Dims& dims) {
  Tensor t;
  t.dims = dims;
  return t.numel();
}

Tensor make_tensor(ElemType type, Dims dims) {
  Tensor t;
  t.type = type;
  t.dims = std::move(dims);
  const int64_t n = t.numel();
  if (n > kMaxFoldedElements) throw NotFolded{};
  if (t.is_float()) t.floats.assign(static_cast<size_t>(n), 0.0);
  else t.ints.assign(static_cast<size_t>(n), 0);
  return t;
}

Tensor int64_tensor(Dims dims, std::vector<int64_t> values) {
  Tensor t;
  t.type = ElemType::Int64;
  t.dims = std::move(dims);
  t.ints = std::move(values);
  return t;
}


double round_to(ElemType t, double v) {
  switch (t) {
    case ElemType::Float: return static_cast<double>(static_cast<float>(v));
    case ElemType::Float16: return round_to_half(v);
    case ElemType::BFloat16: return round_to_bfloat16(v);
    default: return v;
  }
}

// Copies element `from` of `src` into element `to` of `dst` (same element type).
void copy_elem(const Tensor& src, size_t from, Tensor& dst, size_t to) {
  if (src.is_float()) dst.floats[to] = src.floats[from];
  else dst.ints[to] = src.ints[from];
}

Dims strides_of(const Dims& dims) {
  Dims s(dims.size(), 1);
  for (size_t k = dims.size(); k-- > 1;) s[k - 1] = s[k] * dims[k];
  return s;
}

int64_t normalize_axis(int64_t axis, int64_t rank, const Args& a) {
  if (axis < -rank || axis >= rank)
    a.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

// numpy's multidirectional broadcasting of `shapes`.
Dims broadcast_dims(const std::vector<Dims>& shapes, const Args& a) {
  size_t rank = 0;
  for (const Dims& s : shapes) rank = std::max(rank, s.size());
  Dims out(rank, 1);
  for (const Dims& s : shapes) {
    for (size_t k = 0; k < s.size(); ++k) {
      int64_t& o = out[rank - s.size() + k];
      const int64_t d = s[k];
      if (d == o || d == 1) continue;
      if (o == 1) { o = d; continue; }
      std::string text;
      for (const Dims& t : shapes) {
        text += "[";
        for (size_t i = 0; i < t.size(); ++i) text += (i ? "," : "") + std::to_string(t[i]);
        text += "] ";
      }
      a.fail("shapes " + text + "do not broadcast");
    }
  }
  return out;
}

// For each element of a tensor of `out` dims, the index of the element of a tensor of
// `in` dims that broadcasts to it.
std::vector<size_t> broadcast_map(const Dims& in, const Dims& out) {
  const int64_t n = numel_of(out);
  std::vector<size_t> map(static_cast<size_t>(n));
  const Dims in_strides = strides_of(in);
  const size_t offset = out.size() - in.size();
  Dims idx(out.size(), 0);
  for (int64_t lin = 0; lin < n; ++lin) {
    int64_t src = 0;
    for (size_t k = 0; k < in.size(); ++k)
      if (in[k] != 1) src += idx[offset + k] * in_strides[k];
    map[static_cast<size_t>(lin)] = static_cast<size_t>(src);
    for (size_t k = out.size(); k-- > 0;) {
      if (++idx[k] < out[k]) break;
      idx[k] = 0;
    }
  }
  return map;
}

void require_same_type(const std::vector<const Tensor*>& ts, const Args& a) {
  for (const Tensor* t : ts)
    if (t->type != ts[0]->type)
      a.fail(std::string("inputs differ in element type (") + elem_type_name(ts[0]->type) +
             " and " + elem_type_name(t->type) + ")");
}

// --- element-wise families -----------------------------------------------------------

using FloatFn = std::function<double(double, double)>;
using IntFn = std::function<int64_t(int64_t, int64_t)>;

// A binary op with broadcasting; `out_type` is the result type (the inputs' unless a
// comparison). A null function means the op does not apply to that kind of type.
Tensor binary(const Args& a, const FloatFn& ff, const IntFn& fi, std::optional<ElemType> out_type) {
  const Tensor& x = a.in(0);
  const Tensor& y = a.in(1);
  require_same_type({&x, &y}, a);
  if ((x.is_float() && !ff) || (!x.is_float() && !fi)) throw NotFolded{};
  const Dims dims = broadcast_dims({x.dims, y.dims}, a);
  const ElemType type = out_type.value_or(x.type);
  Tensor out = make_tensor(type, dims);
  const auto mx = broadcast_map(x.dims, dims);
  const auto my = broadcast_map(y.dims, dims);
  const bool float_out = out.is_float();
  for (size_t i = 0; i < mx.size(); ++i) {
    if (x.is_float()) {
      const double v = ff(x.floats[mx[i]], y.floats[my[i]]);
      if (float_out) out.floats[i] = round_to(type, v);
      else out.ints[i] = static_cast<int64_t>(v);
    } else {
      out.ints[i] = wrap_to(type, fi(x.ints[mx[i]], y.ints[my[i]]));
    }
  }
  return out;
}

int64_t wrapping(int64_t x, int64_t y, char op) {
  const auto ux = static_cast<uint64_t>(x), uy = static_cast<uint64_t>(y);
  switch (op) {
    case '+': return static_cast<int64_t>(ux + uy);
    case '-': return static_cast<int64_t>(ux - uy);
    default: return static_cast<int64_t>(ux * uy);
  }
}

std::vector<Tensor> eval_arithmetic(const Args& a, const std::string& op) {
  if (op == "Add")
    return {binary(a, std::plus<double>(), [](int64_t x, int64_t y) { return wrapping(x, y, '+'); }, {})};
  if (op == "Sub")
    return {binary(a, std::minus<double>(), [](int64_t x, int64_t y) { return wrapping(x, y, '-'); }, {})};
  if (op == "Mul")
    return {binary(a, std::multiplies<double>(), [](int64_t x, int64_t y) { return wrapping(x, y, '*'); }, {})};
  if (op == "Div")
    return {binary(a, std::divides<double>(), [&a](int64_t x, int64_t y) {
      if (y == 0) a.fail("integer division by zero");
      if (x == std::numeric_limits<int64_t>::min() && y == -1) return x;
      return x / y;  // truncates toward zero, as ONNX Runtime does for integers
    }, {})};
  // Mod: fmod=0 takes the divisor's sign (integers only), fmod=1 the dividend's.
  const bool fmod = a.int_attr("fmod", 0) != 0;
  if (a.in(0).is_float() && !fmod) a.fail("Mod of floating-point tensors needs fmod=1");
  return {binary(a, [](double x, double y) { return std::fmod(x, y); },
                 [&a, fmod](int64_t x, int64_t y) {
                   if (y == 0) a.fail("integer modulo by zero");
                   if (y == -1) return int64_t{0};
                   int64_t r = x % y;
                   if (!fmod && r != 0 && ((r < 0) != (y < 0))) r += y;
                   return r;
                 }, {})};
}

// Pow: the exponent may have another element type than the base; the result has the
// base's. Integer bases with integer exponents multiply exactly (wrapping); otherwise the
// power is taken in double and rounded (or truncated) to the base's type.
std::vector<Tensor> eval_pow(const Args& a) {
  const Tensor& x = a.in(0);
  const Tensor& y = a.in(1);
  const Dims dims = broadcast_dims({x.dims, y.dims}, a);
  Tensor out = make_tensor(x.type, dims);
  const auto mx = broadcast_map(x.dims, dims);
  const auto my = broadcast_map(y.dims, dims);
  for (size_t i = 0; i < mx.size(); ++i) {
    const double e = y.is_float() ? y.floats[my[i]] : static_cast<double>(y.ints[my[i]]);
    if (x.is_float()) {
      out.floats[i] = round_to(x.type, std::pow(x.floats[mx[i]], e));
    } else if (!y.is_float() && y.ints[my[i]] >= 0) {
      int64_t r = 1, base = x.ints[mx[i]];
      for (int64_t n = y.ints[my[i]]; n > 0; n >>= 1) {  // by squaring, wrapping
        if (n & 1) r = wrapping(r, base, '*');
        base = wrapping(base, base, '*');
      }
      out.ints[i] = wrap_to(x.type, r);
    } else {
      const double v = std::pow(static_cast<double>(x.ints[mx[i]]), e);
      if (!std::isfinite(v) || std::fabs(v) >= 9.2e18) throw NotFolded{};
      out.ints[i] = wrap_to(x.type, static_cast<int64_t>(v));
    }
  }
  return {out};
}

std::vector<Tensor> eval_comparison(const Args& a, const std::string& op) {
  auto cmp = [&op](auto x, auto y) -> bool {
    if (op == "Equal") return x == y;
    if (op == "Less") return x < y;
    if (op == "Greater") return x > y;
    if (op == "LessOrEqual") return x <= y;
    return x >= y;
  };
  return {binary(a, [cmp](double x, double y) { return cmp(x, y) ? 1.0 : 0.0; },
                 [cmp](int64_t x, int64_t y) { return int64_t{cmp(x, y)}; }, ElemType::Bool)};
}

std::vector<Tensor> eval_logical(const Args& a, const std::string& op) {
  if (op == "Not") {
    Tensor out = a.in(0);
    if (out.type != ElemType::Bool) a.fail("Not needs a bool input");
    for (int64_t& v : out.ints) v = !v;
    return {out};
  }
  if (a.in(0).type != ElemType::Bool) a.fail(op + " needs bool inputs");
  return {binary(a, nullptr, [&op](int64_t x, int64_t y) -> int64_t {
    if (op == "And") return x && y;
    if (op == "Or") return x || y;
    return (x != 0) != (y != 0);
  }, {})};
}

// Min and Max over any number of inputs, with broadcasting; NaN wins.
std::vector<Tensor> eval_min_max(const Args& a, const std::string& op) {
  if (a.count() == 0) a.fail(op + " needs at least one input");
  std::vector<const Tensor*> ts;
  std::vector<Dims> shapes;
  for (size_t k = 0; k < a.count(); ++k) {
    ts.push_back(&a.in(k));
    shapes.push_back(ts.back()->dims);
  }
  require_same_type(ts, a);
  const Dims dims = broadcast_dims(shapes, a);
  Tensor out = make_tensor(ts[0]->type, dims);
  const bool is_max = op == "Max";
  for (size_t k = 0; k < ts.size(); ++k) {
    const auto m = broadcast_map(ts[k]->dims, dims);
    for (size_t i = 0; i < m.size(); ++i) {
      if (out.is_float()) {
        const double v = ts[k]->floats[m[i]];
        double& o = out.floats[i];
        if (k == 0 || std::isnan(v)) o = v;
        else if (!std::isnan(o)) o = is_max ? std::max(o, v) : std::min(o, v);
      } else {
        const int64_t v = ts[k]->ints[m[i]];
        int64_t& o = out.ints[i];
        o = k == 0 ? v : (is_max ? std::max(o, v) : std::min(o, v));
      }
    }
  }
  return {out};
}

std::vector<Tensor> eval_unary(const Args& a, const std::string& op) {
  Tensor out = a.in(0);
  if (out.is_float()) {
    for (double& v : out.floats) {
      double r;
      if (op == "Floor") r = std::floor(v);
      else if (op == "Ceil") r = std::ceil(v);
      else if (op == "Sqrt") r = std::sqrt(v);
      else if (op == "Neg") r = -v;
      else if (op == "Abs") r = std::fabs(v);
      else r = 1.0 / v;  // Reciprocal
      v = round_to(out.type, r);
    }
    return {out};
  }
  if (op != "Neg" && op != "Abs") throw NotFolded{};
  for (int64_t& v : out.ints) {
    const int64_t r = op == "Neg" || v < 0 ? wrapping(0, v, '-') : v;
    v = wrap_to(out.type, r);
  }
  return {out};
}

std::vector<Tensor> eval_where(const Args& a) {
  const Tensor& c = a.in(0);
  const Tensor& x = a.in(1);
  const Tensor& y = a.in(2);
  if (c.type != ElemType::Bool) a.fail("Where's condition must be bool");
  require_same_type({&x, &y}, a);
  const Dims dims = broadcast_dims({c.dims, x.dims, y.dims}, a);
  Tensor out = make_tensor(x.type, dims);
  const auto mc = broadcast_map(c.dims, dims), mx = broadcast_map(x.dims, dims),
             my = broadcast_map(y.dims, dims);
  for (size_t i = 0; i < mc.size(); ++i) {
    if (c.ints[mc[i]]) copy_elem(x, mx[i], out, i);
    else copy_elem(y, my[i], out, i);
  }
  return {out};
}

// Trilu: over the last two axes, element (i, j) is kept where j - i >= k (upper) or
// j - i <= k (lower), else zero; the optional input k defaults to 0.
std::vector<Tensor> eval_trilu(const Args& a) {
  const Tensor& x = a.in(0);
  if (x.dims.size() < 2) a.fail("Trilu's input must have rank 2 or more");
  int64_t k = 0;
  if (a.has(1)) {
    const Dims ks = a.ints_input(1);
    if (ks.size() != 1) a.fail("Trilu's k must hold one value");
    k = ks[0];
  }
  const bool upper = a.int_attr("upper", 1) != 0;
  const int64_t rows = x.dims[x.dims.size() - 2], cols = x.dims.back();
  Tensor out = x;
  for (int64_t e = 0; e < out.numel(); ++e) {
    const int64_t d = e % cols - e / cols % rows;  // j - i
    if (upper ? d >= k : d <= k) continue;
    if (out.is_float()) out.floats[static_cast<size_t>(e)] = 0;
    else out.ints[static_cast<size_t>(e)] = 0;
  }
  return {out};
}

std::vector<Tensor> eval_cast(const Args& a) {
  const Tensor& x = a.in(0);
  const auto to = static_cast<ElemType>(a.int_attr("to", 0));
  if (!is_supported_type(to)) throw NotFolded{};
  Tensor out = make_tensor(to, x.dims);
  for (size_t i = 0; i < static_cast<size_t>(out.numel()); ++i) {
    if (x.is_float() && out.is_float()) {
      out.floats[i] = round_to(to, x.floats[i]);
    } else if (x.is_float()) {
      const double v = x.floats[i];
      if (to == ElemType::Bool) { out.ints[i] = v != 0; continue; }
      if (std::isnan(v) || std::fabs(v) >= 9.2e18)
        a.fail("Cast of " + std::to_string(v) + " to an integer type is undefined");
      out.ints[i] = wrap_to(to, static_cast<int64_t>(v));  // truncates toward zero
    } else if (out.is_float()) {
      out.floats[i] = round_to(to, static_cast<double>(x.ints[i]));
    } else {
      out.ints[i] = wrap_to(to, x.ints[i]);
    }
  }
  return {out};
}

// --- shape and layout ops ------------------------------------------------------------

std::vector<Tensor> eval_shape(const Args& a) {
  const Dims& dims = a.dims_of(0).dims;
  const auto rank = static_cast<int64_t>(dims.size());
  auto clamp = [rank](int64_t v) { return std::clamp(v < 0 ? v + rank : v, int64_t{0}, rank); };
  const int64_t start = clamp(a.int_attr("start", 0));
  const int64_t end = clamp(a.int_attr("end", rank));
  Dims values;
  for (int64_t k = start; k < end; ++k) values.push_back(dims[static_cast<size_t>(k)]);
  const auto n = static_cast<int64_t>(values.size());
  return {int64_tensor({n}, values)};
}

std::vector<Tensor> eval_size(const Args& a) {
  return {int64_tensor({}, {numel_of(a.dims_of(0).dims)})};
}

std::vector<Tensor> eval_identity(const Args& a) { return {a.in(0)}; }

Tensor densify(const SparseTensor& s, const Args& a) {
  Tensor out = make_tensor(s.values.type, s.dims);
  const int64_t nnz = s.values.numel();
  const Dims strides = strides_of(s.dims);
  const bool linear = s.indices.dims.size() == 1;
  for (int64_t k = 0; k < nnz; ++k) {
    int64_t lin = 0;
    if (linear) {
      lin = s.indices.ints.at(static_cast<size_t>(k));
    } else {
      for (size_t d = 0; d < s.dims.size(); ++d)
        lin += s.indices.ints.at(static_cast<size_t>(k) * s.dims.size() + d) * strides[d];
    }
    if (lin < 0 || lin >= out.numel()) a.fail("sparse_value index out of range");
    copy_elem(s.values, static_cast<size_t>(k), out, static_cast<size_t>(lin));
  }
  return out;
}

std::vector<Tensor> eval_constant(const Args& a) {
  if (const Attribute* v = a.attr("value")) return {v->t};
  if (const Attribute* v = a.attr("sparse_value")) return {densify(v->sparse, a)};
  if (const Attribute* v = a.attr("value_float")) {
    Tensor t = make_tensor(ElemType::Float, {});
    t.floats[0] = round_to(ElemType::Float, v->f);
    return {t};
  }
  if (const Attribute* v = a.attr("value_floats")) {
    Tensor t = make_tensor(ElemType::Float, {static_cast<int64_t>(v->floats.size())});
    for (size_t i = 0; i < v->floats.size(); ++i) t.floats[i] = round_to(ElemType::Float, v->floats[i]);
    return {t};
  }
  if (const Attribute* v = a.attr("value_int")) return {int64_tensor({}, {v->i})};
  if (const Attribute* v = a.attr("value_ints"))
    return {int64_tensor({static_cast<int64_t>(v->ints.size())}, v->ints)};
  throw NotFolded{};  // value_string(s): strings are not held
}

std::vector<Tensor> eval_gather(const Args& a) {
  const Tensor& data = a.in(0);
  const Tensor& idx = a.in(1);
  if (idx.is_float()) a.fail("Gather's indices must be integers");
  const auto rank = static_cast<int64_t>(data.dims.size());
  if (rank == 0) a.fail("Gather of a scalar");
  const int64_t axis = normalize_axis(a.int_attr("axis", 0), rank, a);
  const int64_t d = data.dims[static_cast<size_t>(axis)];
  Dims out_dims(data.dims.begin(), data.dims.begin() + axis);
  out_dims.insert(out_dims.end(), idx.dims.begin(), idx.dims.end());
  out_dims.insert(out_dims.end(), data.dims.begin() + axis + 1, data.dims.end());
  Tensor out = make_tensor(data.type, out_dims);
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < axis; ++k) outer *= data.dims[static_cast<size_t>(k)];
  for (int64_t k = axis + 1; k < rank; ++k) inner *= data.dims[static_cast<size_t>(k)];
  const auto n_idx = static_cast<int64_t>(idx.ints.size());
  size_t o = 0;
  for (int64_t i = 0; i < outer; ++i)
    for (int64_t j = 0; j < n_idx; ++j) {
      int64_t g = idx.ints[static_cast<size_t>(j)];
      if (g < -d || g >= d)
        a.fail("Gather index " + std::to_string(g) + " is out of range for a dim of " + std::to_string(d));
      if (g < 0) g += d;
      for (int64_t k = 0; k < inner; ++k)
        copy_elem(data, static_cast<size_t>((i * d + g) * inner + k), out, o++);
    }
  return {out};
}

std::vector<Tensor> eval_concat(const Args& a) {
  if (a.count() == 0) a.fail("Concat needs at least one input");
  const Tensor& first = a.in(0);
  const auto rank = static_cast<int64_t>(first.dims.size());
  if (rank == 0) a.fail("Concat of scalars");
  if (!a.attr("axis")) a.fail("Concat needs an axis");
  const int64_t axis = normalize_axis(a.int_attr("axis", 0), rank, a);
  Dims dims = first.dims;
  dims[static_cast<size_t>(axis)] = 0;
  std::vector<const Tensor*> ts;
  for (size_t k = 0; k < a.count(); ++k) {
    const Tensor& t = a.in(k);
    ts.push_back(&t);
    if (static_cast<int64_t>(t.dims.size()) != rank) a.fail("Concat inputs differ in rank");
    for (int64_t j = 0; j < rank; ++j)
      if (j != axis && t.dims[static_cast<size_t>(j)] != first.dims[static_cast<size_t>(j)])
        a.fail("Concat inputs differ in dim " + std::to_string(j));
    dims[static_cast<size_t>(axis)] += t.dims[static_cast<size_t>(axis)];
  }
  require_same_type(ts, a);
  Tensor out = make_tensor(first.type, dims);
  int64_t outer = 1;
  for (int64_t k = 0; k < axis; ++k) outer *= dims[static_cast<size_t>(k)];
  size_t o = 0;
  for (int64_t i = 0; i < outer; ++i)
    for (const Tensor* t : ts) {
      const int64_t block = outer == 0 ? 0 : t->numel() / outer;
      for (int64_t k = 0; k < block; ++k) copy_elem(*t, static_cast<size_t>(i * block + k), out, o++);
    }
  return {out};
}

Tensor with_dims(Tensor t, Dims dims) {
  t.dims = std::move(dims);
  return t;
}

// Unsqueeze's and Squeeze's axes: an attribute before opset 13, an input from 13 on.
std::optional<Dims> axes_of(const Args& a, size_t input, int64_t input_since) {
  if (a.opset() < input_since) return a.ints_attr("axes");
  if (!a.has(input)) return std::nullopt;
  return a.ints_input(input);
}

std::vector<Tensor> eval_unsqueeze(const Args& a) {
  const Tensor& x = a.in(0);
  const auto axes = axes_of(a, 1, 13);
  if (!axes) a.fail("Unsqueeze needs axes");
  const auto rank = static_cast<int64_t>(x.dims.size() + axes->size());
  std::set<int64_t> at;
  for (int64_t ax : *axes)
    if (!at.insert(normalize_axis(ax, rank, a)).second) a.fail("Unsqueeze axes repeat");
  Dims dims;
  size_t src = 0;
  for (int64_t k = 0; k < rank; ++k) dims.push_back(at.count(k) ? 1 : x.dims[src++]);
  return {with_dims(x, dims)};
}

std::vector<Tensor> eval_squeeze(const Args& a) {
  const Tensor& x = a.in(0);
  const auto rank = static_cast<int64_t>(x.dims.size());
  std::set<int64_t> at;
  if (const auto axes = axes_of(a, 1, 13)) {
    for (int64_t ax : *axes) {
      const int64_t k = normalize_axis(ax, rank, a);
      if (x.dims[static_cast<size_t>(k)] != 1)
        a.fail("Squeeze of axis " + std::to_string(ax) + ", whose dim is not 1");
      at.insert(k);
    }
  } else {
    for (int64_t k = 0; k < rank; ++k)
      if (x.dims[static_cast<size_t>(k)] == 1) at.insert(k);
  }
  Dims dims;
  for (int64_t k = 0; k < rank; ++k)
    if (!at.count(k)) dims.push_back(x.dims[static_cast<size_t>(k)]);
  return {with_dims(x, dims)};
}

std::vector<Tensor> eval_reshape(const Args& a) {
  const Tensor& x = a.in(0);
  const Dims shape = a.ints_input(1);
  const bool allow_zero = a.int_attr("allowzero", 0) != 0;
  Dims dims;
  std::optional<size_t> infer;
  __int128 known = 1;
  for (size_t k = 0; k < shape.size(); ++k) {
    int64_t d = shape[k];
    if (d == 0 && !allow_zero) {
      if (k >= x.dims.size()) a.fail("Reshape copies dim " + std::to_string(k) + ", which the input lacks");
      d = x.dims[k];
    }
    if (d == -1) {
      if (infer) a.fail("Reshape's shape has more than one -1");
      infer = k;
      dims.push_back(1);
      continue;
    }
    if (d < 0) a.fail("Reshape's shape has the negative dim " + std::to_string(d));
    dims.push_back(d);
    known *= d;
    if (known > std::numeric_limits<int64_t>::max()) a.fail("Reshape's shape overflows int64");
  }
  const int64_t n = x.numel();
  if (infer) {
    if (known == 0 || n % known != 0) a.fail("Reshape cannot infer the -1 dim");
    dims[*infer] = static_cast<int64_t>(n / known);
  }
  if (numel_of(dims) != n) a.fail("Reshape changes the number of elements");
  return {with_dims(x, dims)};
}

std::vector<Tensor> eval_transpose(const Args& a) {
  const Tensor& x = a.in(0);
  const auto rank = static_cast<int64_t>(x.dims.size());
  Dims perm = a.ints_attr("perm").value_or(Dims{});
  if (!a.attr("perm"))
    for (int64_t k = rank; k-- > 0;) perm.push_back(k);
  if (static_cast<int64_t>(perm.size()) != rank) a.fail("Transpose's perm does not match the rank");
  std::set<int64_t> seen;
  for (int64_t& p : perm) {
    p = normalize_axis(p, rank, a);
    if (!seen.insert(p).second) a.fail("Transpose's perm repeats an axis");
  }
  Dims dims;
  for (int64_t p : perm) dims.push_back(x.dims[static_cast<size_t>(p)]);
  Tensor out = make_tensor(x.type, dims);
  const Dims in_strides = strides_of(x.dims);
  Dims idx(static_cast<size_t>(rank), 0);
  for (int64_t lin = 0; lin < out.numel(); ++lin) {
    int64_t src = 0;
    for (size_t k = 0; k < idx.size(); ++k) src += idx[k] * in_strides[static_cast<size_t>(perm[k])];
    copy_elem(x, static_cast<size_t>(src), out, static_cast<size_t>(lin));
    for (size_t k = idx.size(); k-- > 0;) {
      if (++idx[k] < dims[k]) break;
      idx[k] = 0;
    }
  }
  return {out};
}

std::vector<Tensor> eval_expand(const Args& a) {
  const Tensor& x = a.in(0);
  const Dims dims = broadcast_dims({x.dims, a.ints_input(1)}, a);
  Tensor out = make_tensor(x.type, dims);
  const auto m = broadcast_map(x.dims, dims);
  for (size_t i = 0; i < m.size(); ++i) copy_elem(x, m[i], out, i);
  return {out};
}

std::vector<Tensor> eval_constant_of_shape(const Args& a) {
  const Dims dims = a.ints_input(0);
  for (int64_t d : dims)
    if (d < 0) a.fail("ConstantOfShape's shape has the negative dim " + std::to_string(d));
  Tensor value = make_tensor(ElemType::Float, {1});
  if (const Attribute* v = a.attr("value")) {
    if (v->kind != AttrKind::Tensor || v->t.numel() != 1) a.fail("ConstantOfShape's value must hold one element");
    value = v->t;
  }
  Tensor out = make_tensor(value.type, dims);
  for (size_t i = 0; i < static_cast<size_t>(out.numel()); ++i) copy_elem(value, 0, out, i);
  return {out};
}

std::vector<Tensor> eval_range(const Args& a) {
  const Tensor& start = a.in(0);
  const Tensor& limit = a.in(1);
  const Tensor& delta = a.in(2);
  require_same_type({&start, &limit, &delta}, a);
  for (const Tensor* t : {&start, &limit, &delta})
    if (t->numel() != 1) a.fail("Range's inputs must be scalars");
  if (start.is_float()) {
    // As Range's function body in the spec: the count from Sub, Div and Ceil in the
    // element type, the values by adding delta in the element type.
    const ElemType t = start.type;
    const double s = start.floats[0], l = limit.floats[0], d = delta.floats[0];
    if (d == 0) a.fail("Range's delta is zero");
    const double count = std::max(std::ceil(round_to(t, round_to(t, l - s) / d)), 0.0);
    if (!(count <= static_cast<double>(kMaxFoldedElements))) throw NotFolded{};
    Tensor out = make_tensor(t, {static_cast<int64_t>(count)});
    double v = s;
    for (double& o : out.floats) {
      o = v;
      v = round_to(t, v + d);
    }
    return {out};
  }
  const int64_t s = start.ints[0], l = limit.ints[0], d = delta.ints[0];
  if (d == 0) a.fail("Range's delta is zero");
  const __int128 span = static_cast<__int128>(l) - s;
  __int128 count = span / d;
  if (count * d != span && ((span > 0) == (d > 0))) ++count;  // ceil
  if (count < 0) count = 0;
  if (count > kMaxFoldedElements) throw NotFolded{};
  Tensor out = make_tensor(start.type, {static_cast<int64_t>(count)});
  for (size_t i = 0; i < out.ints.size(); ++i)
    out.ints[i] = wrap_to(start.type, wrapping(s, wrapping(static_cast<int64_t>(i), d, '*'), '+'));
  return {out};
}

std::vector<Tensor> eval_slice(const Args& a) {
  const Tensor& x = a.in(0);
  const auto rank = static_cast<int64_t>(x.dims.size());
  Dims starts, ends, axes, steps;
  if (a.opset() < 10) {
    starts = a.ints_attr("starts").value_or(Dims{});
    ends = a.ints_attr("ends").value_or(Dims{});
    axes = a.ints_attr("axes").value_or(Dims{});
  } else {
    starts = a.ints_input(1);
    ends = a.ints_input(2);
    if (a.has(3)) axes = a.ints_input(3);
    if (a.has(4)) steps = a.ints_input(4);
  }
  if (axes.empty())
    for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<int64_t>(k));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    a.fail("Slice's starts, ends, axes and steps differ in length");
  Dims begin(static_cast<size_t>(rank), 0), step(static_cast<size_t>(rank), 1), dims = x.dims;
  std::set<int64_t> seen;
  for (size_t k = 0; k < starts.size(); ++k) {
    const int64_t ax = normalize_axis(axes[k], rank, a);
    if (!seen.insert(ax).second) a.fail("Slice's axes repeat");
    const int64_t d = x.dims[static_cast<size_t>(ax)];
    const int64_t s = steps[k];
    if (s == 0) a.fail("Slice's step is zero");
    int64_t b = starts[k], e = ends[k];
    if (b < 0) b = b < -d ? -1 : b + d;  // below -d clamps below the range
    if (e < 0) e = e < -d ? -1 : e + d;
    if (s > 0) {
      b = std::clamp(b, int64_t{0}, d);
      e = std::clamp(e, int64_t{0}, d);
    } else {
      b = std::clamp(b, int64_t{0}, d - 1);
      e = std::clamp(e, int64_t{-1}, d - 1);
    }
    // ceil(|e - b| / |s|) elements, in 128 bits: a step may be near INT64_MIN/MAX.
    const __int128 span = s > 0 ? static_cast<__int128>(e) - b : static_cast<__int128>(b) - e;
    const __int128 stride = s > 0 ? static_cast<__int128>(s) : -static_cast<__int128>(s);
    const auto len = static_cast<int64_t>(span > 0 ? (span - 1) / stride + 1 : 0);
    begin[static_cast<size_t>(ax)] = b;
    step[static_cast<size_t>(ax)] = s;
    dims[static_cast<size_t>(ax)] = len;
  }
  Tensor out = make_tensor(x.type, dims);
  const Dims in_strides = strides_of(x.dims);
  Dims idx(static_cast<size_t>(rank), 0);
  for (int64_t lin = 0; lin < out.numel(); ++lin) {
    int64_t src = 0;
    for (size_t k = 0; k < idx.size(); ++k) src += (begin[k] + idx[k] * step[k]) * in_strides[k];
    copy_elem(x, static_cast<size_t>(src), out, static_cast<size_t>(lin));
    for (size_t k = idx.size(); k-- > 0;) {
      if (++idx[k] < dims[k]) break;
      idx[k] = 0;
    }
  }
  return {out};
}

std::vector<Tensor> eval_scatter_nd(const Args& a) {
  const Tensor& data = a.in(0);
  const Tensor& idx = a.in(1);
  const Tensor& upd = a.in(2);
  if (idx.is_float()) a.fail("ScatterND's indices must be integers");
  require_same_type({&data, &upd}, a);
  const std::string reduction = a.attr("reduction") ? a.attr("reduction")->s : "none";
  if (idx.dims.empty()) a.fail("ScatterND's indices must have rank 1 or more");
  const auto k = static_cast<size_t>(idx.dims.back());
  if (k > data.dims.size()) a.fail("ScatterND's index depth exceeds the data's rank");
  Dims want(idx.dims.begin(), idx.dims.end() - 1);
  want.insert(want.end(), data.dims.begin() + static_cast<int64_t>(k), data.dims.end());
  if (upd.dims != want) a.fail("ScatterND's updates have the wrong shape");
  Tensor out = data;
  const Dims strides = strides_of(data.dims);
  int64_t slice = 1;
  for (size_t j = k; j < data.dims.size(); ++j) slice *= data.dims[j];
  const int64_t n_idx = numel_of(Dims(idx.dims.begin(), idx.dims.end() - 1));
  for (int64_t i = 0; i < n_idx; ++i) {
    int64_t base = 0;
    for (size_t j = 0; j < k; ++j) {
      int64_t v = idx.ints[static_cast<size_t>(i) * k + j];
      const int64_t d = data.dims[j];
      if (v < -d || v >= d) a.fail("ScatterND index " + std::to_string(v) + " is out of range");
      if (v < 0) v += d;
      base += v * strides[j];
    }
    for (int64_t e = 0; e < slice; ++e) {
      const auto o = static_cast<size_t>(base + e), u = static_cast<size_t>(i * slice + e);
      if (reduction == "none") { copy_elem(upd, u, out, o); continue; }
      if (out.is_float()) {
        double& t = out.floats[o];
        const double v = upd.floats[u];
        t = round_to(out.type, reduction == "add" ? t + v : reduction == "mul" ? t * v
                                 : reduction == "max" ? std::max(t, v) : std::min(t, v));
      } else {
        int64_t& t = out.ints[o];
        const int64_t v = upd.ints[u];
        t = wrap_to(out.type, reduction == "add" ? wrapping(t, v, '+') : reduction == "mul" ? wrapping(t, v, '*')
                              : reduction == "max" ? std::max(t, v) : std::min(t, v));
      }
    }
  }
  return {out};
}

// The indices of the non-zero elements, one row per axis, in row-major order.
std::vector<Tensor> eval_non_zero(const Args& a) {
  const Tensor& x = a.in(0);
  const Dims strides = strides_of(x.dims);
  std::vector<int64_t> hits;
  for (int64_t i = 0; i < x.numel(); ++i)
    if (x.is_float() ? x.floats[static_cast<size_t>(i)] != 0 : x.ints[static_cast<size_t>(i)] != 0)
      hits.push_back(i);
  const auto rank = static_cast<int64_t>(x.dims.size());
  const auto count = static_cast<int64_t>(hits.size());
  Tensor out = make_tensor(ElemType::Int64, {rank, count});
  for (int64_t k = 0; k < rank; ++k)
    for (int64_t j = 0; j < count; ++j)
      out.ints[static_cast<size_t>(k * count + j)] =
          hits[static_cast<size_t>(j)] / strides[static_cast<size_t>(k)] % x.dims[static_cast<size_t>(k)];
  return {out};
}

using Evaluator = std::function<std::vector<Tensor>(const Args&, const std::string&)>;

template <class F>
Evaluator plain(F f) {
  return [f](const Args& a, const std::string&) { return f(a); };
}

const std::map<std::string, Evaluator>& evaluators() {
  static const std::map<std::string, Evaluator> table = [] {
    std::map<std::string, Evaluator> t;
    for (const char* op : {"Add", "Sub", "Mul", "Div", "Mod"}) t[op] = eval_arithmetic;
    for (const char* op : {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"}) t[op] = eval_comparison;
    for (const char* op : {"Not", "And", "Or", "Xor"}) t[op] = eval_logical;
    for (const char* op : {"Min", "Max"}) t[op] = eval_min_max;
    for (const char* op : {"Floor", "Ceil", "Sqrt", "Neg", "Abs", "Reciprocal"}) t[op] = eval_unary;
    t["Pow"] = plain(eval_pow);
    t["Where"] = plain(eval_where);
    t["Trilu"] = plain(eval_trilu);
    t["Cast"] = plain(eval_cast);
    t["Shape"] = plain(eval_shape);
    t["Size"] = plain(eval_size);
    t["Identity"] = plain(eval_identity);
    t["Constant"] = plain(eval_constant);
    t["Gather"] = plain(eval_gather);
    t["Concat"] = plain(eval_concat);
    t["Unsqueeze"] = plain(eval_unsqueeze);
    t["Squeeze"] = plain(eval_squeeze);
    t["Reshape"] = plain(eval_reshape);
    t["Transpose"] = plain(eval_transpose);
    t["Expand"] = plain(eval_expand);
    t["ConstantOfShape"] = plain(eval_constant_of_shape);
    t["Range"] = plain(eval_range);
    t["Slice"] = plain(eval_slice);
    t["ScatterND"] = plain(eval_scatter_nd);
    t["NonZero"] = plain(eval_non_zero);
    return t;
  }();
  return table;
}

}  // namespace

int64_t wrap_to(ElemType t, int64_t v) {
  switch (t) {
    case ElemType::Bool: return v != 0;
    case ElemType::Uint8: return static_cast<uint8_t>(v);
    case ElemType::Int8: return static_cast<int8_t>(v);
    case ElemType::Uint16: return static_cast<uint16_t>(v);
    case ElemType::Int16: return static_cast<int16_t>(v);
    case ElemType::Int32: return static_cast<int32_t>(v);
    case ElemType::Uint32: return static_cast<uint32_t>(v);
    default: return v;
  }
}

const std::vector<std::string>& foldable_ops() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& [name, fn] : evaluators()) n.push_back(name);
    return n;
  }();
  return names;
}

bool is_foldable_op(const std::string& op_type) { return evaluators().count(op_type) > 0; }

bool reads_only_dims(const std::string& op_type) { return op_type == "Shape" || op_type == "Size"; }

std::optional<std::vector<Tensor>> evaluate_node(const Node& node,
                                                 const std::vector<const Tensor*>& inputs,
                                                 int64_t opset, const std::string& where) {
  auto it = evaluators().find(node.op_type);
  if (it == evaluators().end() || !node.domain.empty()) return std::nullopt;
  try {
    const Args args(node, inputs, opset, where);
    std::vector<Tensor> outputs = it->second(args, node.op_type);
    if (outputs.size() < node.outputs.size()) return std::nullopt;
    return outputs;
  } catch (const NotFolded&) {
    return std::nullopt;
  } catch (const ModelError& e) {
    if (!e.where().empty()) throw;
    throw ModelError(where, e.what());  // from Tensor::numel, which knows no place
  }
}

}  // namespace lnv::onnx_import
