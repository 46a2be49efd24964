#include "generators/architectures.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/model_json.h"

namespace lnv::zoo {
namespace {

// Resolved sizes of one build, options merged over the architecture's defaults.
struct Sizes {
  int64_t layers = 0, hidden = 0, heads = 0, seq = 0, vocab = 0, batch = 1;
  int64_t image = 0, patch = 0, window = 0, classes = 0;
  std::vector<int64_t> depths;
  double dropout = 0.1;
};

[[noreturn]] void bad_option(const std::string& option, const std::string& what) {
  throw ModelError("zoo/--" + option, what);
}

// Every size is a dimension of some tensor, so none may pass kMaxElements; the bound
// also keeps the builders' size arithmetic (4 * hidden, ...) in range.
void require_size(const std::string& option, int64_t v) {
  if (v <= 0 || v > kMaxElements)
    bad_option(option, "expected a positive integer up to 2^31, got " + std::to_string(v));
}

void require_blocks(const std::string& option, int64_t v) {
  if (v <= 0 || v > kMaxBlocks)
    bad_option(option, "expected from 1 to " + std::to_string(kMaxBlocks) + " blocks, got " +
                           std::to_string(v));
}

// The size options that were set, as typed ("--batch 8 --seq 65536"): what an error
// about the sizes they add up to names.
std::string given_sizes(const ArchOptions& o) {
  std::string out;
  auto add = [&](const char* option, const std::string& value) {
    out += (out.empty() ? "--" : " --") + std::string(option) + " " + value;
  };
  const std::pair<const char*, const std::optional<int64_t>&> sizes[] = {
      {"layers", o.layers}, {"hidden", o.hidden},   {"heads", o.heads},
      {"seq", o.seq},       {"vocab", o.vocab},     {"batch", o.batch},
      {"image", o.image},   {"patch", o.patch},     {"window", o.window},
      {"classes", o.classes}};
  for (const auto& [option, v] : sizes)
    if (v) add(option, std::to_string(*v));
  if (!o.depths.empty()) {
    std::string depths;
    for (int64_t d : o.depths) depths += (depths.empty() ? "" : ",") + std::to_string(d);
    add("depths", depths);
  }
  return out.empty() ? "the default sizes" : out;
}

// A double as a person would write it ("0.02", "1e+300", "inf"), not std::to_string's
// fixed six decimals.
std::string show(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

void require_divides(const std::string& a_name, int64_t a, const std::string& b_name,
                     int64_t b) {
  if (b % a != 0)
    bad_option(a_name, a_name + " = " + std::to_string(a) + " does not divide " + b_name +
                           " = " + std::to_string(b));
}

// Whether a build draws the weights, or only lays out the graph to check the limits
// before any memory goes into weights.
enum class Weights { drawn, none };

// Appends inputs, params (drawn from their `init` streams) and nodes to one Graph, and
// refuses any tensor over the limits (architectures.h) as it goes. Each helper returns
// the name of the value it made, so a builder reads like the model code.
class Builder {
 public:
  Builder(const std::string& name, const ArchOptions& o, double dropout, Weights weights)
      : options_(o), dropout_(dropout), weights_(weights) {
    g_.name = name;
    g_.seed = o.seed;
  }

  std::string input(const std::string& name, Shape shape, DType dtype = DType::float_,
                    int64_t range = 0) {
    require_within_limit("input '" + name + "'", shape);
    g_.inputs.push_back({name, std::move(shape), dtype, range});
    return name;
  }

  // A normal(mean, init_std) param, values drawn as docs/spec/format.md's `init` says.
  std::string param(const std::string& name, Shape shape, double mean = 0.0) {
    Param p;
    p.name = name;
    p.shape = std::move(shape);
    p.source = ParamSource::init;
    p.init.dist = "normal";
    p.init.mean = mean;
    p.init.std = options_.init_std;
    return add(std::move(p));
  }

  // A param with every value zero (written as data).
  std::string zeros(const std::string& name, Shape shape) {
    Param p;
    p.name = name;
    p.shape = std::move(shape);
    return add(std::move(p));
  }

  std::string node(Node n) {
    std::string name = n.name;
    g_.nodes.push_back(std::move(n));
    return name;
  }

  static Node make(const std::string& name, Op op, std::vector<std::string> inputs) {
    Node n;
    n.name = name;
    n.op = op;
    n.inputs = std::move(inputs);
    return n;
  }

  std::string op(const std::string& name, Op op, std::vector<std::string> inputs) {
    return node(make(name, op, std::move(inputs)));
  }

  std::string linear(const std::string& name, const std::string& x, int64_t in, int64_t out,
                     bool bias = true) {
    Node n = make(name, Op::linear, {x});
    n.weight = param(name + ".weight", {out, in});
    if (bias) n.bias = param(name + ".bias", {out});
    return node(std::move(n));
  }

  std::string embedding(const std::string& name, const std::string& ids,
                        const std::string& table) {
    Node n = make(name, Op::embedding, {ids});
    n.weight = table;
    return node(std::move(n));
  }

  // A LayerNorm with weight (mean 1) and bias over `axes`; `affine` is their shape.
  std::string layer_norm(const std::string& name, const std::string& x, Axes axes,
                         Shape affine, double eps) {
    Node n = make(name, Op::layer_norm, {x});
    n.axes = std::move(axes);
    n.eps = eps;
    n.weight = param(name + ".weight", affine, 1.0);
    n.bias = param(name + ".bias", affine);
    return node(std::move(n));
  }

  std::string attention(const std::string& name, const std::string& x, int64_t d,
                        int64_t heads, bool causal) {
    Node n = make(name, Op::attention, {x});
    n.heads = heads;
    n.causal = causal;
    n.wq = param(name + ".wq", {d, d});
    n.wk = param(name + ".wk", {d, d});
    n.wv = param(name + ".wv", {d, d});
    n.wo = param(name + ".wo", {d, d});
    n.bq = param(name + ".bq", {d});
    n.bk = param(name + ".bk", {d});
    n.bv = param(name + ".bv", {d});
    n.bo = param(name + ".bo", {d});
    return node(std::move(n));
  }

  std::string conv2d(const std::string& name, const std::string& x, int64_t cin,
                     int64_t cout, int64_t kernel, int64_t stride, int64_t padding,
                     int64_t groups) {
    Node n = make(name, Op::conv2d, {x});
    n.weight = param(name + ".weight", {cout, cin / groups, kernel, kernel});
    n.bias = param(name + ".bias", {cout});
    n.stride = {stride};
    n.padding = {padding};
    n.groups = groups;
    return node(std::move(n));
  }

  // Dropout with the model's p; with p = 0 there is no node and x passes through.
  std::string dropout(const std::string& name, const std::string& x) {
    if (dropout_ == 0.0) return x;
    Node n = make(name, Op::dropout, {x});
    n.p = dropout_;
    return node(std::move(n));
  }

  std::string reshape(const std::string& name, const std::string& x, Shape shape) {
    Node n = make(name, Op::reshape, {x});
    n.shape = std::move(shape);
    return node(std::move(n));
  }

  std::string transpose(const std::string& name, const std::string& x,
                        std::vector<int64_t> perm) {
    Node n = make(name, Op::transpose, {x});
    n.perm = std::move(perm);
    return node(std::move(n));
  }

  std::string mean(const std::string& name, const std::string& x, Axes axes) {
    Node n = make(name, Op::mean, {x});
    n.axes = std::move(axes);
    return node(std::move(n));
  }

  Graph finish(std::vector<std::string> outputs, nlohmann::json meta) {
    g_.outputs = std::move(outputs);
    g_.meta = meta.dump();
    // What finalize() can refuse in a graph built here is a size: a node output over the
    // limit.
    try {
      g_.finalize();
    } catch (const ModelError& e) {
      too_large(std::string("these sizes give a model lnverify rejects: ") + e.what());
    }
    for (size_t i = 0; i < g_.nodes.size(); ++i)
      if (g_.nodes[i].op == Op::attention) {
        const Shape& x = g_.shape_of(g_.node_inputs[i][0]);  // [batch, seq, width]
        require_within_limit("the attention probabilities of node '" + g_.nodes[i].name + "'",
                             {x[0], g_.nodes[i].heads, x[1], x[1]});
      }
    return std::move(g_);
  }

 private:
  [[noreturn]] void too_large(const std::string& what) const {
    throw ModelError("zoo/" + given_sizes(options_), what);
  }

  void require_within_limit(const std::string& tensor, const Shape& shape) const {
    if (!within_max_elements(shape))
      too_large(tensor + ", of shape " + to_string(shape) +
                ", would hold more than 2^31 elements, the limit per tensor");
  }

  // Counts the param against the limits, then gives it its values: drawn from its init
  // (zeros for a data param), or none in a build without weights, where it is marked
  // deferred so that finalize() checks the graph without them.
  std::string add(Param p) {
    require_within_limit("param '" + p.name + "'", p.shape);
    param_values_ += numel(p.shape);  // each <= 2^31, so the sum stays in range
    if (param_values_ > kMaxParamValues)
      too_large("the params hold more than 2^31 values in all, the limit per model (passed at "
                "param '" + p.name + "')");
    if (weights_ == Weights::none) {
      p.source = ParamSource::file;
      p.values_deferred = true;
    } else if (p.source == ParamSource::init) {
      p.values = init_values(p.init, numel(p.shape), g_.seed, p.name);
      if (!std::ranges::all_of(p.values, [](double v) { return std::isfinite(v); }))
        bad_option("init-std", "std " + show(p.init.std) +
                                   " draws a value beyond the double range for param '" +
                                   p.name + "'");
    } else {
      p.values.assign(numel(p.shape), 0.0);
    }
    const std::string name = p.name;
    g_.params.push_back(std::move(p));
    return name;
  }

  Graph g_;
  const ArchOptions& options_;
  double dropout_;
  Weights weights_;
  int64_t param_values_ = 0;
};

nlohmann::json meta_of(const std::string& arch, const Sizes& s,
                       std::vector<std::string> omitted) {
  nlohmann::json sizes = {{"layers", s.layers}, {"hidden", s.hidden}, {"heads", s.heads},
                          {"batch", s.batch},   {"dropout", s.dropout}};
  if (s.seq) sizes["seq"] = s.seq;
  if (s.vocab) sizes["vocab"] = s.vocab;
  if (s.image) sizes["image"] = s.image;
  if (s.patch) sizes["patch"] = s.patch;
  if (s.window) sizes["window"] = s.window;
  if (s.classes) sizes["classes"] = s.classes;
  if (!s.depths.empty()) sizes["depths"] = s.depths;
  return {{"zoo", {{"architecture", arch}, {"sizes", sizes}, {"omitted", omitted}}}};
}

// --- decoder-only and encoder-only transformers --------------------------------------

// GPT-2: learned positions, pre-norm blocks, final LN, LM head tied to the token table.
Graph gpt2(Builder& b, const Sizes& s) {
  const int64_t B = s.batch, T = s.seq, D = s.hidden, V = s.vocab;
  const auto tok = b.input("tok", {B, T}, DType::index, V);
  const auto wte = b.param("wte", {V, D});
  const auto wpe = b.param("wpe", {T, D});
  auto x = b.op("embed_pos", Op::add, {b.embedding("embed", tok, wte), wpe});
  x = b.dropout("drop", x);
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    auto a = b.attention(h + "attn", b.layer_norm(h + "ln_1", x, {-1}, {D}, 1e-5), D,
                         s.heads, /*causal=*/true);
    x = b.op(h + "res_1", Op::add, {x, b.dropout(h + "attn.resid_drop", a)});
    auto m = b.linear(h + "mlp.c_fc", b.layer_norm(h + "ln_2", x, {-1}, {D}, 1e-5), D, 4 * D);
    m = b.linear(h + "mlp.c_proj", b.op(h + "mlp.act", Op::gelu, {m}), 4 * D, D);
    x = b.op(h + "res_2", Op::add, {x, b.dropout(h + "mlp.drop", m)});
  }
  Node head = Builder::make("lm_head", Op::linear, {b.layer_norm("ln_f", x, {-1}, {D}, 1e-5)});
  head.weight = wte;  // tied
  return b.finish({b.node(std::move(head))},
                  meta_of("gpt2", s, {"attention-probability dropout"}));
}

// OPT: like GPT-2 with ReLU MLPs (OPT-125m sizes by default).
Graph opt(Builder& b, const Sizes& s) {
  const int64_t B = s.batch, T = s.seq, D = s.hidden, V = s.vocab;
  const auto tok = b.input("tok", {B, T}, DType::index, V);
  const auto table = b.param("embed_tokens", {V, D});
  const auto pos = b.param("embed_positions", {T, D});
  auto x = b.op("embed_sum", Op::add, {b.embedding("embed", tok, table), pos});
  x = b.dropout("embed_drop", x);
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string h = "layers." + std::to_string(l) + ".";
    auto a = b.attention(h + "self_attn",
                         b.layer_norm(h + "self_attn_layer_norm", x, {-1}, {D}, 1e-5), D,
                         s.heads, /*causal=*/true);
    x = b.op(h + "res_1", Op::add, {x, b.dropout(h + "self_attn.drop", a)});
    auto m = b.linear(h + "fc1", b.layer_norm(h + "final_layer_norm", x, {-1}, {D}, 1e-5), D,
                      4 * D);
    m = b.linear(h + "fc2", b.op(h + "act", Op::relu, {m}), 4 * D, D);
    x = b.op(h + "res_2", Op::add, {x, b.dropout(h + "fc2.drop", m)});
  }
  Node head = Builder::make("lm_head", Op::linear,
                            {b.layer_norm("final_layer_norm", x, {-1}, {D}, 1e-5)});
  head.weight = table;  // tied
  return b.finish({b.node(std::move(head))},
                  meta_of("opt", s, {"attention-probability dropout",
                                     "the position offset of OPT's learned positions"}));
}

// Phi: one LN per block feeding attention and MLP in parallel; untied LM head with bias.
Graph phi(Builder& b, const Sizes& s) {
  const int64_t B = s.batch, T = s.seq, D = s.hidden, V = s.vocab;
  const auto tok = b.input("tok", {B, T}, DType::index, V);
  auto x = b.embedding("embed", tok, b.param("embed_tokens", {V, D}));
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string h = "layers." + std::to_string(l) + ".";
    const auto n = b.layer_norm(h + "input_layernorm", x, {-1}, {D}, 1e-5);
    auto a = b.dropout(h + "attn.resid_drop", b.attention(h + "attn", n, D, s.heads, true));
    auto m = b.linear(h + "mlp.fc2", b.op(h + "mlp.act", Op::gelu, {b.linear(h + "mlp.fc1", n, D, 4 * D)}),
                      4 * D, D);
    m = b.dropout(h + "mlp.resid_drop", m);
    x = b.op(h + "res", Op::add, {x, b.op(h + "branches", Op::add, {a, m})});
  }
  const auto logits = b.linear("lm_head", b.layer_norm("final_layernorm", x, {-1}, {D}, 1e-5),
                               D, V);
  return b.finish({logits}, meta_of("phi", s, {"rotary position embeddings",
                                               "attention-probability dropout"}));
}

