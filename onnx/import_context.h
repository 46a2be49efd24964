// Private to onnx/import*.cpp: the state of one import (the ONNX graph read, the lnv::Graph
// built) and what the op mappers and the norm matchers ask of it.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/graph.h"
#include "onnx/onnx_model.h"
#include "onnx/spellings.h"

namespace lnv::onnx_import {

class Importer {
 public:
  explicit Importer(const Model& folded);

  const Model& model() const { return m_; }
  const std::vector<onnx_import::Node>& nodes() const { return m_.graph.nodes; }
  std::string describe(size_t i) const;  // "<file>: node 'x' (Op)"

  // ---- the ONNX graph ----
  ElemType elem_type(const std::string& v) const;
  bool is_float_value(const std::string& v) const { return is_float_type(elem_type(v)); }
  const Initializer* constant(const std::string& v) const;  // nullptr if not a constant
  bool is_constant(const std::string& v) const { return constant(v) != nullptr; }
  // The first input of `n` that is a float constant holding an infinity or a NaN (which
  // no model.json param can hold), or nullopt.
  std::optional<std::string> non_finite_input(const onnx_import::Node& n) const;
  std::optional<double> scalar(const std::string& v) const;  // a one-element constant
  // The float values of constant `v`, read from its file when load_onnx left them there;
  // an infinity or a NaN is an error naming the initializer.
  std::vector<double> floats(const std::string& v) const;
  const std::vector<int64_t>& shape(const std::string& v) const;  // static; throws if unknown
  bool has_shape(const std::string& v) const { return shapes_.count(v) != 0; }
  int64_t numel(const std::string& v) const;
  bool is_index_input(const std::string& v) const;
  int producer(const std::string& v) const;  // node index, -1 for inputs and constants
  const std::vector<int>& consumers(const std::string& v) const;
  bool is_graph_output(const std::string& v) const { return graph_outputs_.count(v) != 0; }
  bool used(const onnx_import::Node& n, size_t output) const;  // read by a node or an output

  // A float attribute, or `dflt` when absent, rounded to float as the attribute would hold
  // it (ONNX's float attributes and their defaults are 32-bit: epsilon 1e-5 is 1e-5f).
  double attr_f(const onnx_import::Node& n, const std::string& a, double dflt) const;
  int64_t attr_i(const onnx_import::Node& n, const std::string& a, int64_t dflt) const;
  std::string attr_s(const onnx_import::Node& n, const std::string& a, const std::string& dflt) const;
  std::vector<int64_t> attr_ints(const onnx_import::Node& n, const std::string& a,
                                 const std::vector<int64_t>& dflt) const;
  // A reduction's axes: the attribute, or the constant second input (opset 18; ReduceSum
  // from 13); empty when none are given; nullopt when the input is not a constant.
  std::optional<Axes> reduce_axes(const onnx_import::Node& n) const;

