// Importer (onnx/import_context.h): what the ONNX graph holds, and the lnv graph built.
#include "onnx/import_context.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "core/error.h"
#include "onnx/file_labels.h"

namespace lnv::onnx_import {
namespace {

// An initializer's values, left in its file until a command needs them (a param's:
// finite).
class StoredValues : public ValueSource {
 public:
  explicit StoredValues(Tensor t) : t_(std::move(t)) {}
  std::vector<double> read() const override { return finite_floats(t_, t_.stored->where); }

 private:
  Tensor t_;  // dims and type, and where the data lie
};

bool allowed_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '_' || c == '.' || c == ':' || c == '/' || c == '-';
}

}  // namespace

Importer::Importer(const Model& folded) : m_(folded) {
  const Graph& og = m_.graph;
  shapes_ = static_shapes(og);
  for (const auto* list : {&og.inputs, &og.value_info, &og.outputs})
    for (const ValueInfo& vi : *list) types_[vi.name] = vi.type;
  for (const Initializer& init : og.initializers) {
    constants_[init.name] = &init;
    types_[init.name] = init.value.type;
  }
  for (size_t i = 0; i < og.nodes.size(); ++i) {
    for (const std::string& v : og.nodes[i].outputs)
      if (!v.empty()) producers_[v] = static_cast<int>(i);
    for (const std::string& v : og.nodes[i].inputs)
      if (!v.empty()) {
        auto& list = consumers_[v];
        if (list.empty() || list.back() != static_cast<int>(i)) list.push_back(static_cast<int>(i));
      }
  }
  for (const ValueInfo& o : og.outputs) graph_outputs_.insert(o.name);
}

std::string Importer::describe(size_t i) const {
  return m_.path.string() + ": " + m_.graph.nodes[i].describe(i);
}

ElemType Importer::elem_type(const std::string& v) const {
  auto it = types_.find(v);
  return it == types_.end() ? ElemType::Undefined : it->second;
}

const Initializer* Importer::constant(const std::string& v) const {
  auto it = constants_.find(v);
  return it == constants_.end() ? nullptr : it->second;
}

std::optional<double> Importer::scalar(const std::string& v) const {
  const Initializer* c = constant(v);
  if (!c) return std::nullopt;
  if (c->value.floats.size() == 1) return c->value.floats[0];
  if (c->value.ints.size() == 1) return static_cast<double>(c->value.ints[0]);
  return std::nullopt;
}

const std::vector<int64_t>& Importer::shape(const std::string& v) const {
  auto it = shapes_.find(v);
  if (it == shapes_.end())
    throw ModelError(m_.path.string(), "value '" + v + "' has no static shape after folding "
                                       "(bind every symbolic input dim with --dim)");
  return it->second;
}

int64_t Importer::numel(const std::string& v) const {
  int64_t n = 1;
  for (int64_t d : shape(v)) n *= d;
  return n;
}

bool Importer::is_index_input(const std::string& v) const { return index_inputs_.count(v) != 0; }

int Importer::producer(const std::string& v) const {
  auto it = producers_.find(v);
  return it == producers_.end() ? -1 : it->second;
}

const std::vector<int>& Importer::consumers(const std::string& v) const {
  static const std::vector<int> kNone;
  auto it = consumers_.find(v);
  return it == consumers_.end() ? kNone : it->second;
}

bool Importer::used(const onnx_import::Node& n, size_t output) const {
  if (output >= n.outputs.size() || n.outputs[output].empty()) return false;
  return !consumers(n.outputs[output]).empty() || is_graph_output(n.outputs[output]);
}

double Importer::attr_f(const onnx_import::Node& n, const std::string& a, double dflt) const {
  const Attribute* at = n.attr(a);
  return at ? (at->kind == AttrKind::Int ? static_cast<double>(at->i) : at->f)
            : static_cast<double>(static_cast<float>(dflt));
}

int64_t Importer::attr_i(const onnx_import::Node& n, const std::string& a, int64_t dflt) const {
  const Attribute* at = n.attr(a);
  return at ? at->i : dflt;
}

std::string Importer::attr_s(const onnx_import::Node& n, const std::string& a,
                             const std::string& dflt) const {
  const Attribute* at = n.attr(a);
  return at ? at->s : dflt;
}

std::vector<int64_t> Importer::attr_ints(const onnx_import::Node& n, const std::string& a,
                                         const std::vector<int64_t>& dflt) const {
  const Attribute* at = n.attr(a);
  return at ? at->ints : dflt;
}

