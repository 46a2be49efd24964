#include "onnx/newer_opsets.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace lnv::onnx_import {
namespace {

namespace ox = ::onnx;

// The newest opset ONNX 1.12's registry knows for the default domain.
constexpr int kKnownOpset = 17;

// A schema of a newer opset made from an older one with the same inputs and outputs.
ox::OpSchema renamed(const char* base, int base_version, const char* name, int since) {
  ox::OpSchema s = *ox::OpSchemaRegistry::Schema(base, base_version, "");
  s.SetName(name);
  s.SinceVersion(since);
  return s;
}

ox::OpSchema with_int_attr(const char* op, int base_version, int since, const char* attr) {
  ox::OpSchema s = *ox::OpSchemaRegistry::Schema(op, base_version, "");
  s.SinceVersion(since);
  s.Attr(attr, "", ox::AttributeProto::INT, false);
  return s;
}

ox::OpSchema with_string_attr(const char* base, int base_version, const char* name, int since,
                              const char* attr) {
  ox::OpSchema s = renamed(base, base_version, name, since);
  s.Attr(attr, "", ox::AttributeProto::STRING, false);
  return s;
}

// ONNX Runtime's com.microsoft.SkipSimplifiedLayerNormalization (input, skip, gamma[, bias]
// -> output[, mean, inv_std_var, input_skip_bias_sum], with epsilon), which the fold
// writes for a norm after a residual Add (--rms-op ort): output and sum have the input's
// type and shape.
ox::OpSchema skip_simplified_layer_norm() {
  ox::OpSchema s;
  s.SetName("SkipSimplifiedLayerNormalization");
  s.SetDomain("com.microsoft");
  s.SinceVersion(1);
  const std::vector<std::string> floats = {"tensor(float)", "tensor(float16)", "tensor(bfloat16)",
                                           "tensor(double)"};
  s.Input(0, "input", "", "T").Input(1, "skip", "", "T").Input(2, "gamma", "", "T");
  s.Input(3, "bias", "", "T", ox::OpSchema::Optional);
  s.Output(0, "output", "", "T").Output(1, "mean", "", "U", ox::OpSchema::Optional);
  s.Output(2, "inv_std_var", "", "U", ox::OpSchema::Optional);
  s.Output(3, "input_skip_bias_sum", "", "T", ox::OpSchema::Optional);
  s.TypeConstraint("T", floats, "").TypeConstraint("U", {"tensor(float)"}, "");
  s.Attr("epsilon", "", ox::AttributeProto::FLOAT, false);
  s.TypeAndShapeInferenceFunction([](ox::InferenceContext& ctx) {
    for (size_t o : {size_t(0), size_t(3)}) {
      if (o >= ctx.getNumOutputs()) continue;
      ox::propagateElemTypeFromInputToOutput(ctx, 0, o);
      if (ox::hasInputShape(ctx, 0)) ox::propagateShapeFromInputToOutput(ctx, 0, o);
    }
  });
  s.Finalize();
  return s;
}

class NewerOpsetRegistry final : public ox::ISchemaRegistry {
 public:
  NewerOpsetRegistry() {
    // From opset 18 every reduction takes `axes` as an optional input and has
    // noop_with_empty_axes: ReduceSum's opset-13 signature.
    for (const char* op : {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                           "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"})
      add(renamed("ReduceSum", 13, op, 18));
    add(with_int_attr("Split", 13, 18, "num_outputs"));
    add(with_int_attr("Cast", 13, 19, "saturate"));
    // Gelu (opset 20): a unary op with a string `approximate`, as Relu's signature.
    add(with_string_attr("Relu", 14, "Gelu", 20, "approximate"));
    // RMSNormalization (opset 23): X, scale -> Y with axis, epsilon, stash_type; checked
    // with LayerNormalization's signature (whose optional bias and statistics outputs it
    // lacks: the importer refuses those).
    add(renamed("LayerNormalization", 17, "RMSNormalization", 23));
    // ONNX Runtime's SimplifiedLayerNormalization (X, scale -> Y, with axis, epsilon,
    // stash_type; an optional inv_std_var output), which ONNX Runtime registers in the
    // default domain (version 1 on); files also spell it in com.microsoft. ONNX 1.12 has no
    // schema for it, so shape inference would stop at it: checked and inferred as
    // LayerNormalization.
    simplified_ = renamed("LayerNormalization", 17, "SimplifiedLayerNormalization", 1);
    skip_simplified_ = skip_simplified_layer_norm();
  }

  const ox::OpSchema* GetSchema(const std::string& key, const int max_version,
                                const std::string& domain) const override {
    const bool onnx_domain = domain.empty() || domain == "ai.onnx";
    if ((onnx_domain || domain == "com.microsoft") && key == "SimplifiedLayerNormalization" &&
        max_version >= 1)
      return &simplified_;
    if (domain == "com.microsoft") {
      if (const ox::OpSchema* s = contrib_schema(key)) return s;
    }
    // ONNX Runtime registers LayerNormalization in the default domain from version 1 and
    // writes it into graphs of any opset (its LayerNormFusion): checked and inferred with
    // the opset-17 schema.
    if (onnx_domain && key == "LayerNormalization" && max_version < 17 && max_version >= 1)
      return ox::OpSchemaRegistry::Instance()->GetSchema(key, 17, domain);
    if (!onnx_domain || max_version <= kKnownOpset)
      return ox::OpSchemaRegistry::Instance()->GetSchema(key, max_version, domain);
    auto it = newer_.find(key);
    if (it != newer_.end()) {
      auto v = it->second.upper_bound(max_version);
      if (v != it->second.begin()) return &std::prev(v)->second;
    }
    return ox::OpSchemaRegistry::Instance()->GetSchema(key, kKnownOpset, domain);
  }

 private:
  void add(ox::OpSchema s) {
    const std::string name = s.Name();
    const int since = s.SinceVersion();
    newer_[name].emplace(since, std::move(s));
  }
  std::map<std::string, std::map<int, ox::OpSchema>> newer_;
  ox::OpSchema simplified_, skip_simplified_;
};

}  // namespace

const ox::ISchemaRegistry* newer_opset_registry() {
  static const NewerOpsetRegistry registry;
  return &registry;
}

}  // namespace lnv::onnx_import