  // ---- the lnv graph being built ----
  void import_inputs();
  // The lnv name holding ONNX value `v` (a constant becomes a param on first use).
  std::string value(const std::string& v);
  // The constant `v` as a param of `shape` (the same values; a copy when the shape differs).
  std::string param_as(const std::string& v, const Shape& shape);
  std::string new_param(const std::string& want, const Shape& shape, std::vector<double> values);
  // A param whose values stay in the file of stored tensor `t` until they are needed
  // (values_deferred, with a lazy source that names the initializer on errors).
  std::string stored_param(const std::string& want, const Shape& shape, const Tensor& t);
  // A node for ONNX node `n` (index i): named as n (or its first output), with ".suffix"
  // when it is one of several nodes n expands into.
  lnv::Node node(const onnx_import::Node& n, size_t i, Op op, std::vector<std::string> inputs,
                 const std::string& suffix = "");
  lnv::Node named_node(const std::string& want, Op op, std::vector<std::string> inputs);
  std::string emit(lnv::Node node);
  void emit_final(lnv::Node node, const std::string& onnx_value);
  void alias(const std::string& onnx_value, const std::string& of);
  void alias_lnv(const std::string& onnx_value, const std::string& lnv_name) { values_[onnx_value] = lnv_name; }
  // Node i as `opaque` nodes, one per output read (named as the node, or "<node>:<k>" when
  // several are read), with ONNX shape inference's shapes and the ONNX op type
  // ("domain.Op" outside the default domain); its inputs are every value it reads but
  // integer constants and non-finite float constants. `why` (why it is not mapped onto a model.json op) goes into
  // meta.onnx.opaque.
  void opaque(size_t i, const std::string& why);
  // Whether node i reads a value whose shape is unknown (an opaque op's output that shape
  // inference could not type, or a value computed from one).
  bool reads_unshaped(size_t i) const;
  // Leaves node i out of the graph (it reads an unshaped value): its outputs are unshaped
  // too. A norm (LayerNormalization, SimplifiedLayerNormalization, RMSNormalization,
  // Skip(Simplified)LayerNormalization) with a constant weight stays as a norm over the
  // weight's dims of an `opaque` node that stands for the op whose shape is unknown (reading
  // what that op reads), so that its verdict is a "no" naming that op; the norm is an output
  // of the graph (the file's outputs computed from that op are left out).
  void leave_out(size_t i);
  // A norm matched in a decomposed spelling (`name`, of `op`, eps, over the trailing
  // `dims` its weight or bias has) whose input `x` has no shape: kept as leave_out keeps a
  // norm op (left out like any node when `dims` is empty: no affine param tells them), its
  // output `out` unshaped. Throws ModelError when no unknown op explains x.
  void leave_out_norm(const std::string& x, const std::string& out, const std::string& name, Op op,
                      double eps, const std::vector<int64_t>& dims);
  void note_index_range(const std::string& input, int64_t rows);
  // ONNX values of key lengths [B] that the lnv graph holds as exact float counts (an
  // EmbedLayerNormalization's mask_index, import_patterns.cpp), which an Attention's key
  // mask reads (import_contrib.cpp).
  void note_key_lengths(const std::string& v) { key_lengths_.insert(v); }
  // A norm computed inside a fused op the fold keeps (lnv::Graph::fused_norms).
  void note_fused_norm(const std::string& lnv_name) { g_.fused_norms.push_back(lnv_name); }
  bool key_lengths(const std::string& v) const { return key_lengths_.count(v) != 0; }
  void consume(size_t i) { consumed_.insert(i); }
  bool consumed(size_t i) const { return consumed_.count(i) != 0; }
  void record_norm(const std::string& lnv_name, const std::vector<size_t>& onnx_nodes);
  // Finishes and finalizes the graph; throws ModelError naming the file.
  lnv::Graph finish();

 private:
  std::string fresh(const std::string& want);

  const Model& m_;
  lnv::Graph g_;
  std::map<std::string, std::vector<int64_t>> shapes_;
  std::unordered_map<std::string, ElemType> types_;
  std::unordered_map<std::string, const Initializer*> constants_;
  std::unordered_map<std::string, int> producers_;
  std::unordered_map<std::string, std::vector<int>> consumers_;
  std::set<std::string> graph_outputs_;
  std::set<std::string> index_inputs_;
  std::map<std::string, int64_t> index_ranges_;
  std::set<std::string> key_lengths_;
  std::unordered_map<std::string, std::string> values_;  // ONNX value -> lnv name
  UniqueNames names_;                                     // lnv names taken
  std::set<size_t> consumed_;
  nlohmann::json renamed_ = nlohmann::json::object();
  nlohmann::json norms_ = nlohmann::json::object();
  nlohmann::json opaque_ = nlohmann::json::object();  // opaque node -> why it is not mapped
  // ONNX value whose shape is unknown -> the node it comes from: "node 'x' (Op)", its ONNX
  // op type (with domain) and name
  struct UnshapedCause {
    std::string described, op_type, name;
    std::vector<std::string> inputs;  // the lnv values it reads
  };
  std::map<std::string, UnshapedCause> unshaped_;
  std::vector<std::string> cone_outputs_;  // the norms leave_out keeps
  void stand_in_norm(const UnshapedCause& cause, const std::string& name, Op op, double eps,
                     const std::vector<int64_t>& dims);
};

using Mapper = void (*)(Importer&, const onnx_import::Node&, size_t);

// The mappers of ONNX Runtime's com.microsoft ops (onnx/import_contrib.cpp), by op type;
// FusedGemm builds on the default domain's Gemm mapper.
const std::map<std::string, Mapper>& contrib_mappers();
Mapper contrib_gemm_mapper();

// Norms (every spelling of docs/onnx.md) and Gelu's Erf spelling, matched over the whole
// graph before the nodes are mapped one by one. Each match marks the nodes it spans
// consumed and is keyed by the index of its last node, where its emitter runs.
std::map<size_t, std::function<void(Importer&)>> match_patterns(Importer& im);

}  // namespace lnv::onnx_import
