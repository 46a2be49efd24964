#include "generators/random_graph.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "core/analysis/producers.h"
#include "core/error.h"
#include "core/random.h"

namespace lnv::gen {
namespace {

// Values larger than this are not grown further (concat, merges): keeps exact evaluation
// cheap and the graphs readable.
constexpr int64_t kMaxNumel = 96;

struct Value {
  std::string name;
  Shape shape;
  Axes feat;  // the axes holding a producer's output features (sorted), empty if unknown
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
};

using Choices = std::array<uint8_t, 4>;

// The ops satisfying `pred`, in core/ops.def order.
std::vector<Op> ops_where(bool (*pred)(Op)) {
  std::vector<Op> out;
  for (int k = 0; k < static_cast<int>(Op::kCount); ++k)
    if (pred(static_cast<Op>(k))) out.push_back(static_cast<Op>(k));
  return out;
}

Choices sub_choices(const Step& s, int from) {
  Choices c{};
  for (int k = 0; k < 4; ++k) c[k] = s.c[(from + k) % 8];
  return c;
}

class Builder {
 public:
  explicit Builder(const GenConfig& cfg) : cfg_(cfg) {}

  Graph build(const Recipe& r) {
    g_.name = "generated";
    const int64_t span = cfg_.max_dim - cfg_.min_dim + 1;
    batch_ = 1 + r.batch % 2;
    tokens_ = cfg_.min_dim + r.tokens % span;
    const int64_t features = dim(r.features);
    g_.inputs.push_back({"x", {batch_, tokens_, features}, DType::float_, 0});
    shapes_["x"] = g_.inputs.back().shape;
    pool_.push_back({"x", {batch_, tokens_, features}, {2}});
    for (const Step& s : r.steps) {
      if (static_cast<int>(g_.nodes.size()) >= cfg_.max_nodes) break;
      apply(s);
    }
    if (g_.nodes.empty()) produce(pool_.back(), Choices{});
    choose_outputs(r.extra_outputs, r.dead_sinks);
    try {
      g_.finalize();
    } catch (const ModelError& e) {
      throw InternalError(std::string("generator built an invalid graph: ") + e.what() +
                          "\n" + describe(g_));
    }
    return std::move(g_);
  }

 private:
  void apply(const Step& s) {
    switch (s.kind) {
      case StepKind::produce: produce(pick(s.c[0]), sub_choices(s, 1)); return;
      case StepKind::transport: transport(pick(s.c[0]), sub_choices(s, 1)); return;
      case StepKind::combine: combine(pick(s.c[0]), sub_choices(s, 1)); return;
      case StepKind::norm: norm(pick(s.c[0]), sub_choices(s, 1), false); return;
      case StepKind::fold_block: fold_block(s); return;
      case StepKind::kCount: break;
    }
    throw InternalError("bad StepKind");
  }

  // ---- small helpers ----

  // A feature size.
  int64_t dim(uint8_t c) const {
    return cfg_.min_features + c % (cfg_.max_features - cfg_.min_features + 1);
  }
  std::string fresh(std::string_view stem) { return std::string(stem) + std::to_string(counter_++); }

  std::string param(std::string_view stem, Shape shape) {
    Param p;
    p.name = fresh(stem);
    p.shape = std::move(shape);
    p.source = ParamSource::init;
    p.init.dist = "normal";
    p.init.mean = 0.0;
    p.init.std = cfg_.param_std;
    SplitMix64 stream(g_.seed, p.name);
    p.values.resize(numel(p.shape));
    for (double& v : p.values) v = p.init.mean + p.init.std * stream.normal();
    shapes_[p.name] = p.shape;
    g_.params.push_back(std::move(p));
    return g_.params.back().name;
  }

  // Appends a node, infers its shape with the core's rule and adds it to the pool.
  Value emit(Node n, Axes feat) {
    std::vector<Shape> in;
    for (const std::string& name : n.inputs) in.push_back(shapes_.at(name));
    Shape out;
    try {
      out = infer_shape(g_, n, in);
    } catch (const ModelError& e) {
      throw InternalError(std::string("generator built an invalid node: ") + e.what() +
                          "\n" + describe(g_));
    }
    shapes_[n.name] = out;
    g_.nodes.push_back(std::move(n));
    for (int64_t a : feat) LNV_INTERNAL_ASSERT(a >= 0 && a < int64_t(out.size()), "feat axis");
    pool_.push_back({g_.nodes.back().name, out, std::move(feat)});
    return pool_.back();
  }

  Node node(Op op, std::vector<std::string> inputs, std::string_view stem = {}) {
    Node n;
    n.op = op;
    n.name = fresh(stem.empty() ? op_name(op) : stem);
    n.inputs = std::move(inputs);
    return n;
  }

  // The c-th most recent pool value satisfying `ok` (c = 0: the most recent); the most
  // recent value at all when none does.
  template <class Pred>
  Value pick(uint8_t c, Pred ok) const {
    std::vector<const Value*> cands;
    for (auto it = pool_.rbegin(); it != pool_.rend(); ++it)
      if (ok(*it)) cands.push_back(&*it);
    if (cands.empty()) return pool_.back();
    return *cands[c % cands.size()];
  }
  Value pick(uint8_t c) const {
    return pick(c, [](const Value&) { return true; });
  }
  Value pick_rank3(uint8_t c) const {
    return pick(c, [](const Value& v) { return v.rank() == 3; });
  }

  // The feature axes of v, or its last axis when unknown.
  static Axes features_of(const Value& v) {
    return v.feat.empty() ? Axes{v.rank() - 1} : v.feat;
  }
  static int64_t last_feature(const Value& v) { return features_of(v).back(); }

  // ---- producers ----

