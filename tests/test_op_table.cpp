// The op table (core/ops.def, core/ops.h) against its uses: the enum, the name table and
// the family predicates agree with the rows, and every attribute of every op is read from
// JSON and written back as the table declares (kind, required or optional, default).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/graph.h"
#include "core/model_json.h"
#include "core/ops.h"

namespace lnv {
namespace {

using nlohmann::json;

static_assert(is_unary_nonlinearity(Op::relu) && is_unary_nonlinearity(Op::exp));
static_assert(!is_unary_nonlinearity(Op::add) && !is_unary_nonlinearity(Op::softmax));
static_assert(is_weighted(Op::linear) && is_weighted(Op::attention) && is_weighted(Op::matmul));
static_assert(!is_weighted(Op::layer_norm) && !is_weighted(Op::scale));
static_assert(op_from_name("layer_norm") == Op::layer_norm && !op_from_name("LayerNorm"));

std::vector<Op> all_ops() {
  std::vector<Op> ops;
  for (int k = 0; k < static_cast<int>(Op::kCount); ++k) ops.push_back(static_cast<Op>(k));
  return ops;
}

// A node of `op` with its fewest inputs and no attributes.
json bare_node(Op op) {
  json inputs = json::array();
  for (int k = 0; k < op_info(op).min_inputs; ++k) inputs.push_back("in" + std::to_string(k));
  return {{"name", "n"}, {"op", std::string(op_name(op))}, {"inputs", inputs}};
}

// A valid value of an attribute of kind `kind` that differs from every default in
// core/ops.def.
json sample(AttrKind kind, std::string_view key) {
  switch (kind) {
    case AttrKind::param: return "p_" + std::string(key);
    case AttrKind::boolean: return true;
    case AttrKind::integer: return 3;
    case AttrKind::integer_list: return {2, 0, 1};
    case AttrKind::integer_or_list: return {2, 3};
    case AttrKind::number: return 0.25;
    case AttrKind::string: return "relu";
    case AttrKind::rnn_norm:
      return {{"kind", "rms_norm"}, {"eps", 0.001}, {"weight", "g"}, {"bias", "b"}};
  }
  return nullptr;
}

// A JSON value of a type no attribute of kind `kind` accepts.
json wrong_type(AttrKind kind) { return kind == AttrKind::rnn_norm ? json(1) : json({{"x", 1}}); }

TEST(OpTable, EnumNamesAndRowsAgree) {
  std::set<std::string_view> names;
  for (Op op : all_ops()) {
    const OpInfo& info = op_info(op);
    SCOPED_TRACE(std::string(info.name));
    EXPECT_EQ(info.op, op);
    EXPECT_EQ(op_name(op), info.name);
    EXPECT_EQ(op_from_name(info.name), op);
    EXPECT_TRUE(names.insert(info.name).second) << "duplicate name";
    EXPECT_GE(info.min_inputs, op == Op::opaque ? 0 : 1);  // an opaque op may read nothing
    EXPECT_TRUE(info.max_inputs == -1 || info.max_inputs >= info.min_inputs);
    EXPECT_EQ(is_unary_nonlinearity(op), info.family == OpFamily::unary_nonlinearity);
    EXPECT_EQ(is_weighted(op), info.family == OpFamily::weighted_producer);
    std::set<std::string_view> keys;
    for (const OpAttr& a : info.attrs) {
      EXPECT_EQ(a.op, op);
      EXPECT_TRUE(keys.insert(a.key).second) << "duplicate attribute " << a.key;
      EXPECT_EQ(op_attr(op, a.key), &a);
    }
    EXPECT_EQ(op_attr(op, "no_such_attribute"), nullptr);
  }
  EXPECT_FALSE(op_from_name("bogus"));
}

// family_member (core/ops.h) takes exactly the ops of its family, and refuses the others as
// a bug; a member enumerator has its Op enumerator's value.
template <class Member>
void expect_members(OpFamily family) {
  for (Op op : all_ops()) {
    SCOPED_TRACE(std::string(op_name(op)));
    if (op_family(op) == family) {
      EXPECT_EQ(static_cast<Op>(family_member<Member>(op)), op);
    } else {
      EXPECT_THROW(family_member<Member>(op), InternalError);
    }
  }
}

TEST(OpTable, FamilyMembersAreTheRows) {
  expect_members<WeightedOp>(OpFamily::weighted_producer);
  expect_members<BinaryOp>(OpFamily::elementwise_binary);
  expect_members<UnaryOp>(OpFamily::unary_nonlinearity);
  expect_members<ReductionOp>(OpFamily::reduction);
  expect_members<ShapeOp>(OpFamily::shape_op);
  expect_members<NormOp>(OpFamily::norm);
}
static_assert(static_cast<Op>(UnaryOp::atan) == Op::atan);
static_assert(static_cast<Op>(NormOp::rms_norm) == Op::rms_norm);

// Every attribute set to a non-default value is read and written back unchanged.
TEST(OpTable, EveryAttributeRoundTrips) {
  for (Op op : all_ops()) {
    SCOPED_TRACE(std::string(op_name(op)));
    json j = bare_node(op);
    for (const OpAttr& a : op_info(op).attrs) j[std::string(a.key)] = sample(a.kind, a.key);
    const Node n = parse_node(j, "/nodes/0");
    EXPECT_EQ(node_to_json(n), j);
    // Node::param_attrs() lists every param attribute (finalize resolves them from it).
    const auto params = n.param_attrs();
    for (const OpAttr& a : op_info(op).attrs) {
      if (a.kind != AttrKind::param) continue;
      const std::pair<std::string, std::string> entry(a.key, "p_" + std::string(a.key));
      EXPECT_NE(std::find(params.begin(), params.end(), entry), params.end())
          << a.key << " is missing from Node::param_attrs()";
    }
    // An int-or-list attribute given as one int stays one int.
    for (const OpAttr& a : op_info(op).attrs)
      if (a.kind == AttrKind::integer_or_list) j[std::string(a.key)] = 2;
    EXPECT_EQ(node_to_json(parse_node(j, "/nodes/0")), j);
  }
}

// With only its required attributes, a node is written with those and the always-written
// ones at their defaults; a Node built in C++ (its member initializers) writes the same
// optional attributes, so the table's defaults and Node's agree.
TEST(OpTable, DefaultsAreTheTablesAndNodes) {
  for (Op op : all_ops()) {
    SCOPED_TRACE(std::string(op_name(op)));
    json j = bare_node(op);
    for (const OpAttr& a : op_info(op).attrs)
      if (a.presence == AttrPresence::required) j[std::string(a.key)] = sample(a.kind, a.key);
    const json written = node_to_json(parse_node(j, "/nodes/0"));
    EXPECT_EQ(node_to_json(parse_node(written, "/nodes/0")), written);

    Node built;
    built.name = "n";
    built.op = op;
    built.inputs = j["inputs"].get<std::vector<std::string>>();
    const json built_json = node_to_json(built);
    for (const OpAttr& a : op_info(op).attrs) {
      const std::string key(a.key);
      switch (a.presence) {
        case AttrPresence::required: EXPECT_EQ(written[key], j[key]) << key; break;
        case AttrPresence::optional:
          EXPECT_FALSE(written.contains(key)) << key << " written at its default";
          EXPECT_FALSE(built_json.contains(key))
              << "Node's initializer of " << key << " differs from core/ops.def's default";
          break;
        case AttrPresence::optional_always_written:
          EXPECT_TRUE(written.contains(key)) << key;
          EXPECT_EQ(built_json[key], written[key])
              << "Node's initializer of " << key << " differs from core/ops.def's default";
          break;
      }
    }
  }
}

TEST(OpTable, MissingRequiredAndMistypedAttributesNameTheirPath) {
  for (Op op : all_ops()) {
    SCOPED_TRACE(std::string(op_name(op)));
    json full = bare_node(op);
    for (const OpAttr& a : op_info(op).attrs) full[std::string(a.key)] = sample(a.kind, a.key);
    for (const OpAttr& a : op_info(op).attrs) {
      const std::string key(a.key);
      json mistyped = full;
      mistyped[key] = wrong_type(a.kind);
      try {
        parse_node(mistyped, "/nodes/0");
        ADD_FAILURE() << key << " of the wrong type was accepted";
      } catch (const ModelError& e) {
        EXPECT_EQ(e.where(), "/nodes/0/" + key);
        EXPECT_NE(std::string(e.what()).find("(node 'n')"), std::string::npos) << e.what();
      }
      if (a.presence != AttrPresence::required) continue;
      json missing = full;
      missing.erase(key);
      try {
        parse_node(missing, "/nodes/0");
        ADD_FAILURE() << "missing " << key << " was accepted";
      } catch (const ModelError& e) {
        EXPECT_EQ(e.where(), "/nodes/0");
        EXPECT_NE(std::string(e.what()).find("op " + std::string(op_name(op)) +
                                             " needs attribute '" + key + "'"),
                  std::string::npos)
            << e.what();
      }
    }
  }
}

TEST(OpTable, UnknownAttributesListWhatTheOpTakes) {
  auto error = [](json j) -> std::string {
    try {
      parse_node(j, "/nodes/0");
    } catch (const ModelError& e) {
      return e.what();
    }
    return "";
  };
  json conv = bare_node(Op::conv1d);
  conv["weight"] = "K";
  conv["axes"] = json::array({1});
  EXPECT_EQ(error(conv),
            "/nodes/0/axes: op conv1d has no attribute 'axes' (it takes: weight, bias, stride, "
            "padding, dilation, groups, cbwc) (node 'n')");
  json add = bare_node(Op::add);
  add["eps"] = 1e-5;
  EXPECT_EQ(error(add), "/nodes/0/eps: op add has no attribute 'eps' (it takes: none) (node 'n')");
}

// Every op occurs in some golden model (tests/golden/, run by test_golden), so each has
// verdicts derived by hand checked against the analysis, and exactly checked folds.
TEST(OpTable, EveryOpOccursInAGoldenModel) {
  std::set<std::string> used;
  for (const auto& e : std::filesystem::directory_iterator(LNV_SOURCE_DIR "/tests/golden")) {
    if (e.path().extension() != ".json") continue;
    std::ifstream in(e.path());
    const json model = json::parse(in);
    for (const json& n : model.at("nodes")) used.insert(n.at("op").get<std::string>());
  }
  for (Op op : all_ops())
    EXPECT_TRUE(used.count(std::string(op_name(op)))) << "no golden model uses " << op_name(op);
}

}  // namespace
}  // namespace lnv