// BERT: post-norm encoder with an embedding LN; MLM head tied to the word table.
Graph bert(Builder& b, const Sizes& s) {
  const int64_t B = s.batch, T = s.seq, D = s.hidden, V = s.vocab, I = 4 * s.hidden;
  const double eps = 1e-12;
  const auto tok = b.input("tok", {B, T}, DType::index, V);
  const auto seg = b.input("segment", {B, T}, DType::index, 2);
  const auto words = b.param("embeddings.word_embeddings", {V, D});
  auto x = b.op("embeddings.sum_pos", Op::add,
                {b.embedding("embeddings.words", tok, words),
                 b.param("embeddings.position_embeddings", {T, D})});
  x = b.op("embeddings.sum_type", Op::add,
           {x, b.embedding("embeddings.token_type", seg,
                           b.param("embeddings.token_type_embeddings", {2, D}))});
  x = b.dropout("embeddings.drop", b.layer_norm("embeddings.LayerNorm", x, {-1}, {D}, eps));
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string h = "encoder." + std::to_string(l) + ".";
    auto a = b.dropout(h + "attention.drop", b.attention(h + "attention", x, D, s.heads, false));
    x = b.layer_norm(h + "attention.LayerNorm", b.op(h + "attention.res", Op::add, {x, a}),
                     {-1}, {D}, eps);
    auto m = b.op(h + "intermediate.act", Op::gelu, {b.linear(h + "intermediate.dense", x, D, I)});
    m = b.dropout(h + "output.drop", b.linear(h + "output.dense", m, I, D));
    x = b.layer_norm(h + "output.LayerNorm", b.op(h + "output.res", Op::add, {x, m}), {-1},
                     {D}, eps);
  }
  auto t = b.op("cls.transform.act", Op::gelu, {b.linear("cls.transform.dense", x, D, D)});
  t = b.layer_norm("cls.transform.LayerNorm", t, {-1}, {D}, eps);
  Node dec = Builder::make("cls.decoder", Op::linear, {t});
  dec.weight = words;  // tied
  dec.bias = b.param("cls.decoder.bias", {V});
  return b.finish({b.node(std::move(dec))},
                  meta_of("bert", s, {"attention-probability dropout", "the pooler"}));
}