  Value produce(const Value& x, Choices c) {
    switch (c[0] % 11) {
      case 0:
      case 9: return linear(x, c);
      case 1: return matmul_param_b(x, c);
      case 2: return matmul_param_a(x, c);
      case 3: return matmul_activations(x, c);
      case 4: return embedding(c);
      case 5: return conv1d(pick_rank3(c[1]), c);
      case 6: return conv2d(pick_rank3(c[1]), c);
      case 7: return rnn(pick_rank3(c[1]), c);
      case 8: return attention(pick_rank3(c[1]), c);
      default: return tied_linear(x, c);
    }
  }

  Value linear(const Value& x, Choices c) {
    Node n = node(Op::linear, {x.name});
    n.weight = param("W", {dim(c[1]), x.shape.back()});
    if (c[2] & 1) n.bias = param("b", {dim(c[1])});
    return emit(std::move(n), {x.rank() - 1});
  }

  // A linear reusing an existing matrix whose columns match (weight tying: an embedding
  // table as output projection, or a linear weight used twice).
  Value tied_linear(const Value& x, Choices c) {
    std::vector<std::string> matches;
    for (const Param& p : g_.params)
      if (p.shape.size() == 2 && p.shape[1] == x.shape.back()) matches.push_back(p.name);
    if (matches.empty()) return linear(x, c);
    Node n = node(Op::linear, {x.name});
    n.weight = matches[c[1] % matches.size()];
    if (c[2] & 1) n.bias = param("b", {shapes_.at(n.weight)[0]});
    return emit(std::move(n), {x.rank() - 1});
  }

  Value matmul_param_b(const Value& x, Choices c) {
    if (x.rank() < 2) return linear(x, c);
    Node n = node(Op::matmul, {x.name, ""});
    const int64_t k = x.shape.back(), out = dim(c[1]);
    n.transpose_b = c[2] & 1;
    n.inputs[1] = param("B", n.transpose_b ? Shape{out, k} : Shape{k, out});
    return emit(std::move(n), {x.rank() - 1});
  }

  // P [m, k] @ x [..., k, n]: the output features are the second-last axis.
  Value matmul_param_a(const Value& x, Choices c) {
    if (x.rank() < 2) return linear(x, c);
    const int64_t k = x.shape[x.rank() - 2];
    Node n = node(Op::matmul, {param("A", {dim(c[1]), k}), x.name});
    return emit(std::move(n), {x.rank() - 2});
  }

  // x @ yᵀ with y another activation: attention-like scores, not a producer.
  Value matmul_activations(const Value& x, Choices c) {
    if (x.rank() < 2) return linear(x, c);
    const Value y = pick(c[1], [&](const Value& v) { return v.shape == x.shape; });
    Node n = node(Op::matmul, {x.name, y.shape == x.shape ? y.name : x.name});
    n.transpose_b = true;
    return emit(std::move(n), {});
  }

  Value embedding(Choices c) {
    Input ids;
    ids.name = fresh("ids");
    ids.shape = {batch_, tokens_};
    ids.dtype = DType::index;
    ids.range = dim(c[1]);
    shapes_[ids.name] = ids.shape;
    g_.inputs.push_back(ids);
    Node n = node(Op::embedding, {ids.name});
    n.weight = param("E", {ids.range + (c[3] & 1), dim(c[2])});
    return emit(std::move(n), {2});
  }

  // Channels-first conv over a token sequence [N, T, C]: transpose to [N, C, T], convolve,
  // transpose back so that an LN over the last axis normalizes channels.
  Value conv1d(const Value& x, Choices c) {
    if (x.rank() != 3) return linear(x, c);
    const Value cf = transpose(x, {0, 2, 1});
    const int64_t ch = cf.shape[1], len = cf.shape[2];
    Node n = node(Op::conv1d, {cf.name});
    set_groups(n, ch, c);
    n.padding = {(c[3] >> 2) & 1};
    const int64_t k = 1 + c[3] % std::min<int64_t>(3, len + 2 * n.padding[0]);
    n.weight = param("K", {conv_out_, ch / n.groups, k});
    if (c[3] & 8) n.bias = param("b", {conv_out_});
    const Value y = emit(std::move(n), {1});
    return transpose(y, {0, 2, 1});
  }

  Value conv2d(const Value& x, Choices c) {
    if (x.rank() != 3) return linear(x, c);
    const Value cf = transpose(x, {0, 2, 1});
    const int64_t ch = cf.shape[1], len = cf.shape[2];
    const int64_t h = (len % 2 == 0 && (c[3] & 16)) ? len / 2 : len, w = len / h;
    const Value img = reshape(cf, {cf.shape[0], ch, h, w}, {1});
    Node n = node(Op::conv2d, {img.name});
    set_groups(n, ch, c);
    const int64_t kh = 1 + c[3] % std::min<int64_t>(2, h);
    const int64_t kw = 1 + (c[3] >> 1) % std::min<int64_t>(2, w);
    n.weight = param("K", {conv_out_, ch / n.groups, kh, kw});
    if (c[3] & 8) n.bias = param("b", {conv_out_});
    const Value y = emit(std::move(n), {1});
    const Value flat = reshape(y, {y.shape[0], y.shape[1], y.shape[2] * y.shape[3]}, {1});
    return transpose(flat, {0, 2, 1});
  }

  // groups = 1, grouped (1 < groups < C, or a channel multiplier), or depthwise.
  void set_groups(Node& n, int64_t ch, Choices c) {
    switch (c[2] % 3) {
      case 0:
        n.groups = 1;
        conv_out_ = dim(c[1]);
        return;
      case 1: {
        int64_t g = 0;
        for (int64_t d = 2; d < ch; ++d)
          if (ch % d == 0) g = d;
        n.groups = g ? g : ch;
        conv_out_ = g ? g * (1 + (c[1] & 1)) : 2 * ch;
        return;
      }
      default:
        n.groups = ch;
        conv_out_ = ch;
        return;
    }
  }

