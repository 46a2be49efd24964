// A folded LayerScale: the Mul by γ becomes an Identity, and γ's initializer goes when
// nothing reads it any more (its producer's weight and biases carry γ).
// A part of the FoldWriter of onnx/fold_writer_internal.h.
#include "onnx/fold_writer_internal.h"

namespace lnv::onnx_import::fold_write {

// Each Mul by a γ that the fold moved into weights (a param of the fold names it as its
// scale_param; the lnv node reading it became `scale` by 1): replaced by an Identity of
// its other input, under the same node name and output.
void FoldWriter::replace_layer_scales() {
  std::set<std::string> gammas;
  for (const Param& p : f_.params)
    if (!p.scale_param.empty()) gammas.insert(p.scale_param);
  for (const std::string& gamma : gammas) {
    const std::string value = file_name(gamma);
    bool found = false;
    for (const lnv::Node& n : f_.nodes) {
      if (n.op != Op::scale || n.factor != 1.0) continue;
      for (const Slot& s : slots_of(n.name, value)) {
        const auto& mul = mp_.graph().node(s.node);
        if (mul.op_type() != "Mul" || mul.input_size() != 2 || removed_.count(s.node)) continue;
        ox::NodeProto id;
        id.set_name(mul.name());
        id.set_doc_string(mul.doc_string());
        id.set_op_type("Identity");
        id.add_input(mul.input(1 - s.input));
        id.add_output(mul.output(0));
        inserted_[s.node].push_back(std::move(id));
        removed_.insert(s.node);
        found = true;
      }
    }
    if (!found)
      throw ModelError(source_.string(), "the fold moves the LayerScale " + in_quotes(value) +
                                             " into weights, and no ONNX Mul reading it maps to "
                                             "the folded node");
  }
}

}  // namespace lnv::onnx_import::fold_write