// --- vision -------------------------------------------------------------------------

// The shared MLP of the vision transformers: fc1, GELU, dropout, fc2, dropout.
std::string vision_mlp(Builder& b, const std::string& h, const std::string& x, int64_t d) {
  auto m = b.dropout(h + "mlp.drop1", b.op(h + "mlp.act", Op::gelu, {b.linear(h + "mlp.fc1", x, d, 4 * d)}));
  return b.dropout(h + "mlp.drop2", b.linear(h + "mlp.fc2", m, 4 * d, d));
}

// [B, C, R, R] image features -> [B, R*R, C] tokens.
std::string to_tokens(Builder& b, const std::string& name, const std::string& x, int64_t B,
                      int64_t C, int64_t R) {
  return b.transpose(name + ".tokens", b.reshape(name + ".flatten", x, {B, C, R * R}), {0, 2, 1});
}

// ViT: patch conv, CLS token by concat, learned positions, pre-norm blocks, final LN,
// mean pooling (ViT's "gap" classifier; a CLS read-out needs a slice, not in the format).
Graph vit(Builder& b, const Sizes& s) {
  const int64_t B = s.batch, D = s.hidden, R = s.image / s.patch, N = R * R;
  const auto img = b.input("image", {B, 3, s.image, s.image});
  auto patches = to_tokens(b, "patch_embed",
                           b.conv2d("patch_embed", img, 3, D, s.patch, s.patch, 0, 1), B, D, R);
  auto cls = b.param("cls_token", {1, 1, D});
  if (B > 1)  // broadcast the one CLS token over the batch (concat does not broadcast)
    cls = b.op("cls_token.expand", Op::add, {cls, b.zeros("cls_token.batch_zeros", {B, 1, 1})});
  Node cat = Builder::make("tokens", Op::concat, {cls, patches});
  cat.axis = 1;
  auto x = b.op("pos_add", Op::add, {b.node(std::move(cat)), b.param("pos_embed", {N + 1, D})});
  x = b.dropout("pos_drop", x);
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string h = "blocks." + std::to_string(l) + ".";
    auto a = b.attention(h + "attn", b.layer_norm(h + "norm1", x, {-1}, {D}, 1e-6), D, s.heads,
                         false);
    x = b.op(h + "res_1", Op::add, {x, b.dropout(h + "attn.proj_drop", a)});
    x = b.op(h + "res_2", Op::add,
             {x, vision_mlp(b, h, b.layer_norm(h + "norm2", x, {-1}, {D}, 1e-6), D)});
  }
  const auto pooled = b.mean("pool", b.layer_norm("norm", x, {-1}, {D}, 1e-6), {1});
  return b.finish({b.linear("head", pooled, D, s.classes)},
                  meta_of("vit", s, {"attention-probability dropout",
                                     "CLS-token read-out (mean pooling instead)"}));
}

