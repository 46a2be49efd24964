// The architecture zoo: every architecture builds at test size, round-trips through
// model.json, and gets the verdicts derived by hand from docs/spec/semantics.md's rules (the comment
// before each expectation gives the derivation). Default sizes match the real models'
// parameter counts.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <set>

#include "core/analysis/fold_plan.h"
#include "core/error.h"
#include "core/model_json.h"
#include "generators/architectures.h"

namespace lnv {
namespace {

using zoo::ArchOptions;
using zoo::build_architecture;
using Names = std::set<std::string>;

ArchOptions text_small() {
  ArchOptions o;
  o.layers = 2, o.hidden = 16, o.heads = 2, o.seq = 6, o.vocab = 20, o.batch = 2;
  return o;
}

ArchOptions vit_small() {
  ArchOptions o;
  o.layers = 2, o.hidden = 16, o.heads = 2, o.image = 16, o.patch = 4, o.classes = 5;
  o.batch = 2;
  return o;
}

// Four stages of one block: an 8x8 patch grid halved to 4, 2, 1.
ArchOptions staged_small(const std::string& arch) {
  ArchOptions o;
  o.depths = {1, 1, 1, 1}, o.hidden = 8, o.classes = 5;
  if (arch == "swin") o.heads = 1, o.image = 16, o.patch = 2, o.window = 2;
  else o.image = 32, o.patch = 4;
  return o;
}

ArchOptions small(const std::string& arch) {
  if (arch == "vit") return vit_small();
  if (arch == "swin" || arch == "convnext") return staged_small(arch);
  return text_small();
}

Names all_lns(const FoldPlan& plan) {
  Names out;
  for (const LnVerdict& v : plan.layer_norms) out.insert(v.name);
  return out;
}

Names foldable(const FoldPlan& plan, Mode m) {
  Names out;
  for (const LnVerdict& v : plan.layer_norms)
    if (v.foldable[int(m)]) out.insert(v.name);
  return out;
}

const LnVerdict& verdict(const FoldPlan& plan, const std::string& name) {
  for (const LnVerdict& v : plan.layer_norms)
    if (v.name == name) return v;
  throw std::runtime_error("no LN named " + name);
}

struct Expected {
  Names lns, inference, training;
};

void expect_verdicts(const Graph& g, const Expected& e) {
  const FoldPlan plan = detect_foldable(g, Mode::inference);
  EXPECT_EQ(all_lns(plan), e.lns) << g.name;
  EXPECT_EQ(foldable(plan, Mode::inference), e.inference) << g.name << " (inference)";
  EXPECT_EQ(foldable(plan, Mode::training), e.training) << g.name << " (training)";
  // Every "no" carries a reason.
  for (const LnVerdict& v : plan.layer_norms)
    for (int m = 0; m < 2; ++m)
      if (!v.foldable[m]) {
        EXPECT_FALSE(v.reason[m].empty()) << g.name << ": " << v.name;
      }
  // The training plan agrees with the inference plan on the verdicts.
  const FoldPlan train = detect_foldable(g, Mode::training);
  EXPECT_EQ(foldable(train, Mode::training), e.training) << g.name;
}

// --- building and the model format ----------------------------------------------------

class EveryArchitecture : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryArchitecture, BuildsFinalizedAndRoundTripsThroughJson) {
  const Graph g = build_architecture(GetParam(), small(GetParam()));
  ASSERT_TRUE(g.finalized());
  EXPECT_EQ(g.name, GetParam());
  EXPECT_EQ(parse_meta(g).at("zoo").at("architecture"), GetParam());

  const auto dir = std::filesystem::temp_directory_path() / ("lnv_zoo_" + GetParam());
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "model.json").string();
  save_model(g, path);
  const Graph back = load_model(path);
  EXPECT_EQ(model_to_text(back, dir.string()), model_to_text(g, dir.string()));
  ASSERT_EQ(back.params.size(), g.params.size());
  for (size_t i = 0; i < g.params.size(); ++i) {
    EXPECT_EQ(back.params[i].name, g.params[i].name);
    EXPECT_EQ(back.params[i].values, g.params[i].values) << g.params[i].name;
  }
  EXPECT_EQ(back.node_shapes, g.node_shapes);
  std::filesystem::remove_all(dir);
}