std::optional<Axes> Importer::reduce_axes(const onnx_import::Node& n) const {
  if (const Attribute* at = n.attr("axes")) return Axes(at->ints.begin(), at->ints.end());
  if (n.inputs.size() < 2 || n.inputs[1].empty()) return Axes{};
  const Initializer* c = constant(n.inputs[1]);
  if (!c) return std::nullopt;
  return Axes(c->value.ints.begin(), c->value.ints.end());
}

std::string Importer::fresh(const std::string& want) {
  std::string s;
  for (char c : want) s += allowed_char(c) ? c : '_';
  if (s.empty()) s = "_";
  const std::string name = names_.fresh(s);
  if (name != want) renamed_[name] = want;
  return name;
}

void Importer::import_inputs() {
  for (const ValueInfo& vi : m_.graph.inputs) {
    if (constant(vi.name)) continue;  // an initializer with a default value: a constant
    const auto dims = vi.static_dims();
    if (!dims)
      throw ModelError(m_.path.string(), "graph input '" + vi.name + "' has no static shape");
    Input in;
    in.name = fresh(vi.name);
    in.shape = *dims;
    if (is_integer_type(vi.type) && vi.type != ElemType::Bool) {
      in.dtype = DType::index;
      index_inputs_.insert(vi.name);
    } else if (!is_float_type(vi.type)) {
      throw ModelError(m_.path.string(), "graph input '" + vi.name + "' has element type " +
                                             elem_type_name(vi.type) +
                                             "; expected a float or integer tensor");
    }
    values_[vi.name] = in.name;
    g_.inputs.push_back(std::move(in));
  }
}

std::optional<std::string> Importer::non_finite_input(const onnx_import::Node& n) const {
  for (const std::string& v : n.inputs) {
    const Initializer* c = v.empty() ? nullptr : constant(v);
    if (!c || !c->value.is_float()) continue;
    for (double x : c->value.floats)
      if (!std::isfinite(x)) return v;
  }
  return std::nullopt;
}

std::string Importer::value(const std::string& v) {
  if (auto it = values_.find(v); it != values_.end()) return it->second;
  const Initializer* c = constant(v);
  if (!c) throw InternalError("onnx import: value '" + v + "' read before it is computed");
  if (!c->value.is_float())
    throw ModelError(m_.path.string(), "initializer '" + v + "' holds " +
                                           elem_type_name(c->value.type) +
                                           " values where a float tensor is read");
  const std::string name = c->value.stored ? stored_param(v, c->value.dims, c->value)
                                           : new_param(v, c->value.dims, c->value.floats);
  g_.params.back().stored_bits = significand_bits(c->value.type);
  values_[v] = name;
  return name;
}

std::string Importer::param_as(const std::string& v, const Shape& shape) {
  const Initializer* c = constant(v);
  if (c->value.dims == shape) return value(v);
  const std::string name = c->value.stored ? stored_param(v, shape, c->value)
                                           : new_param(v, shape, c->value.floats);
  g_.params.back().stored_bits = significand_bits(c->value.type);
  return name;
}

std::vector<double> Importer::floats(const std::string& v) const {
  return finite_floats(constant(v)->value, m_.path.string() + ": initializer '" + v + "'");
}

std::string Importer::stored_param(const std::string& want, const Shape& shape, const Tensor& t) {
  Param p;
  p.name = fresh(want);
  p.shape = shape;
  p.values_deferred = true;
  p.lazy = std::make_shared<StoredValues>(t);
  g_.params.push_back(std::move(p));
  return g_.params.back().name;
}

std::string Importer::new_param(const std::string& want, const Shape& shape,
                                std::vector<double> values) {
  for (size_t k = 0; k < values.size(); ++k)
    if (!std::isfinite(values[k]))
      throw ModelError(m_.path.string(), "initializer '" + want + "' holds a non-finite value at "
                                         "flat index " + std::to_string(k));
  Param p;
  p.name = fresh(want);
  p.shape = shape;
  p.values = std::move(values);
  g_.params.push_back(std::move(p));
  return g_.params.back().name;
}

lnv::Node Importer::node(const onnx_import::Node& n, size_t, Op op,
                         std::vector<std::string> inputs, const std::string& suffix) {
  const std::string base = n.name.empty() ? n.outputs[0] : n.name;
  return named_node(suffix.empty() ? base : base + "." + suffix, op, std::move(inputs));
}

lnv::Node Importer::named_node(const std::string& want, Op op, std::vector<std::string> inputs) {
  lnv::Node node;
  node.name = fresh(want);
  node.op = op;
  node.inputs = std::move(inputs);
  return node;
}

