// The folded norms: each one's ONNX nodes replaced by an RMSNorm spelled as --rms-op says
// (decomposed, ONNX Runtime's fused op, its Skip variant taking the residual Add, or opset
// 23's RMSNormalization), with its params and declared types.
// A part of the FoldWriter of onnx/fold_writer_internal.h.
#include "onnx/fold_writer_internal.h"
#include "onnx/shape_inference.h"

namespace lnv::onnx_import::fold_write {

bool FoldWriter::removed_by_norm(int node) const { return norm_nodes_.count(node) != 0; }

// Whether a folded norm's RMSNorm reads initializer `value` as stored: its weight or bias,
// unchanged by the fold (norm_param).
bool FoldWriter::read_as_stored_by_a_norm(const std::string& value) const {
  for (const std::string& norm : folded_norms_) {
    const lnv::Node& fn = f_.nodes[f_.node_index(norm)];
    for (const std::string* p : {&fn.weight, &fn.bias})
      if (!p->empty() && file_name(*p) == value && !change_of(f_.params[f_.param_index(*p)]))
        return true;
  }
  return false;
}

int FoldWriter::node_by_label(const std::string& label) const {
  for (int i = 0; i < mp_.graph().node_size(); ++i)
    if (mp_.graph().node(i).name() == label) return i;
  return -1;
}

std::vector<int> FoldWriter::norm_node_indices(const std::string& norm) const {
  std::vector<int> out;
  auto it = norms_.find(norm);
  if (it == norms_.end())
    throw ModelError(source_.string(), "the fold swaps " + in_quotes(norm) + ", which meta.onnx.norms "
                                                                        "does not list");
  for (const std::string& label : it->second) {
    const int i = node_by_label(label);
    if (i < 0)
      throw ModelError(source_.string(), "norm " + in_quotes(norm) + ": its node " + in_quotes(label) +
                                             " is not a named node of the file; the ONNX writer "
                                             "needs named norm nodes");
    out.push_back(i);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void FoldWriter::collect_norm_nodes() {
  for (const std::string& norm : folded_norms_)
    for (int i : norm_node_indices(norm)) norm_nodes_.insert(i);
}

// ONNX shape inference's type and shape of `value` in the original graph (symbolic dims
// kept), run once on a copy without the large initializers' data.
std::optional<ox::ValueInfoProto> FoldWriter::inferred(const std::string& value) {
  if (!inferred_) {
    ox::ModelProto copy = mp_;
    for (auto& t : *copy.mutable_graph()->mutable_initializer())
      if (numel_of(t) > 4096) {
        t.clear_raw_data();
        t.clear_float_data();
        t.clear_external_data();
        t.clear_data_location();
      }
    try {
      infer_onnx_shapes(copy, InferenceCheck::lenient);
    } catch (const std::exception&) {
      // Types and shapes stay unknown; the writer falls back to the weight's type.
    }
    inferred_.emplace();
    for (const auto* list : {&copy.graph().input(), &copy.graph().value_info(), &copy.graph().output()})
      for (const auto& v : *list) inferred_->emplace(v.name(), v);
  }
  auto it = inferred_->find(value);
  if (it == inferred_->end()) return std::nullopt;
  return it->second;
}

int32_t FoldWriter::float_type_of(const std::string& value, const Param* weight) {
  if (const auto v = inferred(value); v && v->type().has_tensor_type() && v->type().tensor_type().elem_type())
    return v->type().tensor_type().elem_type();
  if (weight) {
    const std::string init = file_name(origin_param(weight->name));
    if (initializer_.count(init)) return type_of_initializer(init);
  }
  return ox::TensorProto::FLOAT;
}

// A value the RMSNorm computes before its last node has the shape and type of x: said in
// value_info, for tools whose shape inference does not know ONNX Runtime's op.
void FoldWriter::declare_like(const std::string& value, const std::string& x) {
  if (auto v = inferred(x); v && v->type().has_tensor_type()) {
    v->set_name(value);
    v->clear_doc_string();
    *mp_.mutable_graph()->add_value_info() = *v;
  }
}

ox::NodeProto FoldWriter::make_node(const std::string& base, const std::string& op,
                                    std::vector<std::string> inputs, const std::string& output) {
  ox::NodeProto n;
  n.set_name(fresh(base + "/" + op));
  n.set_op_type(op);
  for (auto& i : inputs) n.add_input(i);
  n.add_output(output);
  return n;
}

// ReduceMean(input) over `axes` (all of them when empty), keepdims 1: the axes an
// attribute below opset 18, an int64 initializer input from 18.
ox::NodeProto FoldWriter::reduce_mean(const std::string& base, const std::string& input,
                                      const std::vector<int64_t>& axes, const std::string& output) {
  ox::NodeProto n = make_node(base, "ReduceMean", {input}, output);
  if (!axes.empty() && default_opset() >= 18) {
    n.add_input(int64_initializer(base + "/axes", axes));
  } else if (!axes.empty()) {
    auto* a = n.add_attribute();
    a->set_name("axes");
    a->set_type(ox::AttributeProto::INTS);
    for (int64_t v : axes) a->add_ints(v);
  }
  auto* keep = n.add_attribute();
  keep->set_name("keepdims");
  keep->set_type(ox::AttributeProto::INT);
  keep->set_i(1);
  return n;
}

// The param of the norm, as an initializer name: the original's when unchanged and of the
// same dims, else a new one.
std::string FoldWriter::norm_param(const std::string& base, const char* what, const Param& p, int32_t type,
                                   int at) {
  const auto change = change_of(p);
  if (!change) {
    const std::string init = file_name(p.name);
    if (initializer_.count(init)) {
      const auto& t = mp_.graph().initializer(initializer_.at(init));
      if (Shape(t.dims().begin(), t.dims().end()) == p.shape && t.data_type() == type) return init;
    }
  }
  if (training()) {
    const std::string init = file_name(origin_param(p.name));
    if (!initializer_.count(init) || type_of_initializer(init) != type)
      throw ModelError(source_.string(), "--mode training: the RMSNorm at " + in_quotes(base) +
                                             " reads its " + what + " " + in_quotes(init) +
                                             ", which the file does not store as an initializer "
                                             "of the norm's type; the training writer adds no "
                                             "parameters");
    if (change) return center_in_graph(init, p, *change, at);
    // Stored with other dims of the same values ([1, C] for [C]): reshaped in the graph.
    const std::string out = fresh(init + ".reshaped");
    const std::vector<int64_t> dims(p.shape.begin(), p.shape.end());
    inserted_[at].push_back(make_node(base, "Reshape", {init, int64_initializer(base + "/" + what + "_shape", dims)}, out));
    return out;
  }
  if (p.values_deferred) {  // a norm param the fold changed, still in the file
    Param loaded = p;
    materialize_values(loaded, model_dir_.string());
    return float_initializer(base + "/" + what, p.shape, effective_values(loaded), type);
  }
  return float_initializer(base + "/" + what, p.shape, effective_values(p), type);
}

void FoldWriter::replace_norms() {
  for (const std::string& norm : folded_norms_) {
    const std::vector<int> nodes = norm_node_indices(norm);
    const std::set<int> in_norm(nodes.begin(), nodes.end());
    const lnv::Node& fn = f_.nodes[f_.node_index(norm)];
    if (fn.op != Op::rms_norm) throw InternalError("write_folded_onnx: " + norm + " is not folded");
    const auto& first = mp_.graph().node(nodes.front());
    const int last = nodes.back();
    if (first.op_type() == "EmbedLayerNormalization" && first.domain() == "com.microsoft") {
      replace_embed_norm(norm, nodes.front(), fn);
      continue;
    }
    if (first.op_type() == "SkipLayerNormalization" && first.domain() == "com.microsoft") {
      replace_skip_norm(norm, nodes.front(), fn);
      continue;
    }
    std::string x = first.input(0);
    const std::string y = mp_.graph().node(last).output(0);
    // A centering pushed through a Transpose (the importer's absorb_centering): the norm
    // reads x transposed as that Transpose does.
    std::vector<ox::NodeProto> transposed;
    for (int i : nodes)
      if (mp_.graph().node(i).op_type() == "Transpose" && mp_.graph().node(i).domain().empty()) {
        ox::NodeProto t = mp_.graph().node(i);
        t.set_input(0, x);
        x = fresh(x + ".transposed");
        t.set_output(0, x);
        transposed.push_back(t);
        declare_like(x, mp_.graph().node(i).output(0));  // the shape of the centered one
      }
    // A node some other output of which is read stays (LayerNormalization's Mean or
    // InvStdDev); its Y output is then renamed out of the way.
    for (int i : nodes) {
      auto& n = *mp_.mutable_graph()->mutable_node(i);
      bool other_read = false;
      for (const auto& o : n.output()) {
        if (o == y || o.empty()) continue;
        if (is_graph_output(o)) other_read = true;
        if (auto it = readers_.find(o); it != readers_.end())
          for (const Slot& s : it->second) other_read = other_read || !in_norm.count(s.node);
      }
      if (!other_read) {
        removed_.insert(i);
        continue;
      }
      for (int k = 0; k < n.output_size(); ++k)
        if (n.output(k) == y) n.set_output(k, fresh(y + ".unused"));
    }
    const int64_t rank = int64_t(f_.node_shapes[f_.node_index(norm)].size());
    const Axes axes = normalize_axes(fn.axes, rank, norm);
    const int64_t k = int64_t(axes.size());
    const Param* weight = fn.weight.empty() ? nullptr : &f_.params[f_.param_index(fn.weight)];
    const Param* bias = fn.bias.empty() ? nullptr : &f_.params[f_.param_index(fn.bias)];
    // Axes that are not trailing (a channel norm of NCHW, as ONNX Runtime's transpose
    // optimizer leaves one): only the decomposed spelling of a norm without affine params,
    // whose ReduceMean names its axes.
    std::vector<int64_t> written;
    for (int64_t j = 0; j < k; ++j) {
      written.push_back(axes[j] - rank);
      if (axes[j] != rank - k + j && (weight || bias || options_.rms_op != RmsOp::decomposed))
        throw ModelError(source_.string(), "norm " + in_quotes(norm) + " normalizes axes that are "
                                           "not trailing; the ONNX writer spells it only decomposed "
                                           "(--rms-op decomposed) and without a weight or bias");
    }
    const int32_t type = float_type_of(x, weight);
    const std::string base = file_name(norm) + "/RMS";
    if (options_.rms_op == RmsOp::ort_skip && k == 1 && weight && transposed.empty() &&
        (type == ox::TensorProto::FLOAT || type == ox::TensorProto::FLOAT16)) {
      const int64_t features = f_.node_shapes[f_.node_index(norm)].back();
      if (const auto skip = residual_add(x, features)) {
        std::vector<ox::NodeProto> rms = skip_rms_nodes(base, *skip, x, y, fn.eps, weight, bias, type);
        auto& at = inserted_[skip->add];
        at.insert(at.end(), rms.begin(), rms.end());
        ++summary_.norms;
        continue;
      }
    }
    std::vector<ox::NodeProto> rms = rms_nodes(base, x, y, written, fn.eps, weight, bias, type, last);
    rms.insert(rms.begin(), transposed.begin(), transposed.end());
    auto& before_last = inserted_[last];  // after the nodes centering its params (training)
    before_last.insert(before_last.end(), rms.begin(), rms.end());
    ++summary_.norms;
  }
}

// com.microsoft.SkipLayerNormalization (input + skip + bias, then a LayerNorm over the last
// axis) folded: ONNX Runtime's SkipSimplifiedLayerNormalization of the same input, skip and
// bias with the folded scale, a bias (beta) as a separate Add; the sum output (3) keeps its
// name. The node stays fused, in any --rms-op.
void FoldWriter::replace_skip_norm(const std::string& norm, int i, const lnv::Node& fn) {
  const ox::NodeProto n = mp_.graph().node(i);
  for (int k = 1; k < 3 && k < n.output_size(); ++k)
    if (!n.output(k).empty() && (readers_.count(n.output(k)) || is_graph_output(n.output(k))))
      throw InternalError("write_folded_onnx: " + norm + " reads a statistic of a fused skip norm");
  if (fn.weight.empty()) throw InternalError("write_folded_onnx: " + norm + " has no scale");
  const Param& weight = f_.params[f_.param_index(fn.weight)];
  const Param* bias = fn.bias.empty() ? nullptr : &f_.params[f_.param_index(fn.bias)];
  const int32_t type = float_type_of(n.input(0), &weight);
  const std::string base = file_name(norm) + "/RMS";
  const std::string y = n.output(0);
  const std::string normed = bias ? fresh(base + "/normed_output_0") : y;
  std::vector<std::string> inputs = {n.input(0), n.input(1), norm_param(base, "weight", weight, type, i)};
  if (n.input_size() > 4 && !n.input(4).empty()) inputs.push_back(n.input(4));
  ox::NodeProto r = make_node(base, "SkipSimplifiedLayerNormalization", inputs, normed);
  r.set_domain("com.microsoft");
  if (n.output_size() > 3 && !n.output(3).empty()) {
    r.add_output("");
    r.add_output("");
    r.add_output(n.output(3));
  }
  auto* e = r.add_attribute();
  e->set_name("epsilon");
  e->set_type(ox::AttributeProto::FLOAT);
  e->set_f(float(fn.eps));
  std::vector<ox::NodeProto> out = {r};
  if (bias) {
    declare_like(normed, n.input(0));
    out.push_back(make_node(base, "Add", {normed, norm_param(base, "bias", *bias, type, i)}, y));
  }
  removed_.insert(i);
  auto& at = inserted_[i];
  at.insert(at.end(), out.begin(), out.end());
  ++summary_.norms;
}

// com.microsoft.EmbedLayerNormalization folded: the same node over its centered tables
// (center_params centers them as the lookups' producers: in place, or in the graph in
// training). The sum of centered rows has mean zero, so the node's LayerNorm of it is the
// RMSNorm of the fold, and it stays one fused kernel with its mask_index output
// (docs/spec/decisions.md, "A folded EmbedLayerNormalization stays one node"). Its gamma
// and beta are the folded norm's, in any --rms-op.
void FoldWriter::replace_embed_norm(const std::string& norm, int i, const lnv::Node& fn) {
  auto& n = *mp_.mutable_graph()->mutable_node(i);
  if (fn.weight.empty() || fn.bias.empty())
    throw InternalError("write_folded_onnx: " + norm + " has no gamma or beta");
  const Param& gamma = f_.params[f_.param_index(fn.weight)];
  const Param& beta = f_.params[f_.param_index(fn.bias)];
  const int32_t type = float_type_of(n.input(2), &gamma);
  const std::string base = file_name(norm) + "/RMS";
  n.set_input(5, norm_param(base, "gamma", gamma, type, i));
  n.set_input(6, norm_param(base, "beta", beta, type, i));
  ++summary_.norms;
}

bool FoldWriter::same_shape(const std::string& a, const std::string& b) {
  const auto va = inferred(a), vb = inferred(b);
  if (!va || !vb || !va->type().tensor_type().has_shape() || !vb->type().tensor_type().has_shape())
    return false;
  const auto& sa = va->type().tensor_type().shape();
  const auto& sb = vb->type().tensor_type().shape();
  if (sa.dim_size() != sb.dim_size() || sa.dim_size() < 2 || sa.dim_size() > 3) return false;
  for (int d = 0; d < sa.dim_size(); ++d) {
    const auto &da = sa.dim(d), &db = sb.dim(d);
    const bool values = da.has_dim_value() && db.has_dim_value() && da.dim_value() == db.dim_value();
    const bool params = da.has_dim_param() && db.has_dim_param() && da.dim_param() == db.dim_param();
    if (!values && !params) return false;
  }
  return true;
}

// Where ONNX's shape inference leaves a shape open (a Reshape to a computed shape): the
// imported Add of node i adds two operands of its own shape at the bound dims.
bool FoldWriter::same_shape_bound(int i) const {
  const lnv::Node* a = fold_node_of(i);
  if (!a || a->op != Op::add || a->inputs.size() != 2) return false;
  const Shape& out = f_.node_shapes[f_.node_index(a->name)];
  return out.size() >= 2 && out.size() <= 3 && f_.shape_of(a->inputs[0]) == out &&
         f_.shape_of(a->inputs[1]) == out;
}

bool FoldWriter::is_default_add(int i) const {
  const auto& n = mp_.graph().node(i);
  return n.op_type() == "Add" && (n.domain().empty() || n.domain() == "ai.onnx") &&
         n.input_size() == 2 && n.output_size() == 1;
}

// The residual Add that computes norm input `x`, with both addends of x's shape; nullopt
// when x is no such Add's output (or another norm took that Add).
std::optional<FoldWriter::ResidualAdd> FoldWriter::residual_add(const std::string& x, int64_t features) {
  auto it = producer_.find(x);
  if (it == producer_.end() || removed_.count(it->second) || !is_default_add(it->second))
    return std::nullopt;
  const auto& n = mp_.graph().node(it->second);
  if (!(same_shape(n.input(0), x) && same_shape(n.input(1), x)) && !same_shape_bound(it->second))
    return std::nullopt;
  ResidualAdd r{it->second, -1, n.input(0), n.input(1), ""};
  for (int k : {1, 0}) {
    const std::string v = n.input(k);
    auto p = producer_.find(v);
    if (p == producer_.end() || removed_.count(p->second) || !is_default_add(p->second) ||
        readers_.at(v).size() != 1 || is_graph_output(v))
      continue;
    const auto& b = mp_.graph().node(p->second);
    for (int j : {1, 0}) {
      const ox::TensorProto* t = initializer_of(b.input(j));
      if (!t || t->dims_size() != 1 || t->dims(0) != features) continue;
      r.bias = b.input(j);
      (k == 0 ? r.input : r.skip) = b.input(1 - j);
      r.bias_add = p->second;
      break;
    }
    if (r.bias_add >= 0) break;
  }
  removed_.insert(r.add);
  if (r.bias_add >= 0) removed_.insert(r.bias_add);
  return r;
}

// The initializer (original or one this writer added) named `name`, or nullptr.
const ox::TensorProto* FoldWriter::initializer_of(const std::string& name) const {
  if (auto it = initializer_.find(name); it != initializer_.end()) return &mp_.graph().initializer(it->second);
  for (const auto& t : new_initializers_)
    if (t.name() == name) return &t;
  return nullptr;
}

// SkipSimplifiedLayerNormalization(input, skip, weight[, bias]) writing the RMSNorm and,
// as its fourth output, the sum x when another node or the graph reads it; then the
// norm's own bias as an Add when it kept one.
std::vector<ox::NodeProto> FoldWriter::skip_rms_nodes(const std::string& base, const ResidualAdd& r,
                                                      const std::string& x, const std::string& y, double eps,
                                                      const Param* weight, const Param* bias, int32_t type) {
  bool sum_read = is_graph_output(x);
  for (const Slot& s : readers_.count(x) ? readers_.at(x) : std::vector<Slot>{})
    sum_read = sum_read || !removed_by_norm(s.node);
  const std::string normed = bias ? fresh(base + "/normed_output_0") : y;
  std::vector<std::string> inputs{r.input, r.skip, norm_param(base, "weight", *weight, type, r.add)};
  if (!r.bias.empty()) inputs.push_back(r.bias);
  ox::NodeProto n = make_node(base, "SkipSimplifiedLayerNormalization", inputs, normed);
  n.set_domain("com.microsoft");
  if (sum_read) {
    n.add_output("");
    n.add_output("");
    n.add_output(x);
  }
  auto* e = n.add_attribute();
  e->set_name("epsilon");
  e->set_type(ox::AttributeProto::FLOAT);
  e->set_f(float(eps));
  ensure_ms_opset();
  // ONNX's shape inference does not know the com.microsoft op: its outputs are declared.
  declare_like(normed, x);
  std::vector<ox::NodeProto> out{n};
  if (bias) {
    out.push_back(make_node(base, "Add", {normed, norm_param(base, "bias", *bias, type, r.add)}, y));
  }
  ++summary_.skip_fused;
  return out;
}

void FoldWriter::ensure_ms_opset() {
  for (const auto& o : mp_.opset_import())
    if (o.domain() == "com.microsoft") return;
  auto* o = mp_.add_opset_import();
  o->set_domain("com.microsoft");
  o->set_version(1);
}

std::vector<ox::NodeProto> FoldWriter::rms_nodes(const std::string& base, const std::string& x,
                                                 const std::string& y, const std::vector<int64_t>& axes,
                                                 double eps, const Param* weight, const Param* bias,
                                                 int32_t type, int at) {
  std::vector<ox::NodeProto> out;
  auto value = [&](const char* what) { return fresh(base + "/" + what + "_output_0"); };
  const std::string normed = bias ? value("normed") : y;
  const int64_t k = int64_t(axes.size());
  if (options_.rms_op == RmsOp::decomposed) {
    // Pow(x, 2), not Mul(x, x): ONNX Runtime's SimplifiedLayerNormFusion matches
    // Pow -> ReduceMean -> Add -> Sqrt -> Div(x, .) -> Mul(scale) and runs one fused
    // kernel (docs/onnx.md, "Which --rms-op").
    // A half-precision norm takes its mean square in float32 (as LayerNormalization's
    // stash_type 1 does): epsilon keeps its float value, which float16 cannot hold
    // (1e-5f would be stored as 1.0014e-5), and x^2 cannot overflow.
    const bool half = type == ox::TensorProto::FLOAT16 || type == ox::TensorProto::BFLOAT16;
    const int32_t stat = half ? int32_t(ox::TensorProto::FLOAT) : type;
    auto cast = [&](const std::string& in, int32_t to) {
      const std::string o = value("Cast");
      ox::NodeProto c = make_node(base, "Cast", {in}, o);
      auto* a = c.add_attribute();
      a->set_name("to");
      a->set_type(ox::AttributeProto::INT);
      a->set_i(to);
      out.push_back(c);
      return o;
    };
    const std::string xs = half ? cast(x, stat) : x;
    const char* pow = onnx_op_of(RmsStep::square);
    const char* add = onnx_op_of(RmsStep::plus_eps);
    const char* root = onnx_op_of(RmsStep::root);
    const char* div = onnx_op_of(RmsStep::normalize);
    const std::string sq = value(pow), ms = value(onnx_op_of(RmsStep::mean_square)), ve = value(add),
                      sd = value(root);
    const std::string scaled = weight ? value(div) : normed;
    out.push_back(make_node(base, pow, {xs, float_initializer(base + "/two", {}, {2.0}, stat)}, sq));
    out.push_back(reduce_mean(base, sq, axes, ms));
    out.push_back(make_node(base, add, {ms, float_initializer(base + "/epsilon", {}, {eps}, stat)}, ve));
    out.push_back(make_node(base, root, {ve}, sd));
    out.push_back(make_node(base, div, {x, half ? cast(sd, type) : sd}, scaled));
    if (weight)
      out.push_back(make_node(base, onnx_op_of(RmsStep::weight),
                              {scaled, norm_param(base, "weight", *weight, type, at)}, normed));
  } else {
    if (!weight)
      throw ModelError(source_.string(), "a norm without a weight needs --rms-op decomposed "
                                         "(the fused ops take a scale)");
    ox::NodeProto n = make_node(base, fused_rms_op(options_.rms_op),
                                {x, norm_param(base, "weight", *weight, type, at)}, normed);
    auto* a = n.add_attribute();
    a->set_name("axis");
    a->set_type(ox::AttributeProto::INT);
    a->set_i(-k);
    auto* e = n.add_attribute();
    e->set_name("epsilon");
    e->set_type(ox::AttributeProto::FLOAT);
    e->set_f(float(eps));
    auto* s = n.add_attribute();
    s->set_name("stash_type");
    s->set_type(ox::AttributeProto::INT);
    s->set_i(1);
    out.push_back(n);
  }
  if (bias) {
    if (options_.rms_op == RmsOp::ort || options_.rms_op == RmsOp::ort_skip) declare_like(normed, x);
    out.push_back(make_node(base, onnx_op_of(RmsStep::bias), {normed, norm_param(base, "bias", *bias, type, at)}, y));
  }
  return out;
}

}  // namespace lnv::onnx_import::fold_write