  Value rnn(const Value& x, Choices c) {
    if (x.rank() != 3) return linear(x, c);
    if (c[3] & 16) return gated_recurrent(x, c);
    Node n = node(Op::rnn, {x.name});
    const int64_t h = dim(c[2]);
    n.weight_ih = param("Wih", {h, x.shape[2]});
    n.weight_hh = param("Whh", {h, h});
    if (c[3] & 1) n.bias = param("b", {h});
    if (c[3] & 2) {
      RnnNorm norm;
      if (c[3] & 4) norm.weight = param("g", {h});
      if (c[3] & 8) norm.bias = param("beta", {h});
      n.norm = norm;
    }
    return emit(std::move(n), {2});
  }

  // An lstm or gru reading x as [T, N, F] (ONNX's layout): any direction, with or
  // without bias and initial states, shorter sequences for some batch entries, and one of
  // its outputs (y [T, D, N, H], y_h or y_c [D, N, H]).
  Value gated_recurrent(const Value& x, Choices c) {
    const bool lstm = c[3] & 32;
    Node n = node(lstm ? Op::lstm : Op::gru, {x.name});
    const int64_t h = dim(c[2]), gates = lstm ? 4 : 3;
    static const char* kDirections[] = {"forward", "reverse", "bidirectional"};
    n.direction = kDirections[(c[2] >> 4) % 3];
    const int64_t dirs = n.direction == "bidirectional" ? 2 : 1;
    const int64_t t = x.shape[0], batch = x.shape[1];
    n.weight_ih = param("W", {dirs, gates * h, x.shape[2]});
    n.weight_hh = param("R", {dirs, gates * h, h});
    if (c[3] & 1) n.bias = param("B", {dirs, 2 * gates * h});
    if (c[3] & 2) n.initial_h = param("h0", {dirs, batch, h});
    if (lstm && (c[3] & 2)) n.initial_c = param("c0", {dirs, batch, h});
    if (!lstm) n.linear_before_reset = c[3] & 4;
    if ((c[3] & 8) && batch > 1)
      for (int64_t b = 0; b < batch; ++b) n.sequence_lens.push_back(std::max<int64_t>(1, t - b));
    n.output = c[3] & 64 ? (lstm && (c[3] & 128) ? "y_c" : "y_h") : "y";
    return emit(std::move(n), {n.output == "y" ? 3 : 2});
  }

  Value attention(const Value& x, Choices c) {
    if (x.rank() != 3) return linear(x, c);
    const int64_t d = x.shape[2];
    std::vector<int64_t> divisors;
    for (int64_t h = 1; h <= d; ++h)
      if (d % h == 0) divisors.push_back(h);
    Node n = node(Op::attention, {x.name});
    n.heads = divisors[c[2] % divisors.size()];
    n.causal = c[3] & 1;
    n.wq = param("Wq", {d, d});
    n.wk = param("Wk", {d, d});
    n.wv = param("Wv", {d, d});
    n.wo = param("Wo", {d, d});
    if (c[3] & 2) n.bq = param("bq", {d});
    if (c[3] & 4) n.bk = param("bk", {d});
    if (c[3] & 8) n.bv = param("bv", {d});
    if (c[3] & 16) n.bo = param("bo", {d});
    return emit(std::move(n), {2});
  }

  // ---- shape ops ----

  Value transpose(const Value& x, std::vector<int64_t> perm) {
    Node n = node(Op::transpose, {x.name});
    n.perm = perm;
    Axes feat;
    for (int64_t a : x.feat)
      feat.push_back(std::find(perm.begin(), perm.end(), a) - perm.begin());
    std::sort(feat.begin(), feat.end());
    return emit(std::move(n), feat);
  }

  Value reshape(const Value& x, Shape shape, Axes feat) {
    Node n = node(Op::reshape, {x.name});
    n.shape = std::move(shape);
    return emit(std::move(n), std::move(feat));
  }

  // ---- transports: one value in, one out ----