// Swin-like: patch conv + LN, stages of windowed attention (windows cut and merged back
// by reshape/transpose), patch merging (2x2 token merge by reshape, LN, linear) between
// stages, final LN and mean pooling.
Graph swin(Builder& b, const Sizes& s) {
  const int64_t B = s.batch;
  int64_t C = s.hidden, R = s.image / s.patch, heads = s.heads;
  const auto img = b.input("image", {B, 3, s.image, s.image});
  auto x = to_tokens(b, "patch_embed", b.conv2d("patch_embed.proj", img, 3, C, s.patch, s.patch, 0, 1),
                     B, C, R);
  x = b.dropout("pos_drop", b.layer_norm("patch_embed.norm", x, {-1}, {C}, 1e-5));
  for (size_t st = 0; st < s.depths.size(); ++st) {
    const std::string stage = "layers." + std::to_string(st) + ".";
    const int64_t w = std::min(s.window, R), nw = R / w;
    for (int64_t blk = 0; blk < s.depths[st]; ++blk) {
      const std::string h = stage + "blocks." + std::to_string(blk) + ".";
      auto win = b.reshape(h + "win.split", b.layer_norm(h + "norm1", x, {-1}, {C}, 1e-5),
                           {B, nw, w, nw, w, C});
      win = b.reshape(h + "win.gather", b.transpose(h + "win.order", win, {0, 1, 3, 2, 4, 5}),
                      {B * nw * nw, w * w, C});
      auto a = b.reshape(h + "win.unsplit", b.attention(h + "attn", win, C, heads, false),
                         {B, nw, nw, w, w, C});
      a = b.reshape(h + "win.merge", b.transpose(h + "win.unorder", a, {0, 1, 3, 2, 4, 5}),
                    {B, R * R, C});
      x = b.op(h + "res_1", Op::add, {x, b.dropout(h + "attn.proj_drop", a)});
      x = b.op(h + "res_2", Op::add,
               {x, vision_mlp(b, h, b.layer_norm(h + "norm2", x, {-1}, {C}, 1e-5), C)});
    }
    if (st + 1 < s.depths.size()) {  // patch merging: 2x2 neighbours -> 4C features
      const std::string m = stage + "downsample.";
      auto t = b.reshape(m + "split", x, {B, R / 2, 2, R / 2, 2, C});
      t = b.reshape(m + "merge", b.transpose(m + "order", t, {0, 1, 3, 4, 2, 5}),
                    {B, (R / 2) * (R / 2), 4 * C});
      x = b.linear(m + "reduction", b.layer_norm(m + "norm", t, {-1}, {4 * C}, 1e-5), 4 * C,
                   2 * C, /*bias=*/false);
      C *= 2;
      R /= 2;
      heads *= 2;
    }
  }
  const auto pooled = b.mean("avgpool", b.layer_norm("norm", x, {-1}, {C}, 1e-5), {1});
  return b.finish({b.linear("head", pooled, C, s.classes)},
                  meta_of("swin", s, {"shifted windows", "relative position bias",
                                      "attention-probability dropout", "stochastic depth"}));
}