std::string Importer::emit(lnv::Node node) {
  g_.nodes.push_back(std::move(node));
  return g_.nodes.back().name;
}

void Importer::emit_final(lnv::Node node, const std::string& onnx_value) {
  values_[onnx_value] = emit(std::move(node));
}

void Importer::alias(const std::string& onnx_value, const std::string& of) {
  values_[onnx_value] = value(of);
}

void Importer::opaque(size_t i, const std::string& why) {
  const onnx_import::Node& n = m_.graph.nodes[i];
  std::vector<std::string> inputs;
  for (const std::string& v : n.inputs) {
    if (v.empty()) continue;
    const Initializer* c = constant(v);
    if (c && !c->value.is_float()) continue;  // an integer constant carries no data dependence
    if (c && !std::all_of(c->value.floats.begin(), c->value.floats.end(),
                          [](double x) { return std::isfinite(x); }))
      continue;  // nor does a constant, and a non-finite one cannot be a param
    inputs.push_back(value(v));
  }
  std::vector<size_t> used_outputs;
  for (size_t k = 0; k < n.outputs.size(); ++k)
    if (used(n, k)) used_outputs.push_back(k);
  const std::string base = n.name.empty() ? n.outputs[0] : n.name;
  const std::string op_type = n.domain.empty() || n.domain == "ai.onnx" ? n.op_type : n.domain + "." + n.op_type;
  for (size_t k : used_outputs)
    if (!shapes_.count(n.outputs[k])) {
      // Nobody knows its output's shape: what reads it is left out (leave_out).
      for (const std::string& out : n.outputs)
        if (!out.empty()) unshaped_[out] = {n.describe(i), op_type, base, inputs};
      return;
    }
  for (size_t k : used_outputs) {
    const std::string& out = n.outputs[k];
    lnv::Node o = named_node(used_outputs.size() == 1 ? base : base + ":" + std::to_string(k),
                             Op::opaque, inputs);
    o.op_type = op_type;
    o.shape = shapes_.at(out);
    const std::string name = o.name;
    emit_final(std::move(o), out);
    opaque_[name] = why;
  }
}

bool Importer::reads_unshaped(size_t i) const {
  for (const std::string& v : m_.graph.nodes[i].inputs)
    if (!v.empty() && unshaped_.count(v)) return true;
  return false;
}

void Importer::leave_out(size_t i) {
  const onnx_import::Node& n = m_.graph.nodes[i];
  UnshapedCause cause;
  for (const std::string& v : n.inputs)
    if (!v.empty() && unshaped_.count(v)) {
      cause = unshaped_.at(v);
      break;
    }
  for (const std::string& out : n.outputs)
    if (!out.empty()) unshaped_[out] = cause;
  const bool default_domain = n.domain.empty() || n.domain == "ai.onnx";
  const bool skip = n.domain == "com.microsoft" && (n.op_type == "SkipLayerNormalization" ||
                                                   n.op_type == "SkipSimplifiedLayerNormalization");
  const bool plain = (default_domain || n.domain == "com.microsoft") &&
                     (n.op_type == "LayerNormalization" || n.op_type == "SimplifiedLayerNormalization" ||
                      n.op_type == "RMSNormalization");
  const size_t w = skip ? 2 : 1;
  if ((!skip && !plain) || n.inputs.size() <= w || !is_constant(n.inputs[w])) return;
  const Initializer* weight = constant(n.inputs[w]);
  std::vector<int64_t> dims = weight->value.dims;
  if (skip) dims = {weight->value.numel()};
  if (dims.empty()) dims = {1};
  const bool rms = n.op_type != "LayerNormalization" && n.op_type != "SkipLayerNormalization";
  stand_in_norm(cause, n.name.empty() ? n.outputs[0] : n.name, rms ? Op::rms_norm : Op::layer_norm,
                attr_f(n, "epsilon", skip ? 1e-12 : 1e-5), dims);
}

void Importer::leave_out_norm(const std::string& x, const std::string& out, const std::string& name,
                              Op op, double eps, const std::vector<int64_t>& dims) {
  const auto cause = unshaped_.find(x);
  if (cause == unshaped_.end()) {
    shape(x);  // throws: no static shape, and no op to blame
    throw InternalError("onnx import: '" + x + "' has a shape and none");
  }
  unshaped_[out] = cause->second;
  if (!dims.empty()) stand_in_norm(cause->second, name, op, eps, dims);
}