  Value transport(const Value& v, Choices c) {
    const int64_t f = last_feature(v);
    switch (c[0] % 17) {
      case 0: {
        Node n = node(Op::dropout, {v.name});
        n.p = (c[1] & 1) ? 0.5 : 0.1;
        return emit(std::move(n), v.feat);
      }
      case 1: {
        static const double kFactors[] = {0.5, -1.5, 2.0, -0.25};
        Node n = node(Op::scale, {v.name});
        n.factor = kFactors[c[1] % 4];
        return emit(std::move(n), v.feat);
      }
      case 2: return binary(Op::mul, v, param("s", {1}), v.feat);
      case 3: return binary(Op::mul, v, param("tok", per_token_shape(v)), v.feat);
      case 4: return binary(Op::mul, v, per_token_activation(v, c[1]).name, v.feat);
      case 5: return binary(Op::mul, v, param("gain", per_feature_shape(v)), v.feat);
      case 6: {
        const std::string denom =
            (c[1] & 1) ? per_token_activation(v, c[2]).name : param("d", {1});
        const Value e = emit(node(Op::exp, {denom}), {});
        return binary(Op::div, v, e.name, v.feat);
      }
      case 7: {
        static const std::vector<Op> kUnary = ops_where(is_unary_nonlinearity);
        const Op op = kUnary[c[1] % kUnary.size()];
        // sqrt, reciprocal and log need a positive operand (outside their domain the
        // evaluators refuse): they read exp(v).
        std::string in = v.name;
        if (op == Op::sqrt || op == Op::reciprocal || op == Op::log) in = emit(node(Op::exp, {v.name}), v.feat).name;
        Node n = node(op, {in});
        // Kinks where the values are (as relu's at 0): a clip or hard_sigmoid that no
        // value crosses is affine, and passes a shift that an LN after it absorbs, which
        // the rules (a nonlinearity breaks) do not know. Unbounded, a clip would be the
        // identity.
        if (op == Op::clip) {
          if (c[2] % 3 == 0) n.min = -0.25, n.max = 0.25;
          if (c[2] % 3 == 1) n.max = 0.0;
          if (c[2] % 3 == 2) n.min = 0.0;
        }
        if (op == Op::hard_sigmoid) n.alpha = 1.0, n.beta = 0.5;  // kinks at -0.5, 0.5
        return emit(std::move(n), v.feat);
      }
      case 8: {
        const int64_t axis = (c[1] & 1) ? other_axis(v, c[2]) : f;
        if (!wide(v, {axis})) return linear(v, c);
        Node n = node(Op::softmax, {v.name});
        n.axis = axis;
        if (c[1] & 2) {  // masked along its axis; position 0 is always kept
          const int64_t d = v.shape[size_t(axis)];
          n.condition_shape = {d};
          n.condition_shape.insert(n.condition_shape.end(), size_t(v.rank() - 1 - axis), 1);
          for (int64_t i = 0; i < d; ++i) n.condition.push_back((i * (c[2] % 3 + 1)) % 3 != 1 ? 1 : 0);
        }
        return emit(std::move(n), v.feat);
      }
      case 9: {
        const Axes axes = (c[1] & 1) ? Axes{other_axis(v, c[2])} : features_of(v);
        if (!wide(v, axes)) return linear(v, c);
        Node n = node(Op::center, {v.name});
        n.axes = axes;
        return emit(std::move(n), v.feat);
      }
      case 10: {
        const Axes axes = (c[1] & 1) ? Axes{other_axis(v, c[2])} : features_of(v);
        if (!wide(v, axes)) return linear(v, c);
        Node m = node(Op::mean, {v.name});
        m.axes = axes;
        m.keepdims = true;
        const Value mu = emit(std::move(m), {});
        return binary(Op::sub, v, mu.name, v.feat);
      }
      case 11:
      case 12: return pool(v, c[0] % 17 == 11 ? Op::mean : Op::max, c);
      case 13: {
        if (v.rank() < 2) return linear(v, c);
        std::vector<int64_t> perm(v.rank());
        for (int64_t i = 0; i < v.rank(); ++i) perm[i] = i;
        if (c[1] % 3 == 0) std::swap(perm[v.rank() - 1], perm[v.rank() - 2]);
        else if (c[1] % 3 == 1) std::swap(perm[0], perm[1]);
        else std::reverse(perm.begin(), perm.end());
        return transpose(v, perm);
      }
      case 14: return c[1] % 3 == 2 ? slice(v, c) : reshape_keep(v, c);
      case 15: return c[1] % 4 == 3 ? pad_or_expand(v, c) : reshape_break(v, c);
      default: return c[1] % 4 == 3 ? where(v, c) : reshape_split_features(v, c);
    }
  }

  // A pad of one axis (a feature axis or another) by one element on each side (so no
  // later slice takes every padded position away), with 0 or 0.5; or a keepdims mean over
  // an axis expanded back to v's shape.
  Value pad_or_expand(const Value& v, Choices c) {
    const int64_t axis = (c[2] & 1) ? other_axis(v, c[3]) : last_feature(v);
    if (c[2] & 2) {
      if (!wide(v, {axis})) return reshape_break(v, c);
      Node m = node(Op::mean, {v.name});
      m.axes = {axis};
      m.keepdims = true;
      const Value mu = emit(std::move(m), {});
      Node e = node(Op::expand, {mu.name});
      e.shape = (c[3] & 1) ? v.shape : Shape{v.shape[size_t(axis)]};
      if (!(c[3] & 1)) e.shape.insert(e.shape.end(), size_t(v.rank() - 1 - axis), 1);
      return emit(std::move(e), v.feat);
    }
    Node n = node(Op::pad, {v.name});
    n.pads.assign(2 * size_t(v.rank()), 0);
    n.pads[size_t(axis)] = n.pads[size_t(axis + v.rank())] = 1;
    n.value = c[3] % 4 == 0 ? 0.5 : 0.0;
    return emit(std::move(n), v.feat);
  }

  // where(cond, v, other) with a condition along one axis (a feature axis or another):
  // other is a broadcast param, a per-token activation, or v itself.
  Value where(const Value& v, Choices c) {
    const int64_t axis = (c[2] & 1) ? other_axis(v, c[3]) : last_feature(v);
    const int64_t d = v.shape[size_t(axis)];
    Node n = node(Op::where, {});
    n.condition_shape = {d};
    n.condition_shape.insert(n.condition_shape.end(), size_t(v.rank() - 1 - axis), 1);
    for (int64_t i = 0; i < d; ++i) n.condition.push_back((i * (c[3] % 3 + 1)) % 3 != 1 ? 1 : 0);
    std::string other;
    switch (c[2] / 2 % 3) {
      case 0: other = param("wz", per_feature_shape(v)); break;
      case 1: other = per_token_activation(v, c[3]).name; break;
      default: other = v.name; break;
    }
    n.inputs = (c[3] & 1) ? std::vector<std::string>{other, v.name}
                          : std::vector<std::string>{v.name, other};
    return emit(std::move(n), v.feat);
  }

  Value binary(Op op, const Value& a, const std::string& b, Axes feat, bool swap = false) {
    return emit(node(op, swap ? std::vector<std::string>{b, a.name}
                              : std::vector<std::string>{a.name, b}),
                std::move(feat));
  }