// ConvNeXt-like: patchify stem (conv + channels-first LN), blocks of depthwise 7x7 conv
// -> channels-last LN -> linear -> GELU -> linear -> layer scale -> residual, channels-
// first LN + 2x2 conv between stages, mean pooling, LN, head.
Graph convnext(Builder& b, const Sizes& s) {
  const int64_t B = s.batch;
  int64_t C = s.hidden, R = s.image / s.patch;
  const auto img = b.input("image", {B, 3, s.image, s.image});
  auto x = b.conv2d("downsample_layers.0.conv", img, 3, C, s.patch, s.patch, 0, 1);
  x = b.layer_norm("downsample_layers.0.norm", x, {1}, {C}, 1e-6);
  for (size_t st = 0; st < s.depths.size(); ++st) {
    if (st > 0) {
      const std::string d = "downsample_layers." + std::to_string(st) + ".";
      x = b.layer_norm(d + "norm", x, {1}, {C}, 1e-6);
      x = b.conv2d(d + "conv", x, C, 2 * C, 2, 2, 0, 1);
      C *= 2;
      R /= 2;
    }
    for (int64_t blk = 0; blk < s.depths[st]; ++blk) {
      const std::string h = "stages." + std::to_string(st) + "." + std::to_string(blk) + ".";
      auto t = b.transpose(h + "to_channels_last", b.conv2d(h + "dwconv", x, C, C, 7, 1, 3, C),
                           {0, 2, 3, 1});
      t = b.linear(h + "pwconv1", b.layer_norm(h + "norm", t, {-1}, {C}, 1e-6), C, 4 * C);
      t = b.linear(h + "pwconv2", b.op(h + "act", Op::gelu, {t}), 4 * C, C);
      t = b.op(h + "layer_scale", Op::mul, {t, b.param(h + "gamma", {C}, 1.0)});
      x = b.op(h + "res", Op::add, {x, b.transpose(h + "to_channels_first", t, {0, 3, 1, 2})});
    }
  }
  const auto pooled = b.layer_norm("norm", b.mean("avgpool", x, {2, 3}), {-1}, {C}, 1e-6);
  return b.finish({b.linear("head", pooled, C, s.classes)},
                  meta_of("convnext", s, {"stochastic depth"}));
}

