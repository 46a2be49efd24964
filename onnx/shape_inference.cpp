// ONNX shape inference (onnx/shape_inference.h): the one place lnv_onnx calls it, the
// binding of symbolic input dims before it, and infer_shapes (onnx/onnx_model.h), which
// runs it again over a rewritten Model.
#include "onnx/shape_inference.h"

#include <onnx/shape_inference/implementation.h>

#include <set>

#include "core/error.h"
#include "onnx/newer_opsets.h"
#include "onnx/proto_codec.h"

namespace lnv::onnx_import {
namespace {

namespace ox = ::onnx;

void bind_dims(ox::ValueInfoProto& vp, const DimBindings& dims, const std::string& file,
               bool required) {
  const std::string where = file + ": input " + in_quotes(vp.name());
  if (!vp.type().has_tensor_type()) {
    if (required) throw ModelError(where, "is not a tensor");
    return;
  }
  auto* tt = vp.mutable_type()->mutable_tensor_type();
  if (!tt->has_shape()) {
    if (required) throw ModelError(where, "has no shape (its rank is unknown)");
    return;
  }
  for (int k = 0; k < tt->shape().dim_size(); ++k) {
    auto* d = tt->mutable_shape()->mutable_dim(k);
    const std::string dim = "dim " + std::to_string(k);
    if (d->has_dim_value()) {
      if (d->dim_value() < 0)
        throw ModelError(where, dim + " is negative (" + std::to_string(d->dim_value()) + ")");
      continue;
    }
    if (!d->has_dim_param() || d->dim_param().empty()) {
      if (required)
        throw ModelError(where, dim + " has neither a size nor a name, so no --dim can bind it");
      continue;
    }
    auto it = dims.find(d->dim_param());
    if (it == dims.end()) {
      if (required)
        throw ModelError(where, dim + " is the symbol " + in_quotes(d->dim_param()) +
                                    ", which is not bound (pass --dim " + d->dim_param() + "=VALUE)");
      continue;
    }
    if (it->second < 0)
      throw ModelError(where, dim + ": --dim " + it->first + "=" + std::to_string(it->second) +
                                  " is negative");
    d->set_dim_value(it->second);
  }
}

}  // namespace

void infer_onnx_shapes(ox::ModelProto& mp, InferenceCheck check) {
  // No data propagation: ONNX 1.12's Shape propagator dereferences a missing input
  // type (a Split with bad sizes made it crash). The folder propagates shape values
  // itself and runs inference again after each round.
  const bool strict = check == InferenceCheck::strict;
  ox::ShapeInferenceOptions options(/*check_type=*/strict, /*error_mode=*/strict ? 1 : 0,
                                    /*enable_data_propagation=*/false);
  ox::shape_inference::InferShapes(mp, newer_opset_registry(), options);
}

// Every symbolic dim of the graph's (non-initializer) inputs gets its value from `dims`;
// outputs and value_info take the same values where they use the same names.
void bind_input_dims(ox::GraphProto& gp, const DimBindings& dims, const std::string& file) {
  std::set<std::string> initializers;
  for (const auto& t : gp.initializer()) initializers.insert(t.name());
  std::set<std::string> symbols;
  for (const auto& v : gp.input())
    if (!initializers.count(v.name()) && v.type().has_tensor_type() && v.type().tensor_type().has_shape())
      for (const auto& d : v.type().tensor_type().shape().dim())
        if (d.has_dim_param()) symbols.insert(d.dim_param());
  for (const auto& [name, value] : dims)
    if (!symbols.count(name)) {
      std::string known;
      for (const std::string& s : symbols) known += (known.empty() ? "" : ", ") + s;
      throw ModelError(file, "--dim " + name + ": no graph input has a dim named " + in_quotes(name) +
                                 (known.empty() ? " (its inputs have no symbolic dims)"
                                                : " (its symbolic dims: " + known + ")"));
    }
  for (auto& v : *gp.mutable_input())
    if (!initializers.count(v.name())) bind_dims(v, dims, file, true);
  for (auto& v : *gp.mutable_output()) bind_dims(v, dims, file, false);
  for (auto& v : *gp.mutable_value_info()) bind_dims(v, dims, file, false);
}

void run_shape_inference(ox::ModelProto& mp, const std::string& file) {
  try {
    infer_onnx_shapes(mp, InferenceCheck::lenient);
  } catch (const std::exception& e) {
    throw ModelError(file, std::string("ONNX shape inference failed: ") + e.what());
  }
}

void infer_shapes(Model& model) {
  ox::ModelProto mp = encode_model(model, /*float_data=*/false);
  mp.mutable_graph()->clear_value_info();
  run_shape_inference(mp, model.path.string());
  model.graph.value_info.clear();
  for (const auto& v : mp.graph().value_info()) model.graph.value_info.push_back(decode_value_info(v));
  for (int k = 0; k < mp.graph().output_size(); ++k)
    model.graph.outputs[static_cast<size_t>(k)] = decode_value_info(mp.graph().output(k));
}
}  // namespace lnv::onnx_import
