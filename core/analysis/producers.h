// Producers (docs/spec/semantics.md, "Op rules", "Producers"): the nodes whose output CBWC
// can center, and the axis of their output that holds the features it centers over. The
// analysis builds its producer terms from these (mean_rules.cpp), and the check's forced
// folds (checkers/equivalence.cpp) try the same producers, so the two cannot drift.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/graph.h"

namespace lnv::analysis {

// A LayerScale (docs/spec/semantics.md, "LayerScale"): `mul(y, γ)` or `mul(γ, y)` whose
// factor γ is a param that, broadcast to the output (of y's shape), varies along exactly
// one axis `feature` (of size > 1), and whose y is a chain from a centerable producer
// (not an rnn, not already `cbwc`) whose features land on that axis: each step a transpose
// or a reshape that keeps the feature axis whole, or an `add` of a bias param laid out
// along it (full size there). Every value of the chain before the mul is read only by the
// next step and is no graph output, so moving γ into the producer's weight and the biases
// (W ← diag(γ)·W, b ← γ ⊙ b) changes nothing but the mul's output, which then equals y.
struct LayerScale {
  int32_t mul = -1;
  int32_t producer = -1;
  int gamma = -1;        // γ's operand index in the mul
  int64_t feature = -1;  // the mul's output axis γ varies along
  // The chain's bias adds: (add node, operand index of the bias param, the bias' own axis
  // holding the features).
  struct Bias {
    int32_t node = -1;
    int operand = -1;
    int64_t axis = -1;
  };
  std::vector<Bias> biases;
};
std::optional<LayerScale> layer_scale_of(const Graph& g, int32_t n);

// The output axis holding node n's features when n is a producer, -1 when it is not: the
// last axis of a linear, an embedding and an attention (its output projection), the
// channel axis (1) of a conv1d / conv2d, for a matmul with a param operand the last axis
// when its right operand is a param (the columns), else the one before (the rows), and for
// a LayerScale mul the axis its factor varies along. An rnn is not one: its output passes
// a nonlinearity (the pre-activation its own norm reads is a producer inside it).
int64_t producer_feature_axis(const Graph& g, int32_t n);

// Whether CBWC on producer n makes its output zero-mean over its features whatever its
// input: every producer but a grouped conv, whose groups read different input channels
// (centered over all its output channels it is still not zero-mean over them).
bool centering_zeroes_features(const Graph& g, int32_t n);

// Whether a fold may center node n as a producer on its own: a producer whose centering
// zeroes its features that is not a matmul of two params (a constant, centered as a param
// term), an rnn (for the norm inside it), or a LayerScale mul (centered by moving γ into
// its producer and centering that).
bool is_centerable_producer(const Graph& g, int32_t n);

}  // namespace lnv::analysis