  // An axis of v other than its (last) feature axis with at least 3 elements, if it has
  // one (else the feature axis). Reductions and norms over 1 or 2 elements are degenerate
  // (x - mean(x) is 0, or (s, -s)): identities outside the analysis' vocabulary.
  static int64_t other_axis(const Value& v, uint8_t c) {
    const int64_t f = last_feature(v);
    std::vector<int64_t> axes;
    for (int64_t a = 0; a < v.rank(); ++a)
      if (a != f && v.shape[a] >= 3) axes.push_back(a);
    return axes.empty() ? f : axes[c % axes.size()];
  }

  // Whether a reduction or norm over `axes` of v covers at least 3 elements (see above).
  static bool wide(const Value& v, const Axes& axes) {
    int64_t n = 1;
    for (int64_t a : axes) n *= v.shape[a];
    return n >= 3;
  }

  // A broadcast factor constant along the features: size 1 on the feature axes, the
  // leading (batch) axis dropped.
  static Shape per_token_shape(const Value& v) {
    const bool drop_batch = v.rank() > 1 && features_of(v).front() > 0;
    Shape s(v.shape.begin() + (drop_batch ? 1 : 0), v.shape.end());
    const int64_t offset = v.rank() - static_cast<int64_t>(s.size());
    for (int64_t a : features_of(v)) s[a - offset] = 1;
    return s;
  }

  // A broadcast factor varying only along the features: v's feature dims, 1 elsewhere
  // after the first feature axis.
  static Shape per_feature_shape(const Value& v) {
    const Axes f = features_of(v);
    Shape s(v.shape.begin() + f.front(), v.shape.end());
    for (int64_t a = f.front(); a < v.rank(); ++a)
      if (!std::binary_search(f.begin(), f.end(), a)) s[a - f.front()] = 1;
    return s;
  }

  // mean over the features of some value shaped like v (maybe v itself): a per-token
  // factor that is an activation.
  Value per_token_activation(const Value& v, uint8_t c) {
    const Value w = pick(c, [&](const Value& u) { return u.shape == v.shape; });
    Node m = node(Op::mean, {w.name});
    m.axes = features_of(v);
    m.keepdims = true;
    return emit(std::move(m), {});
  }

  Value pool(const Value& v, Op op, Choices c) {
    if (v.rank() < 2) return linear(v, c);
    Node n = node(op, {v.name});
    const int64_t axis = (c[1] & 1) ? last_feature(v) : other_axis(v, c[2]);
    if (!wide(v, {axis})) return linear(v, c);
    n.axes = {axis};
    n.keepdims = c[1] & 2;
    Axes feat;
    for (int64_t a : v.feat) {
      if (a == axis) continue;
      feat.push_back(n.keepdims || a < axis ? a : a - 1);
    }
    if (!n.keepdims && std::binary_search(v.feat.begin(), v.feat.end(), axis)) feat.clear();
    return emit(std::move(n), feat);
  }

  // Merges the two leading axes (a block boundary the features do not cross) or adds a
  // unit axis in front.
  // A slice along one axis of at least 2 elements (a feature axis or another): from 1 to
  // the end, every second from 0, or all but the last; never the whole axis.
  Value slice(const Value& v, Choices c) {
    std::vector<int64_t> axes;
    for (int64_t a = 0; a < v.rank(); ++a)
      if (v.shape[a] >= 2) axes.push_back(a);
    if (axes.empty()) return reshape_keep(v, c);
    const int64_t axis = axes[c[2] % axes.size()];
    const int64_t d = v.shape[axis];
    Node n = node(Op::slice, {v.name});
    n.axes = {c[3] & 1 ? axis : axis - v.rank()};
    switch (c[3] % 3) {
      case 0: n.starts = {1}, n.ends = {std::numeric_limits<int64_t>::max()}; break;
      case 1: n.starts = {0}, n.ends = {d}, n.steps = {2}; break;
      default: n.starts = {-d}, n.ends = {-1}; break;
    }
    return emit(std::move(n), v.feat);
  }

  Value reshape_keep(const Value& v, Choices c) {
    const Axes f = features_of(v);
    if (v.rank() >= 3 && f.front() >= 2 && (c[1] & 1)) {
      Shape s = {v.shape[0] * v.shape[1]};
      s.insert(s.end(), v.shape.begin() + 2, v.shape.end());
      Axes feat;
      for (int64_t a : f) feat.push_back(a - 1);
      return reshape(v, s, feat);
    }
    Shape s = {1};
    s.insert(s.end(), v.shape.begin(), v.shape.end());
    Axes feat;
    for (int64_t a : f) feat.push_back(a + 1);
    return reshape(v, s, feat);
  }

  // Token merge [.., T, F] -> [.., T/2, 2F], or [.., T, F] -> [.., T*F]: the last axis
  // now mixes elements of different feature blocks.
  Value reshape_break(const Value& v, Choices c) {
    if (v.rank() < 2 || numel(v.shape) > kMaxNumel) return linear(v, c);
    Shape s(v.shape.begin(), v.shape.end() - 2);
    const int64_t t = v.shape[v.rank() - 2], f = v.shape.back();
    if (t % 2 == 0 && !(c[1] & 1)) {
      s.push_back(t / 2);
      s.push_back(2 * f);
    } else {
      s.push_back(t * f);
    }
    return reshape(v, s, {static_cast<int64_t>(s.size()) - 1});
  }

  // [.., F] -> [.., F/2, 2] (or a trailing unit axis): the features span two axes.
  Value reshape_split_features(const Value& v, Choices c) {
    const Axes f = features_of(v);
    if (f.size() != 1 || f[0] != v.rank() - 1) return reshape_keep(v, c);
    Shape s(v.shape.begin(), v.shape.end() - 1);
    const int64_t n = v.shape.back();
    s.push_back(n % 2 == 0 ? n / 2 : n);
    s.push_back(n % 2 == 0 ? 2 : 1);
    return reshape(v, s, {v.rank() - 1, v.rank()});
  }

