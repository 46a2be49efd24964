// Small graphs for the evaluator tests, built field by field (no JSON).
#pragma once

#include <string>
#include <vector>

#include "core/graph.h"
#include "core/random.h"

namespace lnv::testing {

class GraphBuilder {
 public:
  explicit GraphBuilder(const std::string& name = "test") { g_.name = name; }

  GraphBuilder& input(const std::string& name, Shape shape) {
    g_.inputs.push_back({name, std::move(shape), DType::float_, 0});
    return *this;
  }

  GraphBuilder& index_input(const std::string& name, Shape shape, int64_t range) {
    g_.inputs.push_back({name, std::move(shape), DType::index, range});
    return *this;
  }

  // A param with the given values.
  GraphBuilder& param(const std::string& name, Shape shape, std::vector<double> values) {
    Param p;
    p.name = name;
    p.shape = std::move(shape);
    p.values = std::move(values);
    g_.params.push_back(std::move(p));
    return *this;
  }

  // A param with values drawn (normal, std `scale`) from a stream of its name.
  GraphBuilder& param(const std::string& name, Shape shape, double scale = 0.5) {
    SplitMix64 rng(12345, name);
    std::vector<double> v(numel(shape));
    for (double& x : v) x = scale * rng.normal();
    return param(name, std::move(shape), std::move(v));
  }

  // Adds a node; the returned reference is valid until the next node is added.
  Node& node(const std::string& name, Op op, std::vector<std::string> inputs) {
    Node n;
    n.name = name;
    n.op = op;
    n.inputs = std::move(inputs);
    g_.nodes.push_back(std::move(n));
    return g_.nodes.back();
  }

  Graph build(std::vector<std::string> outputs) {
    g_.outputs = std::move(outputs);
    Graph g = g_;
    g.finalize();
    return g;
  }

 private:
  Graph g_;
};

}  // namespace lnv::testing