// --- recurrent ----------------------------------------------------------------------

// RNN language model: embedding, stacked Elman RNNs each with a LayerNorm on the
// pre-activation, dropout between layers (Zaremba et al.), linear decoder.
Graph rnnlm(Builder& b, const Sizes& s) {
  const int64_t B = s.batch, T = s.seq, H = s.hidden, V = s.vocab;
  const auto tok = b.input("tok", {B, T}, DType::index, V);
  auto x = b.dropout("embed_drop", b.embedding("embed", tok, b.param("encoder", {V, H})));
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string h = "rnn." + std::to_string(l);
    Node n = Builder::make(h, Op::rnn, {x});
    n.weight_ih = b.param(h + ".weight_ih", {H, H});
    n.weight_hh = b.param(h + ".weight_hh", {H, H});
    n.bias = b.param(h + ".bias", {H});
    n.norm = RnnNorm{Op::layer_norm, 1e-5, b.param(h + ".norm.weight", {H}, 1.0),
                     b.param(h + ".norm.bias", {H})};
    x = b.dropout(h + ".drop", b.node(std::move(n)));
  }
  return b.finish({b.linear("decoder", x, H, V)}, meta_of("rnnlm", s, {}));
}

// --- the table ------------------------------------------------------------------------

enum class Family { text, vision_vit, vision_stages, rnn };

