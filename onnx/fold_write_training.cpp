// Training mode: centered values computed by new nodes, Sub(W, ReduceMean(W)), placed
// before the first reader, so that every initializer keeps its bytes.
// A part of the FoldWriter of onnx/fold_writer_internal.h.
#include "onnx/fold_writer_internal.h"

namespace lnv::onnx_import::fold_write {

bool FoldWriter::training() const { return options_.mode == Mode::training; }

// The use of initializer `init` that the fold's param `p` stands for, centered as `c`:
// the value computed from `init` by nodes placed before node `before`.
std::string FoldWriter::center_in_graph(const std::string& init, const Param& p, const Centering& c, int before) {
  const auto& t = mp_.graph().initializer(initializer_.at(init));
  const Shape dims(t.dims().begin(), t.dims().end());
  if (dims != p.shape)
    throw ModelError(source_.string(), "--mode training: the fold centers " + in_quotes(init) +
                                           " as a tensor of shape " + to_string(p.shape) +
                                           ", and the file stores it as " + to_string(dims) +
                                           "; the training writer centers initializers as stored");
  if (!c.scale.empty()) return center_nodes(scale_in_graph(init, c, before), c.axes, false, before, dims, t.data_type());
  return center_nodes(init, c.axes, c.remove, before);
}

// Mul(W, Reshape(γ, dims with γ's size on the scale axis and 1 elsewhere)) before node
// `before`: a LayerScale moved into W, computed from the stored W and γ.
std::string FoldWriter::scale_in_graph(const std::string& init, const Centering& c, int before) {
  const std::string gamma = file_name(c.scale_param);
  if (!initializer_.count(gamma))
    throw ModelError(source_.string(), "--mode training: the fold moves the LayerScale " +
                                           in_quotes(gamma) + " into " + in_quotes(init) +
                                           ", and the file does not store it as an initializer");
  const auto& t = mp_.graph().initializer(initializer_.at(init));
  std::vector<int64_t> dims(size_t(t.dims_size()), 1);
  dims.at(size_t(c.scale_axis)) = int64_t(c.scale.size());
  const std::string base = init + "/layer_scale";
  const std::string shaped = fresh(gamma + ".along_" + init);
  const std::string out = fresh(init + ".scaled");
  auto& at = inserted_[before];
  at.push_back(make_node(base, "Reshape", {gamma, int64_initializer(base + "/shape", dims)}, shaped));
  at.push_back(make_node(base, "Mul", {init, shaped}, out));
  return out;
}

// An embedding lookup Gather(W, ids) (axis 0) of a table centered along its other axes:
// centering commutes with taking rows, so the gathered rows are centered after the
// Gather, which keeps it a lookup of the stored table. False when `s` is no such read.
bool FoldWriter::center_rows_gathered(const Slot& s, const Param& p, const Axes& axes) {
  const auto& n = mp_.graph().node(s.node);
  if (n.op_type() != "Gather" || (!n.domain().empty() && n.domain() != "ai.onnx") || s.input != 0)
    return false;
  for (const auto& a : n.attribute())
    if (a.name() == "axis" && a.i() != 0) return false;
  if (std::find(axes.begin(), axes.end(), 0) != axes.end()) return false;
  const std::string rows = n.output(0);
  const auto info = inferred(rows);
  if (!info || !info->type().tensor_type().has_shape() || is_graph_output(rows)) return false;
  const int64_t rank = info->type().tensor_type().shape().dim_size();
  const int64_t shift = rank - int64_t(p.shape.size());
  if (shift < 0) return false;
  Axes out_axes;
  for (int64_t a : axes) out_axes.push_back(a + shift);
  const std::vector<Slot> row_readers = readers_.count(rows) ? readers_.at(rows) : std::vector<Slot>{};
  const std::string centered = center_value(rows, out_axes, s.node + 1, *info);
  for (const Slot& r : row_readers) mp_.mutable_graph()->mutable_node(r.node)->set_input(r.input, centered);
  return true;
}

// The lookup's result `value` (every reader of which wants `c`), centered where it is
// read: the chain stays a lookup of the stored table.
void FoldWriter::center_lookup_result(const std::string& value, const std::map<Slot, std::string>& slots,
                                      const Param& p, const Centering& c) {
  Axes axes = c.axes;
  if (c.remove) {
    axes.clear();
    for (size_t a = 0; a < p.shape.size(); ++a)
      if (p.shape[a] == 1) axes.push_back(int64_t(a));
    if (axes.empty() && !p.shape.empty())
      throw ModelError(source_.string(), "--mode training: the fold zeroes the constant " +
                                             in_quotes(value) + " (shape " + to_string(p.shape) +
                                             "), which has no axis of size 1 to compute the "
                                             "zeros over in the graph");
  }
  ox::ValueInfoProto like;
  if (const auto v = inferred(value)) like = *v;
  const std::string centered = center_value(value, axes, slots.begin()->first.node, like, c.remove);
  for (const auto& [s, q] : slots) mp_.mutable_graph()->mutable_node(s.node)->set_input(s.input, centered);
}

// Sub(W, ReduceMean(W, axes, keepdims=1)) before node `before`; for a removed term the
// axes are W's size-1 axes (all of a scalar's), so the difference is W minus itself.
std::string FoldWriter::center_nodes(const std::string& init, Axes axes, bool remove, int before) {
  const auto& t = mp_.graph().initializer(initializer_.at(init));
  return center_nodes(init, std::move(axes), remove, before, Shape(t.dims().begin(), t.dims().end()),
                      t.data_type());
}

// The same for a value `init` of dims `dims` and element type `type`.
std::string FoldWriter::center_nodes(const std::string& init, Axes axes, bool remove, int before,
                                     const Shape& dims, int32_t type) {
  if (remove) {
    axes.clear();
    for (size_t a = 0; a < dims.size(); ++a)
      if (dims[a] == 1) axes.push_back(int64_t(a));
    if (axes.empty() && !dims.empty())
      throw ModelError(source_.string(), "--mode training: the fold zeroes " + in_quotes(init) +
                                             " (shape " + to_string(dims) + "), which has no "
                                             "axis of size 1 to compute the zeros over in the graph");
  }
  ox::ValueInfoProto info;
  auto* tt = info.mutable_type()->mutable_tensor_type();
  tt->set_elem_type(type);
  auto* shape = tt->mutable_shape();
  for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
  return center_value(init, axes, before, info, remove);
}

// Sub(v, ReduceMean(v, axes, keepdims=1)) ("<v>.centered", or "<v>.zero" when it is v
// minus itself) by nodes placed before node `before`, declared with the type and shape
// of `like`.
std::string FoldWriter::center_value(const std::string& v, const Axes& axes, int before,
                                     ox::ValueInfoProto like, bool remove) {
  const std::string base = v + (remove ? "/zero" : "/center");
  const std::string mean = fresh(v + ".mean");
  const std::string out = fresh(v + (remove ? ".zero" : ".centered"));
  auto& at = inserted_[before];
  at.push_back(reduce_mean(base, v, {axes.begin(), axes.end()}, mean));
  at.push_back(make_node(base, "Sub", {v, mean}, out));
  if (like.type().has_tensor_type()) {
    like.set_name(out);
    like.clear_doc_string();
    *mp_.mutable_graph()->add_value_info() = std::move(like);
  }
  ++summary_.centered_in_graph;
  return out;
}

}  // namespace lnv::onnx_import::fold_write