  // ---- combines: v and something else ----

  Value combine(const Value& v, Choices c) {
    const Axes f = features_of(v);
    switch (c[0] % 10) {
      case 0:
      case 1: {
        // Another value: v - v would be identically zero (a degenerate constant).
        const Value w = pick(c[1], [&](const Value& u) {
          return u.shape == v.shape && u.name != v.name;
        });
        if (w.shape != v.shape || w.name == v.name)
          return binary(Op::add, v, param("c", {1}), v.feat, c[2] & 1);
        return binary(c[0] % 10 == 0 ? Op::add : Op::sub, v, w.name, v.feat, c[2] & 1);
      }
      case 2: return binary(Op::add, v, param("bias", per_feature_shape(v)), v.feat, c[2] & 1);
      case 3: return binary(Op::add, v, param("c", {1}), v.feat, c[2] & 1);
      case 4: {
        if (v.rank() < 2) return binary(Op::add, v, param("c", {1}), v.feat);
        Shape s(v.shape.begin() + 1, v.shape.end());
        return binary(Op::add, v, param("pos", s), v.feat);
      }
      case 5: {
        if (v.rank() < 2) return binary(Op::add, v, param("c", {1}), v.feat);
        const int64_t k = dim(c[1]);
        Node m = node(Op::matmul, {param("P", {v.shape[v.rank() - 2], k}),
                                   param("Q", {k, v.shape.back()})});
        const Value pos = emit(std::move(m), {});
        return binary(Op::add, v, pos.name, v.feat);
      }
      case 6: return concat(v, v.rank() - 1, c);
      case 7: return concat(v, other_axis(v, c[2]), c);
      case 8: {
        const Value w = pick(c[1], [&](const Value& u) { return u.shape == v.shape; });
        const Value gate = emit(node(Op::sigmoid, {w.name}), {});
        return binary(Op::mul, v, gate.name, v.feat);
      }
      default: {
        // A value concatenated with a fresh producer of the same rows along the features.
        if (numel(v.shape) > kMaxNumel) return linear(v, c);
        const Value src = pick(c[1], [&](const Value& u) {
          return u.rank() == v.rank() &&
                 std::equal(u.shape.begin(), u.shape.end() - 1, v.shape.begin());
        });
        if (src.rank() != v.rank()) return concat(v, v.rank() - 1, c);
        const Value p = linear(src, c);
        Node n = node(Op::concat, {v.name, p.name});
        n.axis = -1;
        return emit(std::move(n), v.feat);
      }
    }
  }

  // Concatenates v with a pool value of matching shape (maybe v itself) along `axis`.
  Value concat(const Value& v, int64_t axis, Choices c) {
    if (numel(v.shape) > kMaxNumel) return linear(v, c);
    const Value w = pick(c[1], [&](const Value& u) {
      if (u.rank() != v.rank()) return false;
      for (int64_t a = 0; a < v.rank(); ++a)
        if (a != axis && u.shape[a] != v.shape[a]) return false;
      return true;
    });
    const bool ok = w.rank() == v.rank();
    Node n = node(Op::concat, {v.name, ok ? w.name : v.name});
    if (c[3] & 1) std::swap(n.inputs[0], n.inputs[1]);
    n.axis = axis;
    return emit(std::move(n), v.feat);
  }

  // ---- norms ----

  // layer_norm (mostly) or rms_norm over the features, the last axis or other axes;
  // `over_features` forces a layer_norm over v's feature axes.
  Value norm(const Value& v, Choices c, bool over_features) {
    const bool rms = !over_features && c[0] % 4 == 3;
    Node n = node(rms ? Op::rms_norm : Op::layer_norm, {v.name}, rms ? "rms" : "ln");
    if (over_features) {
      n.axes = features_of(v);
    } else {
      switch (c[1] % 4) {
        case 0:
        case 1: n.axes = features_of(v); break;
        case 2: n.axes = {v.rank() - 1}; break;
        default:
          n.axes = v.rank() >= 2 && (c[2] & 4) ? Axes{v.rank() - 2, v.rank() - 1}
                                               : Axes{other_axis(v, c[3])};
      }
    }
    if (!wide(v, n.axes)) {
      // Give it features to normalize.
      const Value h = linear(v, c);
      n.inputs = {h.name};
      n.axes = {h.rank() - 1};
      Shape affine{h.shape.back()};
      if (c[2] & 1) n.weight = param("g", affine);
      if (c[2] & 2) n.bias = param("beta", affine);
      return emit(std::move(n), h.feat);
    }
    Shape affine;
    for (int64_t a : n.axes) affine.push_back(v.shape[a]);
    if (c[2] & 1) n.weight = param("g", affine);
    if (c[2] & 2) n.bias = param("beta", affine);
    return emit(std::move(n), v.feat);
  }

  // A LayerScale step (docs/spec/semantics.md, "LayerScale"): γ ⊙ z with z the value (a
  // producer's output), maybe plus a per-feature bias and moved by a transpose there and
  // back, γ per feature; or, on the rule's edges, γ varying along the tokens too, a bias
  // broadcast along the features, or z also read by a second consumer (a graph output
  // then, or a later step): not a LayerScale.
  Value layer_scale(const Value& v, uint8_t c) {
    Value z = v;
    if (c & 1) z = binary(Op::add, z, param("lsb", (c & 8) ? Shape{1} : per_feature_shape(z)), z.feat);
    if ((c & 2) && z.rank() >= 2) {
      std::vector<int64_t> perm(z.rank());
      for (int64_t a = 0; a < z.rank(); ++a) perm[a] = a;
      std::swap(perm[0], perm[size_t(z.rank() - 1)]);
      z = transpose(transpose(z, perm), perm);
    }
    Shape g = per_feature_shape(z);
    if ((c & 4) && z.rank() >= 2 && g.size() == size_t(z.rank())) g = z.shape, g[0] = 1;
    if ((c & 4) && g.size() < size_t(z.rank())) g.insert(g.begin(), z.shape[size_t(z.rank() - 1 - g.size())]);
    if (c & 16) pool_.push_back(z);  // a later step may read z: the chain is then shared
    return binary(Op::mul, z, param("gamma", g), z.feat, c & 32);
  }