TEST_P(EveryArchitecture, ParamsAreInitDrawnWithTheRequestedStd) {
  ArchOptions o = small(GetParam());
  o.init_std = 0.5;
  o.seed = 7;
  const Graph g = build_architecture(GetParam(), o);
  EXPECT_EQ(g.seed, 7u);
  for (const Param& p : g.params) {
    if (p.source != ParamSource::init) continue;
    EXPECT_EQ(p.init.std, 0.5) << p.name;
    EXPECT_EQ(p.values, init_values(p.init, numel(p.shape), 7, p.name)) << p.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Zoo, EveryArchitecture,
                         ::testing::Values("gpt2", "bert", "opt", "phi", "vit", "swin",
                                           "convnext", "rnnlm"));

TEST(Zoo, ListsEveryArchitecture) {
  std::vector<std::string> names;
  for (const auto& a : zoo::architectures()) names.push_back(a.name);
  EXPECT_EQ(names, (std::vector<std::string>{"gpt2", "bert", "opt", "phi", "vit", "swin",
                                              "convnext", "rnnlm"}));
}

TEST(Zoo, RejectsUnknownNamesAndSizesThatDoNotFit) {
  EXPECT_THROW(build_architecture("gpt5", {}), ModelError);
  ArchOptions o = text_small();
  o.heads = 3;  // does not divide 16
  EXPECT_THROW(build_architecture("gpt2", o), ModelError);
  o = text_small();
  o.image = 32;  // a text model has no image
  EXPECT_THROW(build_architecture("bert", o), ModelError);
  o = vit_small();
  o.patch = 5;  // does not divide 16
  EXPECT_THROW(build_architecture("vit", o), ModelError);
  o = staged_small("swin");
  o.window = 3;  // does not tile the 8x8 grid
  EXPECT_THROW(build_architecture("swin", o), ModelError);
  o = text_small();
  o.dropout = 1.0;
  EXPECT_THROW(build_architecture("gpt2", o), ModelError);
  o = text_small();
  o.layers = 0;
  try {
    build_architecture("gpt2", o);
    FAIL() << "layers = 0 accepted";
  } catch (const ModelError& e) {
    EXPECT_EQ(e.where(), "zoo/--layers");
  }
}

TEST(Zoo, DropoutZeroLeavesNoDropoutNodes) {
  ArchOptions o = text_small();
  o.dropout = 0.0;
  const Graph g = build_architecture("gpt2", o);
  for (const Node& n : g.nodes) EXPECT_NE(n.op, Op::dropout) << n.name;
  const Graph with = build_architecture("gpt2", text_small());
  int count = 0;
  for (const Node& n : with.nodes) count += n.op == Op::dropout;
  EXPECT_EQ(count, 1 + 2 * 2);  // embedding + two per block
}

// The real models' parameter counts (GPT-2 small 124,439,808; BERT base with its MLM head
// 109,514,298; ViT-B/16 86,567,656; ConvNeXt-T 28,589,128) come out of the defaults.
TEST(Zoo, DefaultsHaveTheRealParameterCounts) {
  const std::map<std::string, int64_t> expected = {
      {"gpt2", 124439808}, {"bert", 109514298}, {"vit", 86567656}, {"convnext", 28589128}};
  for (const auto& [arch, count] : expected) {
    const Graph g = build_architecture(arch, {});
    int64_t n = 0;
    for (const Param& p : g.params) n += numel(p.shape);
    EXPECT_EQ(n, count) << arch;
  }
}

// --- limits (architectures.h) ---------------------------------------------------------

// The sizes the README promises stay within the limits: every default (Phi-1.5 holds 1.42e9
// param values), GPT-2 XL (1.56e9), BERT large, ViT-L/16, and the deepest model allowed.
TEST(ZooLimits, AllowTheRealSizes) {
  for (const auto& a : zoo::architectures()) EXPECT_NO_THROW(zoo::check_architecture(a.name, {}));
  ArchOptions xl;
  xl.layers = 48, xl.hidden = 1600, xl.heads = 25;
  EXPECT_NO_THROW(zoo::check_architecture("gpt2", xl));
  ArchOptions large;
  large.layers = 24, large.hidden = 1024, large.heads = 16;
  EXPECT_NO_THROW(zoo::check_architecture("bert", large));
  EXPECT_NO_THROW(zoo::check_architecture("vit", large));
  ArchOptions deep = text_small();
  deep.layers = zoo::kMaxBlocks;
  EXPECT_NO_THROW(zoo::check_architecture("gpt2", deep));
}

// The ModelError's `where` for these options, or "" when they pass.
std::string refused_at(const std::string& arch, const ArchOptions& o) {
  try {
    zoo::check_architecture(arch, o);
  } catch (const ModelError& e) {
    return e.where();
  }
  return "";
}

// Each limit refuses a size just past it, naming the options that were set, before any
// weight is drawn (check_architecture draws none, so these cost nothing).
TEST(ZooLimits, RefuseSizesPastThem) {
  ArchOptions o;
  o.batch = 3000000;  // an input [3e6, 1024]
  EXPECT_EQ(refused_at("gpt2", o), "zoo/--batch 3000000");
  o = {};
  o.hidden = 1000000, o.heads = 1;  // the token table [50257, 1e6]
  EXPECT_EQ(refused_at("gpt2", o), "zoo/--hidden 1000000 --heads 1");
  o = {};
  o.layers = 400;  // 7.1e6 values per block: 2.8e9 in all
  EXPECT_EQ(refused_at("gpt2", o), "zoo/--layers 400");
  o = {};
  o.layers = 1, o.hidden = 2, o.heads = 1, o.seq = 4096, o.vocab = 1 << 20;  // logits [1, 4096, 2^20]
  EXPECT_EQ(refused_at("gpt2", o), "zoo/--layers 1 --hidden 2 --heads 1 --seq 4096 --vocab 1048576");
  o = {};
  o.layers = 1, o.hidden = 2, o.heads = 2, o.seq = 1 << 16, o.vocab = 4;  // probabilities [1, 2, 2^16, 2^16]
  EXPECT_EQ(refused_at("gpt2", o), "zoo/--layers 1 --hidden 2 --heads 2 --seq 65536 --vocab 4");
  o = {};
  o.seq = (int64_t{1} << 31) + 1;  // past the limit on its own
  EXPECT_EQ(refused_at("gpt2", o), "zoo/--seq");
  o = text_small();
  o.layers = zoo::kMaxBlocks + 1;
  EXPECT_EQ(refused_at("gpt2", o), "zoo/--layers");
  o = staged_small("convnext");
  o.depths.assign(2, zoo::kMaxBlocks / 2 + 1);  // each within the limit, not their sum
  EXPECT_EQ(refused_at("convnext", o), "zoo/--depths");
  o = staged_small("swin");
  o.depths.assign(65, 1);  // 64 halvings: once a shift by 64 (undefined)
  EXPECT_EQ(refused_at("swin", o), "zoo/--depths");
}

TEST(ZooLimits, RefuseNonFiniteFloatingOptions) {
  const double inf = std::numeric_limits<double>::infinity();
  for (double std : {inf, -inf, std::nan(""), -1.0}) {
    ArchOptions o = text_small();
    o.init_std = std;
    EXPECT_EQ(refused_at("gpt2", o), "zoo/--init-std") << std;
  }
  for (double p : {inf, -inf, std::nan("")}) {
    ArchOptions o = text_small();
    o.dropout = p;
    EXPECT_EQ(refused_at("gpt2", o), "zoo/--dropout") << p;
  }
  // A finite std whose draws overflow is found where they are drawn.
  ArchOptions o = text_small();
  o.init_std = 1e308;
  try {
    build_architecture("gpt2", o);
    FAIL() << "std 1e308 accepted";
  } catch (const ModelError& e) {
    EXPECT_EQ(e.where(), "zoo/--init-std");
  }
}

// --- verdicts, derived from docs/spec/semantics.md ---------------------------------------------------

// GPT-2 (pre-norm): every LN's input mean is a sum of centerable terms — the token
// embedding (rows centered; the tied LM head keeps a raw copy), the positional param, the
// attention output projections and the MLP c_proj linears — and their deviations are
// constant over the features and travel the residual stream only into LNs (which absorb
// them) up to ln_f. So all 2L+1 fold in inference. In training the dropout after the
// embedding sum ('drop') makes the stream's first term opaque, and every LN sees it.
TEST(ZooVerdicts, Gpt2AllInInferenceNoneInTraining) {
  const Names lns = {"h.0.ln_1", "h.0.ln_2", "h.1.ln_1", "h.1.ln_2", "ln_f"};
  expect_verdicts(build_architecture("gpt2", text_small()), {lns, lns, {}});
  const FoldPlan plan = detect_foldable(build_architecture("gpt2", text_small()),
                                        Mode::training);
  EXPECT_NE(verdict(plan, "h.0.ln_1").reason[int(Mode::training)].find("drop"),
            std::string::npos);
}

// Without dropout, training is a reparameterization of the same terms: all fold.
TEST(ZooVerdicts, Gpt2WithoutDropoutFoldsEverythingInTraining) {
  ArchOptions o = text_small();
  o.dropout = 0.0;
  const Names lns = {"h.0.ln_1", "h.0.ln_2", "h.1.ln_1", "h.1.ln_2", "ln_f"};
  expect_verdicts(build_architecture("gpt2", o), {lns, lns, lns});
}

// OPT is GPT-2 with ReLU MLPs: the same answer.
TEST(ZooVerdicts, OptAllInInferenceNoneInTraining) {
  const Names lns = {"layers.0.self_attn_layer_norm", "layers.0.final_layer_norm",
                     "layers.1.self_attn_layer_norm", "layers.1.final_layer_norm",
                     "final_layer_norm"};
  expect_verdicts(build_architecture("opt", text_small()), {lns, lns, {}});
}

// BERT (post-norm): only the embedding LN sees centerable terms alone (word and token-type
// embeddings, positional param; the tied decoder keeps raw rows). Every block LN's input
// holds the previous LN's output, which has a weight (opaque), and the MLM head's LN sees
// a GELU. No dropout precedes the embedding LN, so training agrees.
TEST(ZooVerdicts, BertOnlyTheEmbeddingLn) {
  const Names lns = {"embeddings.LayerNorm",        "encoder.0.attention.LayerNorm",
                     "encoder.0.output.LayerNorm",  "encoder.1.attention.LayerNorm",
                     "encoder.1.output.LayerNorm",  "cls.transform.LayerNorm"};
  const Names emb = {"embeddings.LayerNorm"};
  expect_verdicts(build_architecture("bert", text_small()), {lns, emb, emb});
}

// Phi (parallel block): inference as GPT-2 (all L+1). Training: Phi has no embedding
// dropout, so the first LN's only term is the token embedding, whose deviation runs down
// the residual (never through a dropout) into LNs; later LNs see the branches' dropouts.
TEST(ZooVerdicts, PhiAllInInferenceFirstInTraining) {
  const Names lns = {"layers.0.input_layernorm", "layers.1.input_layernorm",
                     "final_layernorm"};
  expect_verdicts(build_architecture("phi", text_small()),
                  {lns, lns, {"layers.0.input_layernorm"}});
}

// ViT: the first LN sees concat(CLS param, patch conv moved to channels-last) + positional
// param (+ a zero param broadcasting the CLS token over the batch): all centerable over
// the features, the concat is along tokens. Then as GPT-2: all fold in inference, none in
// training (pos_drop).
TEST(ZooVerdicts, VitAllInInferenceNoneInTraining) {
  const Names lns = {"blocks.0.norm1", "blocks.0.norm2", "blocks.1.norm1", "blocks.1.norm2",
                     "norm"};
  expect_verdicts(build_architecture("vit", vit_small()), {lns, lns, {}});
}

// Swin-like, four stages of one block:
//  - patch_embed.norm sees the patch conv alone: folds in both modes.
//  - stage 0 blocks and the first merge norm see patch_embed.norm's output (has a weight).
//  - stages 1 and 2: the terms are centerable, but the stream flows into the next patch
//    merge, whose reshape puts four tokens' features side by side: the deviations (one
//    constant per token) are not constant over the merged 4C features, so the merge LN
//    does not absorb them; the merge LNs themselves fail for the same reason.
//  - stage 3 (last, no merge after it) and the final norm fold in inference. In training
//    the first LN of stage 3 sees only the merge reduction (no dropout between), the rest
//    see the dropouts after attention and MLP.
TEST(ZooVerdicts, SwinPatchNormAndLastStage) {
  Names lns = {"patch_embed.norm", "norm"};
  for (int s = 0; s < 4; ++s) {
    const std::string st = "layers." + std::to_string(s) + ".";
    lns.insert(st + "blocks.0.norm1");
    lns.insert(st + "blocks.0.norm2");
    if (s < 3) lns.insert(st + "downsample.norm");
  }
  const Graph g = build_architecture("swin", staged_small("swin"));
  expect_verdicts(g, {lns,
                      {"patch_embed.norm", "layers.3.blocks.0.norm1", "layers.3.blocks.0.norm2",
                       "norm"},
                      {"patch_embed.norm", "layers.3.blocks.0.norm1"}});
  const FoldPlan plan = detect_foldable(g, Mode::inference);
  EXPECT_FALSE(verdict(plan, "layers.1.downsample.norm").reason[0].empty());
}

// ConvNeXt-like: only the stem LN (after a dense patchify conv) folds. Block LNs see a
// depthwise conv (grouped: not a CBWC producer); the downsample LNs and the head LN see
// the stem LN's output (weight) or the layer-scaled branches, and every stream term's
// deviation enters the next depthwise conv, whose per-channel kernels make it vary over
// the channels. No dropout anywhere: training agrees.
TEST(ZooVerdicts, ConvNextOnlyTheStemLn) {
  Names lns = {"downsample_layers.0.norm", "norm"};
  for (int s = 0; s < 4; ++s) {
    lns.insert("stages." + std::to_string(s) + ".0.norm");
    if (s > 0) lns.insert("downsample_layers." + std::to_string(s) + ".norm");
  }
  const Names stem = {"downsample_layers.0.norm"};
  expect_verdicts(build_architecture("convnext", staged_small("convnext")), {lns, stem, stem});
}

// RNN LM: each rnn's norm sees its own pre-activation (W_ih x + W_hh h + b, a producer
// whatever x is), centered by CBWC and absorbed inside the same step: all fold, in both
// modes (the dropouts sit on the rnn inputs, outside the centered term).
TEST(ZooVerdicts, RnnLmEveryNorm) {
  const Names lns = {"rnn.0.norm", "rnn.1.norm"};
  expect_verdicts(build_architecture("rnnlm", text_small()), {lns, lns, lns});
}

// The README table (from `lnverify audit` on the default sizes): the counts depend only on
// the depth, so the default depths at a small width must give the same numbers.
TEST(ZooVerdicts, DefaultDepthsGiveTheReadmeTable) {
  struct Row {
    std::string arch;
    size_t lns, inference, training;
  };
  const std::vector<Row> table = {{"gpt2", 25, 25, 0}, {"bert", 26, 1, 1},  {"opt", 25, 25, 0},
                                  {"phi", 25, 25, 1},  {"vit", 25, 25, 0},  {"swin", 29, 6, 2},
                                  {"convnext", 23, 1, 1}, {"rnnlm", 2, 2, 2}};
  for (const Row& row : table) {
    ArchOptions o;
    o.hidden = 8, o.heads = 2;
    if (row.arch == "vit") o.image = 8, o.patch = 4, o.classes = 3;
    else if (row.arch == "swin") o.image = 64, o.patch = 4, o.window = 2, o.classes = 3, o.heads = 1;
    else if (row.arch == "convnext") o.image = 32, o.classes = 3, o.heads.reset();
    else o.seq = 4, o.vocab = 10;
    const FoldPlan plan = detect_foldable(build_architecture(row.arch, o), Mode::inference);
    EXPECT_EQ(plan.layer_norms.size(), row.lns) << row.arch;
    EXPECT_EQ(foldable(plan, Mode::inference).size(), row.inference) << row.arch;
    EXPECT_EQ(foldable(plan, Mode::training).size(), row.training) << row.arch;
  }
}

}  // namespace
}  // namespace lnv