// A norm over `dims` of an `opaque` node standing for the op whose shape is unknown
// (reading what that op reads), so that its verdict is a "no" naming that op; an output
// of the graph, in place of the file's outputs computed from it (which are left out): a
// norm no output reads would fold trivially.
void Importer::stand_in_norm(const UnshapedCause& cause, const std::string& name, Op op, double eps,
                             const std::vector<int64_t>& dims) {
  lnv::Node stand_in = named_node(cause.name, Op::opaque, cause.inputs);
  stand_in.op_type = cause.op_type;
  stand_in.shape = dims;
  stand_in.shape.insert(stand_in.shape.begin(), 1);
  opaque_[stand_in.name] = "stands for " + cause.described +
                           ", whose output shape is unknown (no shape inference for its op)";
  const std::string in = emit(std::move(stand_in));
  lnv::Node ln = named_node(name, op, {in});
  for (int64_t a = -int64_t(dims.size()); a < 0; ++a) ln.axes.push_back(a);
  ln.eps = eps;
  cone_outputs_.push_back(emit(std::move(ln)));
}

void Importer::note_index_range(const std::string& input, int64_t rows) {
  auto [it, fresh_entry] = index_ranges_.emplace(input, rows);
  if (!fresh_entry) it->second = std::min(it->second, rows);
}

void Importer::record_norm(const std::string& lnv_name, const std::vector<size_t>& onnx_nodes) {
  nlohmann::json names = nlohmann::json::array();
  for (size_t i : onnx_nodes) {
    const auto& n = m_.graph.nodes[i];
    names.push_back(n.name.empty() ? "#" + std::to_string(i) : n.name);
  }
  norms_[lnv_name] = names;
}

lnv::Graph Importer::finish() {
  nlohmann::json outputs = nlohmann::json::object();
  for (const ValueInfo& o : m_.graph.outputs) {
    if (unshaped_.count(o.name)) continue;  // left out (leave_out)
    if (!is_float_type(elem_type(o.name)))
      throw ModelError(m_.path.string(), "graph output '" + o.name + "' is not a float tensor");
    const std::string name = value(o.name);
    g_.outputs.push_back(name);
    outputs[o.name] = name;
  }
  for (const std::string& o : cone_outputs_) g_.outputs.push_back(o);
  if (g_.outputs.empty() && !unshaped_.empty())
    throw ModelError(m_.path.string(), "every graph output is computed from " +
                                           unshaped_.begin()->second.described +
                                           ", whose output shape is unknown (no shape inference for its op)");
  for (Input& in : g_.inputs)
    if (in.dtype == DType::index) {
      for (const auto& [onnx_name, lnv_name] : values_)
        if (lnv_name == in.name && index_ranges_.count(onnx_name))
          in.range = index_ranges_.at(onnx_name);
      if (in.range == 0) in.range = 1;
    }
  // The producers no Gemm or MatMul of the file computes (onnx/file_labels.h: the fold
  // writer finds a moved bias' reader so).
  std::unordered_set<std::string> own_labels;
  for (const auto& n : m_.graph.nodes) {
    if ((n.op_type == "Gemm" || n.op_type == "MatMul") && (n.domain.empty() || n.domain == "ai.onnx")) {
      const std::string label = n.name.empty() ? (n.outputs.empty() ? "" : n.outputs[0]) : n.name;
      if (!label.empty()) own_labels.insert(label);
    }
  }
  auto computed_by_own = [&](const std::string& want) {
    for (const std::string& label : labels_computing(want))
      if (own_labels.count(label)) return true;
    return false;
  };
  for (const lnv::Node& n : g_.nodes) {
    if (n.op != lnv::Op::linear && n.op != lnv::Op::matmul) continue;
    const std::string want = renamed_.contains(n.name) ? renamed_[n.name].get<std::string>() : n.name;
    if (!computed_by_own(want)) g_.fused_producers.push_back(n.name);
  }
  nlohmann::json opsets = nlohmann::json::object();
  for (const OpsetImport& o : m_.opset_imports) opsets[o.domain.empty() ? "ai.onnx" : o.domain] = o.version;
  g_.name = m_.graph.name;
  g_.meta = nlohmann::json{{"onnx",
              {{"version", 1},
               {"file", m_.path.filename().string()},
               {"producer", m_.producer_name + (m_.producer_version.empty() ? "" : " " + m_.producer_version)},
               {"opsets", opsets},
               {"outputs", outputs},
               {"renamed", renamed_},
               {"norms", norms_},
               {"opaque", opaque_}}}}.dump();
  try {
    g_.finalize();
  } catch (const ModelError& e) {
    throw ModelError(m_.path.string(), std::string("the imported graph is invalid: ") + e.what());
  }
  return std::move(g_);
}

}  // namespace lnv::onnx_import