struct Arch {
  ArchInfo info;
  Family family;
  Sizes defaults;
  std::function<Graph(Builder&, const Sizes&)> build;
};

const std::vector<Arch>& table() {
  auto text = [](int64_t l, int64_t d, int64_t h, int64_t t, int64_t v) {
    Sizes s;
    s.layers = l, s.hidden = d, s.heads = h, s.seq = t, s.vocab = v;
    return s;
  };
  auto vision = [](int64_t l, int64_t d, int64_t h, int64_t image, int64_t patch,
                   int64_t window, std::vector<int64_t> depths) {
    Sizes s;
    s.layers = l, s.hidden = d, s.heads = h, s.image = image, s.patch = patch;
    s.window = window, s.classes = 1000, s.depths = std::move(depths);
    return s;
  };
  Sizes rnn = text(2, 650, 1, 35, 10000);
  Sizes conv = vision(0, 96, 1, 224, 4, 0, {3, 3, 9, 3});
  conv.dropout = 0.0;  // ConvNeXt has no dropout modules (only stochastic depth)
  static const std::vector<Arch> t = {
      {{"gpt2", "GPT-2 small: pre-norm, learned positions, tied LM head (12 x 768, 12 heads, "
                "vocab 50257, seq 1024)"},
       Family::text, text(12, 768, 12, 1024, 50257), gpt2},
      {{"bert", "BERT base: post-norm encoder, embedding LN, tied MLM head (12 x 768, 12 heads, "
                "vocab 30522, seq 512)"},
       Family::text, text(12, 768, 12, 512, 30522), bert},
      {{"opt", "OPT-125m: pre-norm, ReLU MLP, tied LM head (12 x 768, 12 heads, vocab 50272, "
               "seq 2048)"},
       Family::text, text(12, 768, 12, 2048, 50272), opt},
      {{"phi", "Phi-1.5-like: one LN per block feeding parallel attention and MLP (24 x 2048, "
               "32 heads, vocab 51200, seq 2048)"},
       Family::text, text(24, 2048, 32, 2048, 51200), phi},
      {{"vit", "ViT-B/16: patch conv, CLS token, learned positions, pre-norm (12 x 768, 12 "
               "heads, image 224, patch 16)"},
       Family::vision_vit, vision(12, 768, 12, 224, 16, 0, {}), vit},
      {{"swin", "Swin-T-like: windowed attention, patch merging (depths 2-2-6-2, width 96, 3 "
                "heads, image 224, patch 4, window 7)"},
       Family::vision_stages, vision(0, 96, 3, 224, 4, 7, {2, 2, 6, 2}), swin},
      {{"convnext", "ConvNeXt-T-like: depthwise conv, channels-last LN, layer scale (depths "
                    "3-3-9-3, width 96, image 224)"},
       Family::vision_stages, conv, convnext},
      {{"rnnlm", "RNN language model: embedding, Elman RNNs with a LayerNorm, decoder (2 x 650, "
                 "vocab 10000, seq 35)"},
       Family::rnn, rnn, rnnlm},
  };
  return t;
}

const Arch& find_arch(const std::string& name) {
  for (const Arch& a : table())
    if (a.info.name == name) return a;
  std::string known;
  for (const Arch& a : table()) known += (known.empty() ? "" : ", ") + a.info.name;
  throw ModelError("zoo/NAME", "unknown architecture '" + name + "' (known: " + known + ")");
}

