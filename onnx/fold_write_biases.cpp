// Moved norm biases: the reader's Gemm or MatMul adds W·beta (a producer a residual add sums
// with the norm: beta itself), stored in the bias it adds (or a new one) in inference,
// computed in the graph from beta and W in training.
// A part of the FoldWriter of onnx/fold_writer_internal.h.
#include "onnx/fold_writer_internal.h"

#include <algorithm>

#include "onnx/file_labels.h"

namespace lnv::onnx_import::fold_write {

// The effective values of the fold's param `name` (centered as the fold says).
std::vector<double> FoldWriter::fold_values(const std::string& name) const {
  Param p = f_.params[f_.param_index(name)];
  if (p.values_deferred) materialize_values(p, model_dir_.string());
  return effective_values(p);
}

// The ONNX node (a Gemm or a MatMul) computing lnv node `reader` (onnx/file_labels.h): the
// one labelled as the file spells `reader`, else the last whose label prefixes it; -1 when
// none.
int FoldWriter::reader_node(const std::string& reader) const {
  const std::string want = file_name(reader);
  const std::vector<std::string> labels = labels_computing(want);
  int prefix = -1;
  for (int i = 0; i < mp_.graph().node_size(); ++i) {
    const auto& n = mp_.graph().node(i);
    if (n.op_type() != "Gemm" && n.op_type() != "MatMul") continue;
    if (!n.domain().empty() && n.domain() != "ai.onnx") continue;
    const std::string label = n.name().empty() ? n.output(0) : n.name();
    if (want == label) return i;
    if (std::find(labels.begin(), labels.end(), label) != labels.end()) prefix = i;
  }
  return prefix;
}

// The norm's bias a moved bias' image reads: W·beta reads it (a linear) or its row (a
// matmul); a residual producer's image is beta reshaped to [C] (rewrite.cpp, move_into).
std::string FoldWriter::moved_beta(const lnv::Node& image) const {
  if (image.op == Op::linear || image.op == Op::reshape) return image.inputs[0];
  return f_.nodes[f_.node_index(image.inputs[0])].inputs[0];
}

// R0(beta) of a moved bias, from the fold's values: W·beta (linear), beta·B (matmul) or
// beta (a residual producer).
std::vector<double> FoldWriter::moved_term(const lnv::Node& image, const std::string& beta) const {
  const std::vector<double> b = fold_values(beta);
  if (image.op == Op::reshape) return b;
  const bool linear = image.op == Op::linear;
  const std::string wname = linear ? image.weight : image.inputs[1];
  const Shape& ws = f_.params[f_.param_index(wname)].shape;
  const std::vector<double> w = fold_values(wname);
  // W as [out, in]: a linear's weight, a transposed matmul's B; else B is [in, out].
  const bool out_first = linear || image.transpose_b;
  const int64_t out = out_first ? ws[0] : ws[1], in = out_first ? ws[1] : ws[0];
  std::vector<double> v(size_t(out), 0.0);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) v[o] += w[out_first ? o * in + i : i * out + o] * b[i];
  return v;
}

// The lnv node the file's node `i` maps to (by name), or nullptr.
const lnv::Node* FoldWriter::fold_node_of(int i) const {
  const auto& n = mp_.graph().node(i);
  const std::string label = n.name().empty() ? n.output(0) : n.name();
  for (const auto& [lnv_name, file] : renamed_)
    if (file == label && f_.has(lnv_name) && f_.ref(lnv_name).kind == ValueRef::Kind::node)
      return &f_.nodes[f_.ref(lnv_name).index];
  if (f_.has(label) && f_.ref(label).kind == ValueRef::Kind::node) return &f_.nodes[f_.ref(label).index];
  return nullptr;
}

