// The audit report: JSON fields of docs/spec/format.md "Reports", the text table and summary,
// and the norm-cost estimate.
#include <gtest/gtest.h>

#include <map>

#include <nlohmann/json.hpp>

#include "core/analysis/fold_plan.h"
#include "reports/audit_report.h"
#include "tests/eval_test_graphs.h"

namespace lnv {
namespace {

using testing::GraphBuilder;

// fc -> ln_ok; fc -> drop -> ln_drop; x -> ln_in. In training, fc's shift through the
// dropout reaches ln_drop unabsorbed, so neither fc LN folds; ln_in never does.
Graph three_norms() {
  GraphBuilder b;
  b.input("x", {2, 3, 8}).param("w", {8, 8}).param("g", {8});
  b.node("fc", Op::linear, {"x"}).weight = "w";
  Node& ok = b.node("ln_ok", Op::layer_norm, {"fc"});
  ok.axes = {-1};
  ok.weight = "g";
  b.node("drop", Op::dropout, {"fc"}).p = 0.1;
  b.node("ln_drop", Op::layer_norm, {"drop"}).axes = {-1};
  b.node("ln_in", Op::layer_norm, {"x"}).axes = {-1};
  return b.build({"ln_ok", "ln_drop", "ln_in"});
}

TEST(AuditReport, JsonHasTheReportFields) {
  const Graph g = three_norms();
  const nlohmann::json j = report::audit_json(g, detect_foldable(g, Mode::inference));
  EXPECT_EQ(j.at("format"), "lnverify.report");
  EXPECT_EQ(j.at("version"), 1);
  ASSERT_EQ(j.at("layer_norms").size(), 3u);
  std::map<std::string, nlohmann::json> by_name;
  for (const auto& e : j.at("layer_norms")) by_name[e.at("name")] = e;
  const nlohmann::json lns[3] = {by_name["ln_ok"], by_name["ln_drop"], by_name["ln_in"]};
  EXPECT_EQ(lns[0].at("name"), "ln_ok");
  EXPECT_EQ(lns[0].at("foldable").at("inference"), true);
  EXPECT_EQ(lns[0].at("foldable").at("training"), false);
  EXPECT_EQ(lns[0].at("centered"), nlohmann::json::array({"fc"}));
  EXPECT_EQ(lns[0].at("reasons").at("inference"), "");
  EXPECT_NE(lns[0].at("reasons").at("training").get<std::string>().find("`ln_drop`"),
            std::string::npos);
  EXPECT_EQ(lns[1].at("name"), "ln_drop");
  EXPECT_EQ(lns[1].at("foldable").at("inference"), true);
  EXPECT_EQ(lns[1].at("foldable").at("training"), false);
  EXPECT_NE(lns[1].at("reason").get<std::string>().find("`drop`"), std::string::npos);
  EXPECT_EQ(lns[1].at("reasons").at("inference"), "");
  EXPECT_EQ(lns[2].at("foldable").at("inference"), false);
  EXPECT_EQ(lns[2].at("opaque"), true);
  EXPECT_NE(lns[2].at("reason").get<std::string>().find("`x`"), std::string::npos);
  const auto& s = j.at("summary");
  EXPECT_EQ(s.at("layer_norms"), 3);
  EXPECT_EQ(s.at("foldable_inference"), 2);
  EXPECT_EQ(s.at("foldable_training"), 0);
}

TEST(AuditReport, ListsTheOpaqueOps) {
  GraphBuilder b;
  b.input("x", {2, 4});
  Node& foo = b.node("foo", Op::opaque, {"x"});
  foo.op_type = "com.microsoft.Foo", foo.shape = {2, 4};
  Node& topk = b.node("topk", Op::opaque, {"foo"});
  topk.op_type = "TopK", topk.shape = {2, 1};
  b.node("ln", Op::layer_norm, {"foo"}).axes = {-1};
  const Graph g = b.build({"ln", "topk"});
  const FoldPlan plan = detect_foldable(g, Mode::inference);
  const nlohmann::json j = report::audit_json(g, plan);
  EXPECT_EQ(j.at("opaque_ops"),
            nlohmann::json::parse(R"([{"name": "foo", "op_type": "com.microsoft.Foo"},
                                      {"name": "topk", "op_type": "TopK"}])"));
  const std::string text = report::audit_text(g, plan);
  EXPECT_NE(text.find("opaque ops"), std::string::npos) << text;
  EXPECT_NE(text.find("topk (TopK)"), std::string::npos) << text;
  EXPECT_EQ(report::audit_json(three_norms(), detect_foldable(three_norms(), Mode::inference))
                .at("opaque_ops"),
            nlohmann::json::array());
}

TEST(AuditReport, NormCostCountsFoldedNormsAsRms) {
  const Graph g = three_norms();
  const FoldPlan plan = detect_foldable(g, Mode::inference);
  const report::NormCost c = report::norm_cost(g, plan);
  const double e = 2 * 3 * 8;  // elements per norm
  // ln_ok has a weight: 6 -> 4; ln_drop 5 -> 3; ln_in stays 5.
  EXPECT_DOUBLE_EQ(c.before, e * (6 + 5 + 5));
  EXPECT_DOUBLE_EQ(c.after, e * (4 + 3 + 5));
  FoldPlan none = plan;
  none.fold.clear();
  EXPECT_DOUBLE_EQ(report::norm_cost(g, none).removed_share(), 0.0);
}

// fc -> ln_lin (bias) -> head (linear); fc -> ln_res (bias) -> out (a graph output, and
// read by a linear): ln_lin's bias moves into head, ln_res keeps its bias.
Graph two_biased_norms() {
  GraphBuilder b;
  b.input("x", {2, 3, 8}).param("w", {8, 8}).param("beta1", {8}).param("beta2", {8});
  b.param("wh", {4, 8});
  b.node("fc", Op::linear, {"x"}).weight = "w";
  Node& lin = b.node("ln_lin", Op::layer_norm, {"fc"});
  lin.axes = {-1};
  lin.bias = "beta1";
  b.node("head", Op::linear, {"ln_lin"}).weight = "wh";
  Node& res = b.node("ln_res", Op::layer_norm, {"fc"});
  res.axes = {-1};
  res.bias = "beta2";
  b.node("head2", Op::linear, {"ln_res"}).weight = "wh";
  return b.build({"head", "head2", "ln_res"});
}

TEST(AuditReport, ShowsWhereEachFoldedBiasGoes) {
  const Graph g = two_biased_norms();
  const FoldPlan plan = detect_foldable(g, Mode::inference);
  const nlohmann::json j = report::audit_json(g, plan);
  std::map<std::string, nlohmann::json> by_name;
  for (const auto& e : j.at("layer_norms")) by_name[e.at("name")] = e.at("bias");
  EXPECT_EQ(by_name["ln_lin"].at("fate"), "moves");
  EXPECT_EQ(by_name["ln_lin"].at("readers"), nlohmann::json::array({"head"}));
  EXPECT_EQ(by_name["ln_res"].at("fate"), "kept");
  EXPECT_NE(by_name["ln_res"].at("kept").get<std::string>().find("graph output"), std::string::npos)
      << by_name["ln_res"];
  const std::string t = report::audit_text(g, plan);
  EXPECT_NE(t.find("bias kept: `ln_res`, which carries its bias, is a graph output"), std::string::npos) << t;
  // Per element: ln_lin 6 -> 3 (its bias moved), ln_res 6 -> 4.
  const double e = 2 * 3 * 8;
  const report::NormCost c = report::norm_cost(g, plan);
  EXPECT_DOUBLE_EQ(c.before, e * (6 + 6));
  EXPECT_DOUBLE_EQ(c.after, e * (3 + 4));
}

TEST(AuditReport, TextListsEveryNormAndSummarizes) {
  const Graph g = three_norms();
  const std::string t = report::audit_text(g, detect_foldable(g, Mode::inference));
  for (const char* name : {"ln_ok", "ln_drop", "ln_in"})
    EXPECT_NE(t.find(name), std::string::npos) << t;
  EXPECT_NE(t.find("why not (training)"), std::string::npos) << t;
  EXPECT_NE(t.find("2 of 3 LayerNorms foldable (inference), 0 (training)"), std::string::npos)
      << t;
}

}  // namespace
}  // namespace lnv