// Merges the options over the defaults and checks that the sizes fit together.
Sizes resolve(const Arch& a, const ArchOptions& o) {
  Sizes s = a.defaults;
  auto take = [](int64_t& field, const std::optional<int64_t>& v, const char* name) {
    if (!v) return;
    require_size(name, *v);
    field = *v;
  };
  take(s.hidden, o.hidden, "hidden");
  take(s.heads, o.heads, "heads");
  take(s.batch, o.batch, "batch");
  if (o.dropout) {
    if (!(*o.dropout >= 0.0 && *o.dropout < 1.0))
      bad_option("dropout", "expected 0 <= p < 1, got " + show(*o.dropout));
    s.dropout = *o.dropout;
  }
  if (!(std::isfinite(o.init_std) && o.init_std >= 0.0))
    bad_option("init-std", "expected a finite standard deviation >= 0, got " + show(o.init_std));
  const bool text = a.family == Family::text || a.family == Family::rnn;
  const bool vision = !text;
  auto only = [&](bool allowed, const std::optional<int64_t>& v, const char* name) {
    if (v && !allowed)
      bad_option(name, "architecture '" + a.info.name + "' has no " + name + " option");
  };
  only(text, o.seq, "seq");
  only(text, o.vocab, "vocab");
  only(vision, o.image, "image");
  only(vision, o.patch, "patch");
  only(vision, o.classes, "classes");
  only(a.info.name == "swin", o.window, "window");
  if (!o.depths.empty() && a.family != Family::vision_stages)
    bad_option("depths", "architecture '" + a.info.name + "' has no stages");
  take(s.seq, o.seq, "seq");
  take(s.vocab, o.vocab, "vocab");
  take(s.image, o.image, "image");
  take(s.patch, o.patch, "patch");
  take(s.window, o.window, "window");
  take(s.classes, o.classes, "classes");
  if (a.family == Family::vision_stages) {
    if (o.layers) s.depths.assign(s.depths.size(), *o.layers);
    if (!o.depths.empty()) s.depths = o.depths;
    const char* blocks = o.depths.empty() ? "layers" : "depths";
    s.layers = 0;
    for (int64_t d : s.depths) {
      require_blocks(blocks, d);
      s.layers += d;
    }
    if (s.layers > kMaxBlocks)
      bad_option(blocks, "the stages hold " + std::to_string(s.layers) +
                             " blocks in all, more than the limit of " +
                             std::to_string(kMaxBlocks));
  } else if (o.layers) {
    require_blocks("layers", *o.layers);
    s.layers = *o.layers;
  }

  if (a.family == Family::text || a.family == Family::vision_vit ||
      a.info.name == "swin")
    require_divides("heads", s.heads, "hidden", s.hidden);
  if (vision) {
    require_divides("patch", s.patch, "image", s.image);
    if (a.family == Family::vision_stages) {
      // Each stage after the first halves the patch grid.
      const int64_t grid = s.image / s.patch;
      int64_t last = grid;  // the last stage's grid side
      for (size_t k = 1; k < s.depths.size(); ++k) {
        if (last % 2 != 0)
          bad_option(o.depths.empty() ? "image" : "depths",
                     "the " + std::to_string(grid) + "x" + std::to_string(grid) +
                         " patch grid (--image " + std::to_string(s.image) + " / --patch " +
                         std::to_string(s.patch) + ") cannot be halved " +
                         std::to_string(s.depths.size() - 1) + " times, once between each two of " +
                         std::to_string(s.depths.size()) + " stages");
        last /= 2;
      }
      if (a.info.name == "swin")
        for (int64_t r = grid; r >= last; r /= 2)
          if (r % std::min(s.window, r) != 0)
            bad_option("window", "window " + std::to_string(s.window) +
                                     " does not tile a " + std::to_string(r) + "x" +
                                     std::to_string(r) + " stage grid");
    }
  }
  return s;
}

// The build without weights: it makes every check a build makes, at no memory cost for
// weights.
void check_layout(const Arch& a, const Sizes& s, const ArchOptions& o) {
  Builder layout(a.info.name, o, s.dropout, Weights::none);
  a.build(layout, s);
}

}  // namespace

const std::vector<ArchInfo>& architectures() {
  static const std::vector<ArchInfo> infos = [] {
    std::vector<ArchInfo> v;
    for (const Arch& a : table()) v.push_back(a.info);
    return v;
  }();
  return infos;
}

Graph build_architecture(const std::string& name, const ArchOptions& options) {
  const Arch& a = find_arch(name);
  const Sizes s = resolve(a, options);
  // The layout first: a size over the limits fails there, before memory goes into weights.
  check_layout(a, s, options);
  Builder b(a.info.name, options, s.dropout, Weights::drawn);
  return a.build(b, s);
}

void check_architecture(const std::string& name, const ArchOptions& options) {
  const Arch& a = find_arch(name);
  check_layout(a, resolve(a, options), options);
}

}  // namespace lnv::zoo