// Input `k` of node `i` holds `values` (its bias plus the moved term): stored over the
// initializer it reads when no other node reads it, else in a copy "<init>.moved".
void FoldWriter::store_bias(int i, int k, const std::vector<double>& values) {
  const std::string cur = mp_.graph().node(i).input(k);
  const bool own = initializer_.count(cur) && readers_.count(cur) && readers_.at(cur).size() == 1 &&
                   !is_graph_output(cur);
  if (own) {
    auto& proto = *mp_.mutable_graph()->mutable_initializer(initializer_.at(cur));
    store(proto, values);
    if (changed_in_place_.insert(cur).second) ++summary_.moved_in_place;
    return;
  }
  for (auto& t : new_initializers_)
    if (t.name() == cur) {  // a centered copy this writer made for this reader
      store(t, values);
      return;
    }
  const auto& src = mp_.graph().initializer(initializer_.at(cur));
  const Shape dims(src.dims().begin(), src.dims().end());
  mp_.mutable_graph()->mutable_node(i)->set_input(k, float_initializer(cur + ".moved", dims, values, src.data_type()));
}

// Whether input `k` of node `i` is a float initializer (or a copy this writer made) of
// `count` elements that broadcasts along the rows: a bias the moved term can join.
bool FoldWriter::bias_input(int i, int k, int64_t count) const {
  const auto& n = mp_.graph().node(i);
  if (k >= n.input_size() || n.input(k).empty()) return false;
  const ox::TensorProto* t = nullptr;
  if (auto it = initializer_.find(n.input(k)); it != initializer_.end()) t = &mp_.graph().initializer(it->second);
  for (const auto& c : new_initializers_)
    if (c.name() == n.input(k)) t = &c;
  if (!t || elem_bytes(t->data_type()) == 0 || numel_of(*t) != count || t->dims_size() == 0) return false;
  return t->dims(t->dims_size() - 1) == count;
}

void FoldWriter::move_biases() {
  for (const std::string& reader : moved_bias_readers(f_)) {
    const lnv::Node& own = f_.nodes[f_.node_index(moved_bias_own(reader))];
    const lnv::Node& image = f_.nodes[f_.node_index(moved_bias_image(reader))];
    const std::string beta = moved_beta(image);
    const int i = reader_node(reader);
    if (i < 0)
      throw ModelError(source_.string(), "the fold moves the bias " + in_quotes(file_name(beta)) +
                                             " into " + in_quotes(file_name(reader)) +
                                             ", which is no Gemm or MatMul node of the file");
    if (training()) {
      move_bias_in_graph(i, image, beta);
      continue;
    }
    std::vector<double> v = moved_term(image, beta);
    const int64_t out = int64_t(v.size());
    const auto& n = mp_.graph().node(i);
    // A Gemm computes alpha·A·B + beta·C, the lnv reader A·B: the term joins scaled. (A
    // residual producer is a linear, alpha = beta = 1, or a MatMul.)
    const double alpha = gemm_attr(n, "alpha"), gemm_beta = gemm_attr(n, "beta");
    if (alpha != 1.0)
      for (double& x : v) x *= alpha;
    auto plus = [&](std::vector<double> b) {
      for (int64_t o = 0; o < int64_t(b.size()); ++o) b[o] += v[o % out];
      return b;
    };
    if (n.op_type() == "Gemm" && !own.bias.empty() && bias_input(i, 2, out)) {
      store_bias(i, 2, plus(fold_values(own.bias)));
    } else if (n.op_type() == "Gemm" && n.input_size() < 3 && gemm_beta != 0.0) {
      for (double& x : v) x /= gemm_beta;
      mp_.mutable_graph()->mutable_node(i)->add_input(
          float_initializer(file_name(reader) + "/moved_bias", {out}, v, float_type_of(n.output(0), nullptr)));
    } else if (const auto add = bias_add_after(i, out)) {
      const lnv::Node* fa = fold_node_of(add->first);
      const std::string& bp = fa ? fa->inputs[add->second] : std::string();
      if (!fa || !f_.has(bp) || f_.ref(bp).kind != ValueRef::Kind::param)
        add_after(i, float_initializer(file_name(reader) + "/moved_bias", {out}, v,
                                       float_type_of(n.output(0), nullptr)));
      else
        store_bias(add->first, add->second, plus(fold_values(bp)));
    } else {
      add_after(i, float_initializer(file_name(reader) + "/moved_bias", {out}, v,
                                     float_type_of(n.output(0), nullptr)));
    }
  }
}

double FoldWriter::gemm_attr(const ox::NodeProto& n, const char* name) {
  if (n.op_type() != "Gemm") return 1.0;
  for (const auto& a : n.attribute())
    if (a.name() == name) return a.f();
  return 1.0;
}

