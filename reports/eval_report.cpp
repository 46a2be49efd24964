#include "reports/eval_report.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include <nlohmann/json.hpp>

namespace lnv::report {
namespace {

constexpr size_t kLeading = 4;  // values printed per output

nlohmann::json tensor_json(const EvalTensor& t) { return {{"shape", t.shape}, {"data", t.data}}; }

nlohmann::json tensors_json(const std::vector<EvalTensor>& ts) {
  nlohmann::json j = nlohmann::json::object();
  for (const EvalTensor& t : ts) j[t.name] = tensor_json(t);
  return j;
}

std::string leading(const EvalTensor& t) {
  std::ostringstream os;
  os << std::setprecision(10);
  for (size_t i = 0; i < std::min(kLeading, t.data.size()); ++i) os << (i ? ", " : "") << t.data[i];
  if (t.data.size() > kLeading) os << ", ...";
  return os.str();
}

}  // namespace

void to_json(nlohmann::json& j, const EvalReport& r) {
  j = {{"format", "lnverify.eval"}, {"version", 1},       {"model", r.model},
       {"mode", r.mode},            {"seed", r.seed},     {"bits", r.bits},
       {"precision", r.precision},  {"outputs", tensors_json(r.outputs)}};
  if (!r.has_gradients) return;
  j["loss"] = r.loss;
  j["gradients"] = {{"params", tensors_json(r.param_gradients)},
                    {"inputs", tensors_json(r.input_gradients)}};
}

std::string eval_outputs_text(const EvalReport& r) {
  std::ostringstream os;
  os << "model '" << r.model << "': " << r.inputs << " inputs, " << r.params << " params, "
     << r.nodes << " nodes; " << r.mode << " mode, seed " << r.seed << ", " << r.precision
     << "\n";
  os << std::setprecision(10);
  for (const EvalTensor& o : r.outputs)
    os << "output " << o.name << " " << to_string(o.shape) << ": " << leading(o) << "  (L2 norm "
       << o.l2_norm << ")\n";
  return os.str();
}

std::string eval_gradients_text(const EvalReport& r) {
  std::ostringstream os;
  os << std::setprecision(10);
  os << "loss " << r.loss << "\ngradient L2 norms:\n";
  for (const EvalTensor& p : r.param_gradients)
    os << "  param " << p.name << " " << to_string(p.shape) << ": " << p.l2_norm << "\n";
  for (const EvalTensor& in : r.input_gradients)
    os << "  input " << in.name << " " << to_string(in.shape) << ": " << in.l2_norm << "\n";
  return os.str();
}

}  // namespace lnv::report
