// Producers (docs/spec/semantics.md, "Op rules", "Producers"): the nodes whose output CBWC
// can center, and the axis of their output that holds the features it centers over. The
// analysis builds its producer terms from these (mean_rules.cpp), and the check's forced
// folds (checkers/equivalence.cpp) try the same producers, so the two cannot drift.
#pragma once

#include <cstdint>

#include "core/graph.h"

namespace lnv::analysis {

// The output axis holding node n's features when n is a producer, -1 when it is not: the
// last axis of a linear, an embedding and an attention (its output projection), the
// channel axis (1) of a conv1d / conv2d, and for a matmul with a param operand the last
// axis when its right operand is a param (the columns), else the one before (the rows).
// An rnn is not one: its output passes a nonlinearity (the pre-activation its own norm
// reads is a producer inside it).
int64_t producer_feature_axis(const Graph& g, int32_t n);

// Whether CBWC on producer n makes its output zero-mean over its features whatever its
// input: every producer but a grouped conv, whose groups read different input channels
// (centered over all its output channels it is still not zero-mean over them).
bool centering_zeroes_features(const Graph& g, int32_t n);

// Whether a fold may center node n as a producer on its own: a producer whose centering
// zeroes its features that is not a matmul of two params (a constant, centered as a param
// term), or an rnn (for the norm inside it).
bool is_centerable_producer(const Graph& g, int32_t n);

}  // namespace lnv::analysis