// The Add (node, input) that alone reads node i's output and adds a bias initializer of
// `count` elements to it; nullopt when there is none.
std::optional<std::pair<int, int>> FoldWriter::bias_add_after(int i, int64_t count) const {
  const std::string y = mp_.graph().node(i).output(0);
  auto it = readers_.find(y);
  if (it == readers_.end() || it->second.size() != 1 || is_graph_output(y)) return std::nullopt;
  const Slot s = it->second.front();
  const auto& a = mp_.graph().node(s.node);
  if (a.op_type() != "Add" || (!a.domain().empty() && a.domain() != "ai.onnx")) return std::nullopt;
  const int k = 1 - s.input;
  if (!bias_input(s.node, k, count)) return std::nullopt;
  return std::make_pair(s.node, k);
}

// Node i's output y becomes Add(y', term): the node writes y', the Add placed after it y.
void FoldWriter::add_after(int i, const std::string& term) {
  auto& n = *mp_.mutable_graph()->mutable_node(i);
  const std::string y = n.output(0);
  const std::string own = fresh(y + ".own");
  n.set_output(0, own);
  declare_like(own, y);
  inserted_[i + 1].push_back(make_node((n.name().empty() ? y : n.name()) + "/moved_bias", "Add", {own, term}, y));
}

// Training: R0(beta) computed before node i from the stored beta and the weight node i
// reads (as centered in the graph): MatMul(W, beta) for a weight stored [out, in] (a
// transB Gemm's), MatMul(beta, B) for one stored [in, out]; ops on two initializers that
// the importer would fold into a constant (Transpose, Mul) are avoided, so W and beta
// stay parameters. It joins the bias the reader adds (Add(b, R0) read in place of b),
// else an Add after the reader.
void FoldWriter::move_bias_in_graph(int i, const lnv::Node& image, const std::string& beta) {
  const std::string b = file_name(beta);
  const Shape& bs = f_.params[f_.param_index(beta)].shape;
  if (!initializer_.count(b) ||
      Shape(mp_.graph().initializer(initializer_.at(b)).dims().begin(),
            mp_.graph().initializer(initializer_.at(b)).dims().end()) != bs)
    throw ModelError(source_.string(), "--mode training: the fold moves the bias " + in_quotes(b) +
                                           ", which the file does not store as an initializer of "
                                           "shape " + to_string(bs) + "; the training writer adds "
                                           "no parameters");
  const auto& n = mp_.graph().node(i);
  const std::string base = (n.name().empty() ? n.output(0) : n.name()) + "/moved_bias";
  if (gemm_attr(n, "alpha") != 1.0)
    throw ModelError(source_.string(), "--mode training: the fold moves the bias " + in_quotes(b) +
                                           " into " + node_label(i) + ", whose alpha is not 1");
  // A residual's producer adds beta itself, after its node: an Add of beta to the bias it
  // reads would be an op on two initializers, which the importer folds into a constant.
  if (image.op == Op::reshape) return add_after(i, b);
  const std::string w = n.input(1);
  bool out_first = image.transpose_b;
  if (n.op_type() == "Gemm") {
    out_first = false;
    for (const auto& a : n.attribute())
      if (a.name() == "transB") out_first = a.i() != 0;
  }
  auto& at = inserted_[i];
  const std::string term = fresh(base + "/MatMul_output_0");
  at.push_back(make_node(base, "MatMul", out_first ? std::vector<std::string>{w, b}
                                                   : std::vector<std::string>{b, w}, term));
  const int64_t out = f_.node_shapes[f_.node_index(image.name)].back();
  std::optional<std::pair<int, int>> joins;
  if (n.op_type() == "Gemm" && bias_input(i, 2, out)) joins = std::make_pair(i, 2);
  else joins = bias_add_after(i, out);
  if (!joins) return add_after(i, term);
  const std::string biased = fresh(base + "/Add_output_0");
  at.push_back(make_node(base, "Add", {mp_.graph().node(joins->first).input(joins->second), term}, biased));
  mp_.mutable_graph()->mutable_node(joins->first)->set_input(joins->second, biased);
}

}  // namespace lnv::onnx_import::fold_write
