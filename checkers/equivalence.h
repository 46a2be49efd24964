// The verdict-vs-truth oracle: the analysis' verdicts held to exact evaluation, in both
// directions (docs/spec/semantics.md, "Verification").
//
//   report::CheckReport check_model(const Graph& g, const CheckOptions& opt);
//
// runs, in the order they are listed:
//   (a) ln_exact   — each LN judged foldable in opt.mode, folded alone with its terms
//                    centered: the outputs equal the original's on opt.trials random
//                    inputs and dropout masks (trial k uses run seed opt.seed + k);
//   (b)            — in training mode (a) and (d) also compare the gradients of the loss
//                    of docs/spec/format.md with respect to every original param and input;
//   (c) ln_tight   — each LN judged not foldable is force-folded every way the design
//                    allows: each subset of its candidate terms — the analysis' candidates
//                    (LnVerdict::terms) and, so that a term the analysis overlooked is
//                    tried too, every producer upstream of the LN that the analysis'
//                    producer rule accepts (analysis::is_centerable_producer: linear,
//                    matmul with one param operand, embedding, groups = 1 conv, rnn,
//                    attention, a LayerScale mul with γ moved into its producer) —
//                    centered
//                    (all 2^n subsets
//                    when n <= 6; otherwise the empty and full sets, every singleton and
//                    every complement of one, then random subsets, up to
//                    opt.max_forced_folds), then swapped for RMSNorm; every attempt must
//                    change the outputs by far more than the rounding bound (an attempt
//                    that does not on the opt.trials trials gets 16 more before it
//                    counts: a dropout mask keeping whole rows, or equal ids, can make a
//                    fold exact on one draw by coincidence);
//   (d) plan_exact — the plan applied as a whole is exact, as in (a);
// and, in training mode, measures how far the training-mode outputs of the *inference*
// rewrite of each LN foldable in inference only drift (CheckReport::drift).
//
// A forced fold of (c) is first evaluated in double with a rigorous error bound per value
// (core/eval/bounded.h): when the exact outputs are thereby proved to differ by far more
// than the rounding bound, the fold is settled without MPFR; otherwise (and for every
// "equal") it is measured in MPFR as described next. Of the forced folds settled in double
// the weakest is measured in MPFR for the report's figures.
//
// Equality is judged against rounding_bound(), never a hand-picked tolerance. A difference
// above the bound is re-measured at twice the precision: rounding error shrinks by about
// 2^-bits there, a genuine difference does not. So a check fails only on a difference that
// is stable under more precision, and is inconclusive when neither explanation fits.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/analysis/fold_plan.h"
#include "core/graph.h"
#include "core/mode.h"
#include "reports/check_report.h"

namespace lnv::check {

using report::Outcome;

// How the forced folds of (c) were decided: settled by the double pre-pass, or measured in
// MPFR (docs/verification.md, "Settling a difference in double").
struct CheckCounters {
  int64_t settled_in_double = 0;
  int64_t measured_exactly = 0;
};

struct CheckOptions {
  Mode mode = Mode::inference;
  unsigned bits = 256;   // MPFR precision of the evaluations
  int trials = 3;        // random inputs / dropout masks per comparison
  uint64_t seed = 0;     // run seed of trial 0
  int max_forced_folds = 64;  // (c): forced folds tried per LN
  bool drift = true;     // training mode: measure the inference rewrite's drift
  std::string model_name;  // for the report
  // (c): a forced fold whose difference the double pre-pass proves far above the bound is
  // settled without MPFR; off, every forced fold is measured in MPFR (the reference the
  // tests hold the pre-pass to). Either way the outcomes and the reported fold are the same.
  bool double_prepass = true;
  CheckCounters* counters = nullptr;  // if set, incremented per forced fold
  // Threads that run the checks (one per LN, and the plan's) side by side; the report is
  // the same for every count.
  int jobs = 1;
  // Called after each check with (checks done, checks in all); a progress bar (cli/terminal.h).
  std::function<void(int64_t done, int64_t total)> progress;
};

// The analysis under test: detect_foldable, or a deliberately wrong variant (tests).
using Detector = std::function<FoldPlan(const Graph&, Mode)>;
Detector real_detector();
// detect_foldable for the graph `plan` was detected on, which is not detected again: the
// plan itself in its mode, detect_foldable in the other. `plan` must outlive the detector.
Detector detected(const FoldPlan& plan);

report::CheckReport check_model(const Graph& g, const CheckOptions& opt,
                                const Detector& detect = real_detector());

// The rounding-error bound for comparing an evaluation of g with one of its rewrite at
// `bits` bits of precision, where `scale` >= 1 is the largest magnitude either evaluation
// produced (forward values, and gradients when they are compared).
//
//   bound = 2^-(bits - 20) * scale * ops * min(gain^norms, 2^(bits/4))
//
// Each elementary MPFR operation is correctly rounded (error <= 2^-bits relative). A node
// performs a bounded number of operations per element on values <= scale, and the
// generated and user graphs have reductions over at most ~2^10 elements, so one node adds
// an absolute error of at most ~2^10 * 2^-bits * scale; `ops` counts nodes (an rnn counts
// once per time step, an attention four times), and the other 2^10 covers the growth of an
// error through the linear ops and smooth nonlinearities after it. Normalizations divide by
// sqrt(var + eps) and can amplify an incoming error by up to gain = 1/sqrt(max(eps, 2^-20))
// each; `norms` counts them (an rnn's norm once per step). The cap keeps the bound at or
// below 2^-(3 bits/4 - 20) * scale * ops, far below any genuine difference; a graph whose
// conditioning exceeds the model shows up as a difference that vanishes at twice the
// precision, which the checks report as holding (at the higher precision), not failing.
double rounding_bound(const Graph& g, unsigned bits, double scale);

// The candidate terms of an LN judged not foldable: v.terms, then the producers upstream
// of it that v.terms does not name (see (c) above).
std::vector<CenterTerm> forced_candidates(const Graph& g, const LnVerdict& v);

// The forced folds tried for an LN judged not foldable: subsets of `candidates` (see (c)
// above), deterministic in `seed` and the LN's name.
std::vector<std::vector<CenterTerm>> forced_folds(const LnVerdict& v,
                                                  const std::vector<CenterTerm>& candidates,
                                                  int cap, uint64_t seed);

}  // namespace lnv::check
