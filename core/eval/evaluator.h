// The reference evaluators: forward values and reverse-mode gradients of every op of
// docs/spec/format.md v1, templated on the scalar type and instantiated for `double` and
// `Mpfr` (Boost.Multiprecision, MPFR backend, precision chosen at run time).
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include <boost/multiprecision/mpfr.hpp>

#include "core/graph.h"
#include "core/mode.h"
#include "core/tensor.h"

namespace lnv::eval {

using Mpfr = boost::multiprecision::mpfr_float;  // variable precision

// Sets the precision (bits) of Mpfr values created afterwards on this thread.
void set_mpfr_bits(unsigned bits);
unsigned mpfr_bits();
// (Boost 1.74 keeps one process-wide default precision, counted in decimal digits, so the
// precision is rounded up to the next whole digit: set_mpfr_bits(256) gives 257 bits, and
// mpfr_bits() says so. Until set_mpfr_bits is called, the evaluators' entry points set
// 256.)

struct RunOptions {
  Mode mode = Mode::inference;
  uint64_t seed = 0;  // dropout masks, random inputs and loss cotangents
};

template <class T>
struct Evaluation {
  std::vector<Tensor<T>> inputs;   // per graph input (index ids stored as T)
  std::vector<Tensor<T>> params;   // effective param values (center_axes applied)
  std::vector<Tensor<T>> nodes;    // per node, indexed like Graph::nodes
  std::vector<Tensor<T>> outputs;  // per graph output
};

template <class T>
struct Gradients {
  T loss;
  std::vector<Tensor<T>> inputs;  // dL/d(input); index inputs get an empty tensor
  std::vector<Tensor<T>> params;  // dL/d(stored param) (through cbwc / center_axes)
};

// Random inputs of a check (docs/spec/format.md, "Random numbers").
template <class T>
std::vector<Tensor<T>> random_inputs(const Graph& g, uint64_t seed);

// Forward evaluation. Throws ModelError for inputs of the wrong shape or ids out of range.
template <class T>
Evaluation<T> evaluate(const Graph& g, std::vector<Tensor<T>> inputs, const RunOptions& opt);

// The same, taking node i's value from known[i] (one entry per node, like Graph::nodes)
// where that is not null instead of computing it: e.g. the node's value in an evaluation
// of another graph, on the same inputs and options, where the node and everything it
// reads are the same. The caller vouches for that.
template <class T>
Evaluation<T> evaluate(const Graph& g, std::vector<Tensor<T>> inputs, const RunOptions& opt,
                       const std::vector<const Tensor<T>*>& known);

// The cotangents r of L = sum_o sum_i o_i r_i, one per graph output.
template <class T>
std::vector<Tensor<T>> loss_cotangents(const Graph& g, uint64_t seed);

// Reverse mode of L with respect to every input and every param.
template <class T>
Gradients<T> gradients(const Graph& g, const Evaluation<T>& ev, const RunOptions& opt);

// The same for L = sum_o sum_i o_i r_i with the given cotangents r (one per graph output,
// of its shape), e.g. another graph's, paired by output.
template <class T>
Gradients<T> gradients(const Graph& g, const Evaluation<T>& ev, const RunOptions& opt,
                       const std::vector<Tensor<T>>& cotangents);

// The stored param values in T (before center_axes), per Graph::params.
template <class T>
std::vector<Tensor<T>> param_values(const Graph& g);

// Forward evaluation with the stored param values given in T instead of read from the
// graph's doubles (e.g. perturbed below double resolution for finite differences).
// `gradients` of the result are with respect to these values.
template <class T>
Evaluation<T> evaluate_with_params(const Graph& g, std::vector<Tensor<T>> inputs,
                                   const std::vector<Tensor<T>>& stored_params,
                                   const RunOptions& opt);

// The loss L = sum_o sum_i o_i r_i of an evaluation, r = loss_cotangents(g, seed).
template <class T>
T loss(const Graph& g, const Evaluation<T>& ev, uint64_t seed);

namespace detail {
// Sets 256 bits unless set_mpfr_bits was called (a no-op for double).
void ensure_mpfr_default_bits();
template <class T>
void ensure_default_precision() {
  if constexpr (std::is_same_v<T, Mpfr>) ensure_mpfr_default_bits();
}
}  // namespace detail

}  // namespace lnv::eval