  // A producer, maybe a LayerScale, up to two transports or combines, then a LayerNorm
  // over its features.
  void fold_block(const Step& s) {
    const size_t pool_before = pool_.size();
    Value v = produce(pick(s.c[0]), sub_choices(s, 1));
    if ((s.c[6] ^ s.c[7]) % 3 == 2) v = layer_scale(v, s.c[6] ^ s.c[4]);
    const int hops = s.c[5] % 3;
    for (int k = 0; k < hops; ++k) {
      const uint8_t sel = s.c[6 + k];
      const Choices c = {static_cast<uint8_t>(sel >> 1), s.c[7 - k],
                         static_cast<uint8_t>(s.c[5] >> 2), static_cast<uint8_t>(sel ^ s.c[5])};
      v = (sel & 1) ? combine(v, c) : transport(v, c);
    }
    // A post-norm block's norm always has a bias (the one the fold may move).
    const bool post = (s.c[4] & 0x60) == 0x60;
    Value ln = norm(v, Choices{0, 0, static_cast<uint8_t>((s.c[5] >> 4) | (post ? 2 : 0)), 0}, true);
    if (post) ln = post_norm(ln, s.c[4], s.c[1]);
    // Half the blocks keep their intermediates for later steps (which then read the
    // producer's raw output, usually making the fold unsafe); the others are sealed.
    if (!(s.c[5] & 0x40)) {
      pool_.resize(pool_before);
      pool_.push_back(ln);
    }
  }

  // BERT's post-norm shape (docs/spec/semantics.md, "Moving the bias"): the norm y read by
  // a linear with a bias, and summed by a residual add with a projection back to y's width
  // (a linear with a bias, or without one; maybe through a transpose pair, and a dropout);
  // returns the sum. A norm over the last axis alone, else y itself.
  Value post_norm(const Value& y, uint8_t c, uint8_t width) {
    if (y.feat != Axes{y.rank() - 1}) return y;
    Node up = node(Op::linear, {y.name});
    up.weight = param("W", {dim(width), y.shape.back()});
    up.bias = param("b", {dim(width)});
    const Value h = emit(std::move(up), {y.rank() - 1});
    const Value a = emit(node(Op::gelu, {h.name}), h.feat);
    Node down = node(Op::linear, {a.name});
    down.weight = param("W", {y.shape.back(), h.shape.back()});
    if (!(c & 1)) down.bias = param("b", {y.shape.back()});
    Value z = emit(std::move(down), {y.rank() - 1});
    if ((c & 2) && z.rank() >= 2) {
      std::vector<int64_t> perm(z.rank());
      for (int64_t k = 0; k < z.rank(); ++k) perm[k] = k;
      std::swap(perm[0], perm[size_t(z.rank() - ((c & 16) ? 1 : 2))]);  // (c & 16): the features leave the last axis and come back
      z = transpose(transpose(z, perm), perm);
    }
    if (c & 4) {
      Node drop = node(Op::dropout, {z.name});
      drop.p = 0.1;
      z = emit(std::move(drop), z.feat);
    }
    return binary(Op::add, y, z.name, y.feat, c & 8);
  }

  // The last node, every other node nobody reads (unless `dead` leaves it a dead branch),
  // and a few more.
  void choose_outputs(const std::vector<uint8_t>& extra, uint8_t dead) {
    std::vector<std::string> nodes;
    std::set<std::string> read;
    for (const Node& n : g_.nodes) {
      nodes.push_back(n.name);
      read.insert(n.inputs.begin(), n.inputs.end());
    }
    g_.outputs.push_back(nodes.back());
    int sink = 0;
    for (auto it = nodes.rbegin() + 1; it != nodes.rend(); ++it) {
      if (read.count(*it)) continue;
      if (!((dead >> (sink++ % 8)) & 1)) g_.outputs.push_back(*it);
    }
    for (uint8_t c : extra) {
      const std::string& name = nodes[nodes.size() - 1 - c % nodes.size()];
      if (std::find(g_.outputs.begin(), g_.outputs.end(), name) == g_.outputs.end())
        g_.outputs.push_back(name);
    }
  }

