// The opset of the written model: --rms-op onnx23 raises the default domain to 23 (refused
// with --keep-opset, or where an op the model uses changed its meaning) and moves the
// reductions' axes attribute into an input.
// A part of the FoldWriter of onnx/fold_writer_internal.h.
#include "onnx/fold_writer_internal.h"

namespace lnv::onnx_import::fold_write {

int64_t FoldWriter::default_opset() const {
  for (const auto& o : mp_.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") return o.version();
  return 0;
}

// onnx23 on an older model: raise the default-domain opset to 23 when every op of the
// graph means the same there. Between the model's opset and 17 (ONNX 1.12's registry
// knows both schemas) an op is refused when its signature changed: an input renamed,
// moved or added as required, or an attribute dropped (Split's `split`, Squeeze's `axes`,
// Slice's and Clip's attributes becoming inputs); a change of the types only (bfloat16)
// or an added optional attribute keeps its meaning. Softmax, LogSoftmax and Hardmax
// changed meaning at 13 without a signature change (one axis instead of a 2-D
// coercion). From 18 to 23 only the reductions' `axes` (an attribute before 18, an
// input from 18) matter to a float graph: those attributes move into int64 initializers.
bool FoldWriter::same_meaning(const std::string& op, int64_t opset) {
  static const std::set<std::string> axis_semantics = {"Softmax", "LogSoftmax", "Hardmax"};
  if (axis_semantics.count(op) && opset < 13) return false;
  const auto* from = ox::OpSchemaRegistry::Schema(op, int(std::min(opset, kKnownOpset)), "");
  const auto* to = ox::OpSchemaRegistry::Schema(op, int(kKnownOpset), "");
  if (!from || !to || from->SinceVersion() == to->SinceVersion()) return true;
  const bool reduction = op.rfind("Reduce", 0) == 0;
  const auto& a = from->inputs();
  const auto& b = to->inputs();
  for (size_t k = 0; k < b.size(); ++k) {
    if (k < a.size() && a[k].GetName() != b[k].GetName()) return false;
    if (k >= a.size() && b[k].GetOption() == ox::OpSchema::Single &&
        !(reduction && b[k].GetName() == "axes"))
      return false;
  }
  if (a.size() > b.size()) return false;
  for (const auto& [name, attr] : from->attributes())
    if (!to->attributes().count(name) && !(reduction && name == "axes")) return false;
  return true;
}

void FoldWriter::prepare_opset() {
  if (options_.rms_op != RmsOp::onnx23) return;
  const int64_t opset = default_opset();
  if (opset >= kRmsOpset) return;
  if (options_.keep_opset)
    throw ModelError(source_.string(), "--rms-op onnx23 needs opset 23 (RMSNormalization); the "
                                       "model imports opset " + std::to_string(opset) +
                                       " and --keep-opset forbids raising it");
  std::set<std::string> changed;
  for (const auto& n : mp_.graph().node()) {
    if (!n.domain().empty() && n.domain() != "ai.onnx") continue;
    if (!same_meaning(n.op_type(), opset)) changed.insert(n.op_type());
    for (const auto& a : n.attribute())
      if (a.type() == ox::AttributeProto::GRAPH || a.type() == ox::AttributeProto::GRAPHS)
        changed.insert(n.op_type() + " (a subgraph)");
  }
  if (!changed.empty()) {
    std::string list;
    for (const auto& c : changed) list += (list.empty() ? "" : ", ") + c;
    throw ModelError(source_.string(), "--rms-op onnx23 raises the opset from " +
                                           std::to_string(opset) + " to 23, where these ops "
                                           "are defined differently: " + list +
                                           "; use --rms-op decomposed or ort");
  }
  for (auto& n : *mp_.mutable_graph()->mutable_node()) move_reduce_axes(n);
  for (auto& o : *mp_.mutable_opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") o.set_version(kRmsOpset);
}

void FoldWriter::move_reduce_axes(ox::NodeProto& n) {
  static const std::set<std::string> reductions = {
      "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
      "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ReduceSum"};
  if (!reductions.count(n.op_type())) return;
  auto* attrs = n.mutable_attribute();
  for (int k = 0; k < attrs->size(); ++k) {
    if (attrs->Get(k).name() != "axes") continue;
    std::vector<int64_t> axes(attrs->Get(k).ints().begin(), attrs->Get(k).ints().end());
    attrs->DeleteSubrange(k, 1);
    n.add_input(int64_initializer((n.name().empty() ? n.output(0) : n.name()) + "/axes", axes));
    return;
  }
}

}  // namespace lnv::onnx_import::fold_write
