// The foldability analysis and the rewrite: two narrow entry points.
//
//   FoldPlan detect_foldable(const Graph& g, Mode mode);
//   Graph    apply_fold(const Graph& g, const FoldPlan& plan);
//
// detect_foldable decides, for every LayerNorm of g (every `layer_norm` node and the norm
// inside every `rnn` that has one, named "<rnn>.norm"), whether it is foldable in each
// mode (docs/spec/semantics.md, "Foldability"), and for `mode` which
// terms to center so that every LN foldable in `mode` becomes an RMSNorm exactly.
// apply_fold applies exactly what a plan says (docs/spec/semantics.md, "The rewrite") — no
// re-verification — so checkers can also apply deliberately forced plans (tightness
// checks) and see them fail.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "core/graph.h"
#include "core/mode.h"

namespace lnv {

// One term to center. A producer is centered along its output feature axis by CBWC
// (inference: its weights/bias centered in place via Param::center_axes, or a centered
// untied copy when the weight is also used raw; training: `cbwc: true`). A producer term
// naming a LayerScale `mul` (core/analysis/producers.h) moves γ into its producer first
// (inference: Param::scale, the mul a `scale` by 1; training: a `center` after the mul). A param term is
// centered over `axes` of its own shape (inference: in place or an untied copy; training:
// the use reads it through a `center` node; a norm's bias moves out into add(center(b))).
struct CenterTerm {
  enum class Kind { producer, param } kind = Kind::producer;
  std::string node;   // producer: the producer node; param: the node that reads the param
  std::string param;  // param term: the param's name; producer: empty
  // param term: which use of the param in `node` ("inputs/1", "bias", "norm/bias")
  std::string slot;
  Axes axes;          // param term: axes of the param's shape to center over
  bool remove = false;  // param term broadcast along the LN's axes: centering zeroes it
  bool operator==(const CenterTerm&) const = default;
};

// Where a folded norm's bias goes (docs/spec/semantics.md, "Moving the bias"). A norm whose
// output every reader multiplies by a weight (a linear, a matmul with a 2-D param weight;
// through reshapes and transposes that keep the feature axis last) or adds to the output
// of a producer that adds a bias anyway (a residual add; the producer reached through
// reshapes and transposes nothing else reads) loses its bias: each reader R adds W·β, each
// such producer β itself, so the RMSNorm writes no bias pass and every value downstream of
// the residual add is unchanged.
struct BiasMove {
  bool moves = false;
  std::vector<std::string> readers;  // moves: the producers that take W·β
  std::vector<std::string> residual;  // moves: the producers summed with the norm that take β
  std::string kept;  // a folded norm with a bias that keeps it: why ("" otherwise)
  bool operator==(const BiasMove&) const = default;
};

struct LnVerdict {
  std::string name;       // the layer_norm node, or "<rnn>.norm"
  std::string node;       // the node holding it (the layer_norm, or the rnn)
  std::array<bool, 2> foldable{false, false};      // indexed by Mode
  std::array<std::string, 2> reason;               // why not, per mode ("" when foldable)
  std::array<std::vector<std::string>, 2> path;    // breaking node ... this LN, per mode
  // A "no" that holds only relative to the plan, per mode: swapped alone this LN changes no
  // output, but not together with the folds of these LNs (docs/spec/decisions.md). Empty else.
  std::array<std::vector<std::string>, 2> conflicts;
  // The centerable terms surviving in the mean of the LN's input (producers and params).
  // When foldable these are exactly what gets centered for this LN; when not, these are
  // the candidates a forced fold may center.
  std::vector<CenterTerm> terms;
  bool opaque = false;  // an opaque atom survives in the mean (no centering can help)
  // How many terms survive in the mean (also when `terms` is not listed, see DetectOptions).
  size_t term_count = 0;
  BiasMove bias;  // for the plan's mode, when this LN is folded
};

struct FoldPlan {
  Mode mode = Mode::inference;           // the rewrite this plan is for
  std::vector<LnVerdict> layer_norms;    // every LN of the model, in topological order
  std::vector<std::string> fold;         // LN names to swap for rms_norm
  std::vector<CenterTerm> center;        // terms to center (deduplicated)
  size_t foldable_count(Mode m) const;
};

// Precondition: g is finalized. Never throws for a valid graph. Fills every LnVerdict::bias
// (plan_bias_moves).
FoldPlan detect_foldable(const Graph& g, Mode mode);

// Decides LnVerdict::bias for every LN of plan.fold (a bias-free RMSNorm where the readers
// can take the bias); leaves the other verdicts' `bias` empty. Precondition: plan is
// detect_foldable's, and ln_nodes[i] is the node of plan.layer_norms[i] (-1: the norm
// inside an rnn).
void plan_bias_moves(const Graph& g, FoldPlan& plan, const std::vector<int32_t>& ln_nodes);

// The rewrite's spelling of a moved bias: reader R becomes "<R>.own", and an add named R
// sums it with "<R>.moved_bias", W·β computed from the reader's weight and the norm's bias
// (a matmul reads β through "<R>.moved_bias.row", β reshaped to [1, C]); for a residual
// producer "<R>.moved_bias" is β itself, a reshape of it to [C].
std::string moved_bias_own(const std::string& reader);
std::string moved_bias_image(const std::string& reader);
// The readers R of a folded graph that took a moved bias (the adds spelled as above).
std::vector<std::string> moved_bias_readers(const Graph& folded);

struct DetectOptions {
  // List every LN's surviving terms in LnVerdict::terms. On a deep pre-norm residual
  // stream LN k has k terms, so the lists alone are quadratic in depth; the analysis
  // itself (verdicts, reasons, the plan's union `center`) stays near linear without them.
  bool list_terms = true;
};
FoldPlan detect_foldable(const Graph& g, Mode mode, const DetectOptions& options);

// Precondition: g is finalized and plan refers to its nodes. Returns a finalized Graph:
// inference — centered weights (Param::center_axes / zeroed params, untied copies named
// "<param>.centered" where a raw use remains), each folded LN swapped for rms_norm with
// the same eps/weight/bias; training — every stored param kept, producers marked cbwc,
// param terms read through `center` nodes, LNs swapped. Both: each moving bias
// (LnVerdict::bias) leaves its norm for the readers, computed in the graph from the
// original params (moved_bias_own). Node names of the original are
// kept (so dropout masks and outputs line up).
Graph apply_fold(const Graph& g, const FoldPlan& plan);
// The same result, rewriting `g` in place of a copy (no copy of the param values).
Graph apply_fold(Graph&& g, const FoldPlan& plan);

}  // namespace lnv
