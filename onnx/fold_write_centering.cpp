// Centered params mapped back onto the initializers the ONNX nodes read (inference): the
// data replaced under its name when every reader wants the same centering, else a centered
// copy for the readers that want it; a centered lookup result centers the table it came from.
// A part of the FoldWriter of onnx/fold_writer_internal.h.
#include "onnx/fold_writer_internal.h"

namespace lnv::onnx_import::fold_write {

bool FoldWriter::all_zero(const std::vector<double>& v) {
  return std::all_of(v.begin(), v.end(), [](double x) { return x == 0.0; });
}

// The param `p` of the fold differs from the original: how it is centered.
std::optional<Centering> FoldWriter::change_of(const Param& p) const {
  if (!p.center_axes.empty())
    return Centering{p.center_axes, false, p.scale, p.scale_axis, p.scale_param};
  if (!g_.names.count(p.name)) return Centering{{}, true, {}, 0, {}};  // an untied copy, zeroed
  if (!p.values_deferred && all_zero(p.values) && !g_.zero.count(p.name))
    return Centering{{}, true, {}, 0, {}};
  return std::nullopt;
}

// The original param a param of the fold derives from ("<p>.centered", ".centered.2").
std::string FoldWriter::origin_param(const std::string& name) const {
  if (g_.names.count(name)) return name;
  const size_t at = name.rfind(".centered");
  if (at == std::string::npos) throw InternalError("write_folded_onnx: unknown param " + name);
  return name.substr(0, at);
}

// The ONNX node inputs reading `value` on behalf of lnv node `lnv_node`.
std::vector<Slot> FoldWriter::slots_of(const std::string& lnv_node, const std::string& value) const {
  std::vector<std::string> names;
  if (auto it = norms_.find(lnv_node); it != norms_.end()) names = it->second;
  std::vector<Slot> out;
  const std::string want = file_name(lnv_node);
  auto it = readers_.find(value);
  if (it == readers_.end()) return out;
  for (const Slot& s : it->second) {
    const auto& n = mp_.graph().node(s.node);
    const std::string label = n.name().empty() ? n.output(0) : n.name();
    const bool listed = std::find(names.begin(), names.end(), n.name().empty() ? "#" : n.name()) != names.end();
    const bool named = want == label || want.rfind(label + ".", 0) == 0 || want.rfind(label + ":", 0) == 0;
    if (listed || (names.empty() && named)) out.push_back(s);
  }
  return out;
}

void FoldWriter::center_params() {
  // Training reads inferred shapes: inferred once, on the graph before any rewiring.
  if (training()) inferred("");
  // Per ONNX value (an initializer, or a constant the import folded): the readers that
  // want each centering, and the fold's param holding it.
  struct Want {
    std::string value;
    std::map<Slot, std::string> slots;  // reader -> fold param
  };
  std::map<std::string, Want> wants;
  std::map<std::string, Centering> centering;  // fold param -> its centering
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> uses;  // param -> (node, attr)
  for (const lnv::Node& n : f_.nodes) {
    for (const auto& [attr, p] : n.param_attrs()) uses[p].push_back({n.name, attr});
    for (const std::string& in : n.inputs)
      if (f_.has(in) && f_.ref(in).kind == ValueRef::Kind::param) uses[in].push_back({n.name, in});
  }
  for (const Param& p : f_.params) {
    const auto c = change_of(p);
    if (!c) continue;
    centering[p.name] = *c;
    const std::string value = file_name(origin_param(p.name));
    for (const auto& [node, attr] : uses[p.name]) {
      if (folded_norms_.count(node)) continue;  // the norm's own params: replace_norms
      const auto slots = slots_of(node, value);
      if (slots.empty())
        throw ModelError(source_.string(), "the fold centers " + in_quotes(value) + " as read by " +
                                               in_quotes(file_name(node)) + ", and no ONNX node "
                                               "input maps to that use");
      for (const Slot& s : slots) {
        wants[value].value = value;
        wants[value].slots[s] = p.name;
      }
    }
  }
  uint64_t done = 0;
  for (const auto& [value, want] : wants) {
    report_progress(options_.progress, "center weights", "initializers", done++, wants.size());
    if (initializer_.count(value)) center_initializer(value, want.slots, centering);
    else center_lookup(value, want.slots, centering);
  }
  report_progress(options_.progress, "center weights", "initializers", done, wants.size());
}

int32_t FoldWriter::type_of_initializer(const std::string& name) const {
  return mp_.graph().initializer(initializer_.at(name)).data_type();
}

void FoldWriter::center_initializer(const std::string& value, const std::map<Slot, std::string>& slots,
                                    const std::map<std::string, Centering>& centering) {
  std::set<std::string> params;
  for (const auto& [s, p] : slots) params.insert(p);
  // A folded norm's nodes are removed, but its replacement reads a param the fold left
  // unchanged under the stored name (norm_param): such a value is not centered in place.
  bool every_reader = !read_as_stored_by_a_norm(value);
  for (const Slot& s : readers_.at(value))
    if (!removed_by_norm(s.node)) every_reader = every_reader && slots.count(s);
  if (training()) {
    for (const std::string& p : params) {
      const Param& fp = f_.params[f_.param_index(p)];
      const Centering& c = centering.at(p);
      std::vector<Slot> at_table;
      for (const auto& [s, q] : slots) {
        if (q != p) continue;
        if (c.remove || !center_rows_gathered(s, fp, c.axes)) at_table.push_back(s);
      }
      if (at_table.empty()) continue;
      const std::string name = center_in_graph(value, fp, c, at_table.front().node);
      for (const Slot& s : at_table) mp_.mutable_graph()->mutable_node(s.node)->set_input(s.input, name);
    }
    return;
  }
  auto& proto = *mp_.mutable_graph()->mutable_initializer(initializer_.at(value));
  const ox::TensorProto src = proto;  // where the data is read from (external: no data copied)
  for (const std::string& p : params) {
    const Param& fp = f_.params[f_.param_index(p)];
    const Centering& c = centering.at(p);
    if (every_reader && params.size() == 1) {
      if (!c.scale.empty()) store_scaled_centered(proto, src, fp.shape, c);
      else store_centered(proto, src, fp.shape, c.axes, c.remove);
      ++summary_.centered_in_place;
      changed_in_place_.insert(value);
      return;
    }
    const Shape dims(proto.dims().begin(), proto.dims().end());
    const std::string name = centered_initializer(value + ".centered", dims, src, fp.shape, c);
    for (const auto& [s, q] : slots)
      if (q == p) mp_.mutable_graph()->mutable_node(s.node)->set_input(s.input, name);
  }
}

// A constant folded from a chain of lookups/broadcasts over an initializer: the table is
// centered over the same trailing axes.
void FoldWriter::center_lookup(const std::string& value, const std::map<Slot, std::string>& slots,
                               const std::map<std::string, Centering>& centering) {
  std::set<std::string> params;
  for (const auto& [s, p] : slots) params.insert(p);
  const std::string where = source_.string() + ": the fold centers the constant " + in_quotes(value);
  if (params.size() != 1 || readers_.at(value).size() != slots.size())
    throw ModelError(where, "whose readers want different centerings; the ONNX writer cannot "
                            "split a folded constant");
  const Param& fp = f_.params[f_.param_index(*params.begin())];
  const Centering& c = centering.at(*params.begin());
  if (!c.scale.empty())
    throw ModelError(where, "which a LayerScale scales; the ONNX writer moves a LayerScale only "
                            "into initializers");
  if (training()) return center_lookup_result(value, slots, fp, c);
  const int64_t rank = int64_t(fp.shape.size());
  const int64_t k = c.remove ? 0 : int64_t(c.axes.size());
  for (size_t j = 0; j < c.axes.size(); ++j)
    if (c.axes[j] != rank - k + int64_t(j))
      throw ModelError(where, "over axes that are not trailing; the ONNX writer cannot center it");
  // Slice too: it keeps or drops whole entries along its axes; one that cuts a centered
  // axis changes its dim, which the dims check below refuses (a reversal keeps the mean).
  static const std::set<std::string> chain_ops = {"Gather", "Expand", "Reshape", "Unsqueeze",
                                                  "Squeeze", "Identity", "Slice"};
  std::string v = value;
  int first = -1;
  while (!initializer_.count(v)) {
    auto it = producer_.find(v);
    if (it == producer_.end()) throw ModelError(where, "which no node computes");
    const auto& n = mp_.graph().node(it->second);
    if (!chain_ops.count(n.op_type()) || (!n.domain().empty() && n.domain() != "ai.onnx"))
      throw ModelError(where, "computed by " + node_label(it->second) + "; the ONNX writer "
                              "centers only tables read through Gather, Slice, Expand, "
                              "Reshape, Unsqueeze, Squeeze or Identity");
    for (const auto& a : n.attribute())
      if (n.op_type() == "Gather" && a.name() == "axis" && a.i() != 0)
        throw ModelError(where, "read by " + node_label(it->second) + " along axis " +
                                std::to_string(a.i()) + " (the writer follows axis 0 only)");
    if (v != value && readers_.at(v).size() != 1)
      throw ModelError(where, "whose lookup chain is shared at " + in_quotes(v));
    first = it->second;
    v = n.input(0);
  }
  const auto& table = mp_.graph().initializer(initializer_.at(v));
  const Shape dims(table.dims().begin(), table.dims().end());
  const int64_t trank = int64_t(dims.size());
  if (trank <= k || (k > 0 && !std::equal(dims.end() - k, dims.end(), fp.shape.end() - k)))
    throw ModelError(where, "whose centered axes do not keep the dims of the table " + in_quotes(v));
  Axes axes;
  for (int64_t j = trank - k; j < trank; ++j) axes.push_back(j);
  const Centering wanted{axes, c.remove, {}, 0, {}};
  if (readers_.at(v).size() == 1) {
    const ox::TensorProto src = table;
    store_centered(*mp_.mutable_graph()->mutable_initializer(initializer_.at(v)), src, dims, axes, c.remove);
    ++summary_.centered_in_place;
    changed_in_place_.insert(v);
  } else {
    const std::string name = centered_initializer(v + ".centered", dims, table, dims, wanted);
    mp_.mutable_graph()->mutable_node(first)->set_input(0, name);
  }
}

}  // namespace lnv::onnx_import::fold_write