  const GenConfig& cfg_;
  Graph g_;
  std::vector<Value> pool_;
  std::map<std::string, Shape> shapes_;
  int counter_ = 0;
  int64_t batch_ = 1, tokens_ = 2;
  int64_t conv_out_ = 1;  // output channels chosen by set_groups
};

}  // namespace

Graph build_graph(const Recipe& recipe, const GenConfig& cfg) {
  return Builder(cfg).build(recipe);
}

rc::Gen<Recipe> gen_recipe(const GenConfig& cfg) {
  // Choices are drawn at full size so that they are uniform whatever the test size;
  // only the number of steps grows with the size.
  const auto byte = rc::gen::resize(100, rc::gen::inRange<int>(0, 256));
  const auto kind = rc::gen::weightedElement<StepKind>({{3, StepKind::produce},
                                                        {4, StepKind::transport},
                                                        {3, StepKind::combine},
                                                        {2, StepKind::norm},
                                                        {6, StepKind::fold_block}});
  const auto step = rc::gen::map(
      rc::gen::pair(kind, rc::gen::container<std::vector<int>>(8, byte)),
      [](const std::pair<StepKind, std::vector<int>>& kc) {
        Step s;
        s.kind = kc.first;
        for (int k = 0; k < 8; ++k) s.c[k] = static_cast<uint8_t>(kc.second[k]);
        return s;
      });
  const int max_steps = cfg.max_steps;
  const auto steps = rc::gen::withSize([=](int size) {
    const int n = 1 + std::max(0, size) * (max_steps - 1) / 100;
    return rc::gen::resize(n, rc::gen::container<std::vector<Step>>(step));
  });
  const auto small = rc::gen::resize(100, rc::gen::inRange<int>(0, 8));
  return rc::gen::map(
      rc::gen::tuple(small, small, small, steps,
                     rc::gen::resize(3, rc::gen::container<std::vector<int>>(byte)), byte, byte),
      [](const std::tuple<int, int, int, std::vector<Step>, std::vector<int>, int, int>& t) {
        Recipe r;
        r.batch = static_cast<uint8_t>(std::get<0>(t));
        r.tokens = static_cast<uint8_t>(std::get<1>(t));
        r.features = static_cast<uint8_t>(std::get<2>(t));
        r.steps = std::get<3>(t);
        for (int c : std::get<4>(t)) r.extra_outputs.push_back(static_cast<uint8_t>(c));
        r.dead_sinks = static_cast<uint8_t>(std::get<5>(t) & std::get<6>(t));
        return r;
      });
}

rc::Gen<Graph> gen_graph(const GenConfig& cfg) {
  return rc::gen::map(gen_recipe(cfg), [cfg](const Recipe& r) { return build_graph(r, cfg); });
}

rc::Shrinkable<Graph> generate_case(const GenConfig& cfg, uint64_t seed) {
  return gen_graph(cfg)(rc::Random(seed), 100);
}

std::vector<std::string> graph_tags(const Graph& g) {
  std::set<std::string> tags;
  std::set<std::string> param_uses;
  bool tied = false;
  for (const Node& n : g.nodes) {
    tags.insert("op:" + std::string(op_name(n.op)));
    if ((n.op == Op::conv1d || n.op == Op::conv2d) && n.groups > 1) {
      const Shape& x = g.shape_of(n.inputs[0]);
      tags.insert(n.groups == x[1] ? "conv:depthwise" : "conv:grouped");
    }
    if (n.op == Op::rnn && n.norm) tags.insert("rnn:norm");
    if (n.op == Op::mul && g.finalized() && analysis::layer_scale_of(g, g.node_index(n.name)))
      tags.insert("layer_scale");
    if (n.op == Op::attention && n.causal) tags.insert("attention:causal");
    if (n.op == Op::matmul) {
      const bool pa = g.ref(n.inputs[0]).kind == ValueRef::Kind::param;
      const bool pb = g.ref(n.inputs[1]).kind == ValueRef::Kind::param;
      tags.insert(pa && pb ? "matmul:params" : pa ? "matmul:param_a"
                  : pb     ? "matmul:param_b" : "matmul:activations");
    }
    if ((n.op == Op::layer_norm || n.op == Op::rms_norm) && !n.weight.empty())
      tags.insert("norm:weight");
    std::vector<std::string> uses;
    for (const auto& pa : n.param_attrs()) uses.push_back(pa.second);
    for (const std::string& in : n.inputs)
      if (g.ref(in).kind == ValueRef::Kind::param) uses.push_back(in);
    for (const std::string& p : uses)
      if (!param_uses.insert(p).second) tied = true;
  }
  if (tied) tags.insert("tied");
  if (g.outputs.size() > 1) tags.insert("outputs>1");
  return {tags.begin(), tags.end()};
}

std::string describe(const Graph& g) {
  std::ostringstream os;
  for (const Input& in : g.inputs)
    os << "input " << in.name << " " << to_string(in.shape)
       << (in.dtype == DType::index ? " index<" + std::to_string(in.range) + ">" : "") << "\n";
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    os << n.name << " = " << op_name(n.op) << "(";
    for (size_t k = 0; k < n.inputs.size(); ++k) os << (k ? ", " : "") << n.inputs[k];
    os << ")";
    for (const auto& [attr, p] : n.param_attrs()) os << " " << attr << "=" << p;
    if (!n.axes.empty()) os << " axes=" << to_string(n.axes);
    if (n.op == Op::conv1d || n.op == Op::conv2d) os << " groups=" << n.groups;
    if (n.op == Op::concat || n.op == Op::softmax) os << " axis=" << n.axis;
    if (is_masked_softmax(n)) os << " masked";
    if (n.op == Op::dropout) os << " p=" << n.p;
    if (n.op == Op::scale) os << " factor=" << n.factor;
    if (n.op == Op::transpose) os << " perm=" << to_string(n.perm);
    if (n.op == Op::reshape) os << " shape=" << to_string(n.shape);
    if (n.op == Op::hard_sigmoid) os << " alpha=" << n.alpha << " beta=" << n.beta;
    if (n.op == Op::clip) os << " min=" << n.min << " max=" << n.max;
    if (n.op == Op::opaque) os << " op_type=" << n.op_type << " shape=" << to_string(n.shape);
    if (n.cbwc) os << " cbwc";
    if (g.finalized()) os << "  -> " << to_string(g.node_shapes[i]);
    os << "\n";
  }
  os << "outputs:";
  for (const std::string& o : g.outputs) os << " " << o;
  os << "\n";
  return os.str();
}

}  // namespace lnv::gen

namespace lnv {
void showValue(const Graph& g, std::ostream& os) { os << "\n" << gen::describe(g); }
}  // namespace lnv
