// RapidCheck generators of random model graphs (docs/spec/semantics.md, "Verification").
//
// A graph is built from a *recipe*: a few dimensions and a list of steps, each a kind and
// eight small choices. The builder interprets the steps as a random walk over a pool of
// values with tracked shapes, appending ops of every kind of docs/spec/format.md v1. RapidCheck
// generates and shrinks the recipe (dropping steps, moving choices toward 0, i.e. toward
// "the most recent value, the first variant"), so failing graphs shrink to small ones.
//
// Every recipe builds a finalized, shape-correct, acyclic Graph; params are `init`
// (normal, std GenConfig::param_std), so a graph is reproduced exactly from its JSON.
// `fold_block` steps (a producer, a few transport ops, a LayerNorm over the producer's
// feature axes) bias the distribution toward LNs near the foldable/non-foldable boundary
// of every rule: dropout, per-token vs per-feature scaling, concat and reshape across the
// feature axis, grouped convs, params and residuals entering the sum.
#pragma once

#include <array>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <rapidcheck.h>

#include "core/graph.h"

namespace lnv::gen {

struct GenConfig {
  int max_steps = 10;    // steps per recipe at RapidCheck size 100 (scaled down below)
  int max_nodes = 40;    // the builder stops adding steps once this many nodes exist
  int min_dim = 2, max_dim = 4;  // batch (<= 2) and tokens
  // Feature sizes. At least 3: a norm over 2 features outputs (s, -s), which every odd
  // function keeps zero-mean — a dimension-specific identity outside the analysis'
  // vocabulary (tests/regressions/rnn_norm_two_features.model.json).
  int min_features = 3, max_features = 5;
  double param_std = 0.5;
};

enum class StepKind : uint8_t {
  produce,     // linear (maybe tied), matmul (param a/b, transpose_b, activations),
               // embedding, conv1d/conv2d (groups 1, grouped, depthwise), rnn, attention
  transport,   // dropout, scale, mul/div (scalar, per-token, per-feature), nonlinearities,
               // softmax, center, sub-mean, pooling, transpose, reshape
  combine,     // residual add/sub, params added (bias, scalar, positional, matmul of
               // params), concat on either axis, elementwise gate
  norm,        // layer_norm / rms_norm over various axes, with and without affine
  fold_block,  // producer -> 0..2 transports/combines -> layer_norm over its features
  kCount
};

struct Step {
  StepKind kind = StepKind::produce;
  std::array<uint8_t, 8> c{};  // choices; 0 is the simplest (most recent operand, ...)
};

struct Recipe {
  uint8_t batch = 0, tokens = 0, features = 0;  // offsets from min_dim
  std::vector<Step> steps;
  std::vector<uint8_t> extra_outputs;  // more graph outputs besides the last value
  uint8_t dead_sinks = 0;  // bit k set: the k-th unread node (from the end) stays a dead
                           // branch instead of becoming a graph output
};

// Builds the graph a recipe describes. Throws InternalError if the builder produced an
// invalid graph (a bug in the generator).
Graph build_graph(const Recipe& recipe, const GenConfig& cfg);

rc::Gen<Recipe> gen_recipe(const GenConfig& cfg);
rc::Gen<Graph> gen_graph(const GenConfig& cfg);

// One case of a campaign outside RapidCheck's runner (lnverify fuzz, the teeth test):
// the graph generated from `seed` at full size, with its shrinks.
rc::Shrinkable<Graph> generate_case(const GenConfig& cfg, uint64_t seed);

// Labels for RC_TAG/RC_CLASSIFY: the op kinds a graph contains ("op:linear", ...) and
// structural features ("conv:grouped", "dropout", "tied", "outputs>1", ...).
std::vector<std::string> graph_tags(const Graph& g);

// A compact, readable listing (one line per node) for counterexamples.
std::string describe(const Graph& g);

}  // namespace lnv::gen

namespace lnv {
// RapidCheck prints counterexamples through ADL showValue.
void showValue(const Graph& g, std::ostream& os);
}  // namespace lnv
