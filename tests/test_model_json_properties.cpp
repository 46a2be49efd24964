// Round-trip properties of model.json over random graphs of every op kind
// (generators/random_graph.h): text -> graph -> text is the identity, the graph read back
// has the same shapes and values, and params written as `data` keep every bit.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <rapidcheck/gtest.h>

#include "tests/rc_default_seed.h"

#include "core/model_json.h"
#include "generators/random_graph.h"

namespace lnv {
namespace {

// Asserts `b` is `a` read back: same text, shapes, values and sources.
void check_same(const Graph& a, const Graph& b) {
  RC_ASSERT(model_to_text(a, "") == model_to_text(b, ""));
  RC_ASSERT(a.node_shapes == b.node_shapes);
  RC_ASSERT(a.order == b.order);
  RC_ASSERT(a.params.size() == b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i) {
    RC_ASSERT(a.params[i].values == b.params[i].values);
    RC_ASSERT(a.params[i].source == b.params[i].source);
  }
}

RC_GTEST_PROP(ModelJsonProperties, RandomGraphsRoundTrip, ()) {
  const Graph g = *gen::gen_graph(gen::GenConfig{});
  for (const std::string& t : gen::graph_tags(g)) RC_TAG(t);
  const Graph back = parse_model(nlohmann::json::parse(model_to_text(g, "")), "");
  check_same(g, back);
}

RC_GTEST_PROP(ModelJsonProperties, DataParamsKeepEveryBit, ()) {
  Graph g = *gen::gen_graph(gen::GenConfig{});
  for (Param& p : g.params) p.source = ParamSource::data;  // init values written as numbers
  const Graph back = parse_model(nlohmann::json::parse(model_to_text(g, "")), "");
  check_same(g, back);
}

RC_GTEST_PROP(ModelJsonProperties, CenteredParamsAreWrittenCentered, ()) {
  Graph g = *gen::gen_graph(gen::GenConfig{});
  RC_PRE(!g.params.empty());
  const size_t k = *rc::gen::inRange<size_t>(0, g.params.size()).as("param");
  Param& p = g.params[k];
  RC_PRE(!p.shape.empty());
  p.center_axes = {0};
  const std::vector<double> centered = effective_values(p);
  const Graph back = parse_model(nlohmann::json::parse(model_to_text(g, "")), "");
  RC_ASSERT(back.params[k].source == ParamSource::data);
  RC_ASSERT(back.params[k].values == centered);
  RC_ASSERT(back.params[k].center_axes.empty());
}

}  // namespace
}  // namespace lnv
