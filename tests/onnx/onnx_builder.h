// A small ONNX model written node by node with lnverify's ONNX IR (onnx/onnx_model.h), for
// tests that save it with save_onnx and import it: float values of static shape,
// initializers, nodes and their attributes.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "onnx/onnx_model.h"

namespace lnv::onnx_import {

struct OnnxBuilder {
  Model m;

  OnnxBuilder(int opset, const std::string& graph_name) {
    m.ir_version = 8;
    m.opset_imports = {{"", opset}};
    m.graph.name = graph_name;
  }

  static ValueInfo value(const std::string& name, const std::vector<int64_t>& dims) {
    ValueInfo v;
    v.name = name;
    v.type = ElemType::Float;
    std::vector<Dim> shape;
    for (int64_t d : dims) shape.push_back(Dim{d, ""});
    v.shape = shape;
    return v;
  }
  void input(const std::string& name, const std::vector<int64_t>& dims) { m.graph.inputs.push_back(value(name, dims)); }
  void output(const std::string& name, const std::vector<int64_t>& dims) { m.graph.outputs.push_back(value(name, dims)); }

  void init(const std::string& name, std::vector<int64_t> dims, std::vector<double> values) {
    Tensor t;
    t.dims = std::move(dims);
    t.floats = std::move(values);
    m.graph.initializers.push_back({name, t});
  }
  void scalar(const std::string& name, double v) { init(name, {}, {v}); }
  void ints_init(const std::string& name, std::vector<int64_t> values) {
    Tensor t;
    t.type = ElemType::Int64;
    t.dims = {int64_t(values.size())};
    t.ints = std::move(values);
    m.graph.initializers.push_back({name, t});
  }

  Node& node(const std::string& name, const std::string& op, std::vector<std::string> in,
             std::vector<std::string> out, const std::string& domain = "") {
    Node n;
    n.name = name;
    n.op_type = op;
    n.domain = domain;
    n.inputs = std::move(in);
    n.outputs = std::move(out);
    m.graph.nodes.push_back(n);
    return m.graph.nodes.back();
  }

  static void ints(Node& n, const std::string& name, std::vector<int64_t> v) {
    attribute(n, name, AttrKind::Ints).ints = std::move(v);
  }
  static void integer(Node& n, const std::string& name, int64_t v) { attribute(n, name, AttrKind::Int).i = v; }
  static void real(Node& n, const std::string& name, double v) { attribute(n, name, AttrKind::Float).f = v; }
  static void text(Node& n, const std::string& name, const std::string& v) {
    attribute(n, name, AttrKind::String).s = v;
  }

 private:
  static Attribute& attribute(Node& n, const std::string& name, AttrKind kind) {
    Attribute a;
    a.name = name;
    a.kind = kind;
    n.attributes.push_back(a);
    return n.attributes.back();
  }
};

}  // namespace lnv::onnx_import
