// The analyzer behind detect_foldable (detect.cpp): its bookkeeping types and the
// declaration of the Analyzer, which holds, per graph and mode, what the readings of the
// graph decide (docs/spec/semantics.md):
//
//   analyzer.cpp          the constructor: both readings of "zero", "uniform" and "live"
//   structural_zeros.cpp  values that are zero whatever the inputs
//   zero_means.cpp        values zero-mean by construction over some axes ("Terms")
//   sum_forms.cpp         sums as exact combinations of atoms
//   uniform_axes.cpp      the axes along which a value is the same everywhere ("Constant axes")
//   constant_means.cpp    outputs and means that do not depend on a node's input
//   liveness.cpp          which values a graph output depends on; the swap check of dead folds
//   terms.cpp             the producer and param terms a fold may center ("Terms")
//   mean_forms.cpp        mean forms, memoized per (value, axes) ("Means")
//   mean_rules.cpp        the per-op-family rules for means ("Op rules")
//   deviation_rules.cpp   the per-op-family rules for deviations: pass, absorb, break
//                         ("Op rules", "Absorption")
//   safety.cpp            whether a term's deviation dies before every output ("Safety")
//
// memo_walk.h holds the memoized walk of mean forms and safety; producers.h the producer
// rule the analysis and the check share ("Producers").
//
// Internal to core/analysis: only the files above and detect.cpp include it.
#pragma once

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/analysis/axes_mask.h"
#include "core/analysis/fold_plan.h"
#include "core/analysis/mean_form.h"
#include "core/error.h"

namespace lnv::analysis::detail {

struct KeyHash {
  size_t operator()(const std::pair<int32_t, Mask>& k) const {
    return std::hash<uint64_t>()(k.second * 0x9E3779B97F4A7C15ull ^ uint64_t(k.first));
  }
};
// A value and a set of its axes: the axes averaged (mean forms) or the axes a deviation is
// constant along (safety).
using Key = std::pair<int32_t, Mask>;

// The memo of mean forms or safeties, per Key. Nearly every value is asked about one axis
// set only: its first set lives in a flat table indexed by the value, the others in a hash
// map. Values are kept in a deque, so references to them stay valid while more are added.
template <class V>
class KeyMemo {
 public:
  explicit KeyMemo(size_t values) : first_(values) {}
  const V* find(const Key& k) const {
    const First& f = first_[size_t(k.first)];
    if (f.index < 0) return nullptr;
    if (f.mask == k.second) return &stored_[size_t(f.index)];
    auto it = more_.find(k);
    return it == more_.end() ? nullptr : &stored_[size_t(it->second)];
  }
  size_t count(const Key& k) const { return find(k) != nullptr ? 1 : 0; }
  const V& at(const Key& k) const {
    const V* v = find(k);
    LNV_INTERNAL_ASSERT(v != nullptr, "a memoized key is missing");
    return *v;
  }
  // Stores v for k unless k has a value already.
  void emplace(const Key& k, V v) {
    if (find(k) != nullptr) return;
    First& f = first_[size_t(k.first)];
    const int32_t index = int32_t(stored_.size());
    if (f.index < 0) f = First{k.second, index};
    else more_.emplace(k, index);
    stored_.push_back(std::move(v));
  }

 private:
  struct First {
    Mask mask = 0;
    int32_t index = -1;
  };
  std::vector<First> first_;
  std::unordered_map<Key, int32_t, KeyHash> more_;
  std::deque<V> stored_;
};

// Why a deviation stops being harmless at a node.
enum class BreakKind : uint8_t {
  output,       // the node is a graph output
  nonlinear,    // elementwise nonlinearity
  norm_axes,    // layer_norm / softmax / center-free norm over axes the shift varies along
  max_axes,     // max over axes the shift varies along
  rms_norm,     // an original rms_norm (does not subtract the mean)
  gate,         // enters attention scores or a recurrence
  denominator,  // enters a divisor
  index,        // enters an index operand
  opaque,       // enters an op lnverify does not model (an imported `opaque` node)
};

struct Safety {
  bool ok = true;
  int32_t break_node = -1;  // the node where it breaks
  BreakKind kind = BreakKind::output;
  Key next{-1, 0};           // the successor on the failing route (-1: breaks right here)
  bool next_dropped = false;  // the edge into `next` lost constant axes
};

enum class IssueKind : uint8_t {
  graph_input,
  nonlinear_output,
  dropout_training,
  norm_with_weight,
  norm_other_axes,
  rms_norm_output,
  feature_mismatch,
  grouped_conv,
  cbwc_other_axes,
  per_feature_factor,
  reshape_blocks,
  matmul_mixing,
  opaque_op,  // the output of an op lnverify does not model
  slice_axes,  // a slice that cuts the averaged axes
  pad_value,   // a pad with a nonzero value: the padded positions hold a constant
  where_mixes,  // a where whose condition varies along every averaged axis
};

struct Issue {
  IssueKind kind;
  int32_t node = -1;   // the node responsible (or -1 with `input` for a graph input)
  int32_t input = -1;  // graph input index
  Mask feature = 0;    // feature axes (producer coordinates)
  Mask mean = 0;       // axes of the mean (producer coordinates)
};

struct Term {
  CenterTerm term;
  Safety safety;
  int32_t producer = -1;                 // producer terms: the producer node
  int32_t use_node = -1, use_slot = -1;  // param terms: the edge the deviation enters by
  Mask use_mask = 0;
  bool pending = false;  // its safety is being computed
};

// What a consumer does with a deviation entering by one operand (deviation_rules.cpp).
struct EdgeResult {
  enum Kind { absorb, pass, brk } kind = pass;
  Mask u = 0;  // pass: the output axes the deviation stays constant along
  BreakKind why = BreakKind::output;
  bool dropped = false;  // pass: some axis of the operand's u was lost
};

// One operand's contribution to a mean form (mean_rules.cpp).
struct Part {
  int k = 0;             // operand index
  Mask mask = 0;         // axes in the operand's coordinates
  double coeff = 1.0;
  uint64_t tag = 0;      // requalify with this tag (0: keep keys)
  int32_t issue = -1;    // turn terms into bad terms explained by this issue
};

// A node's mean over some axes, in terms of its operands' means (mean_rules.cpp).
struct Rule {
  std::optional<Entry> leaf;  // an atom (no parts)
  bool zero = false;          // the mean vanishes by construction
  std::vector<Part> parts;
  std::vector<Form> extra;    // param terms added directly (a norm's bias)
};

// Which LayerNorms a reading of "zero" trusts to keep a zero-mean output (an LN without
// affine over B has mean 0 over B). The strict reading (lns = false) trusts none: a rewrite
// may swap any LN. The default reading trusts every LN (each stays an LN or is folded
// exactly). A plan check trusts all but `distrusted`, and collects in `consulted` the
// distrusted LNs whose zero mean a zero would have needed.
struct Trust {
  bool lns = true;
  const std::vector<char>* distrusted = nullptr;
  std::vector<int32_t>* consulted = nullptr;
};

// The axes of a conv's output along which it keeps a value constant when its input is
// constant along them: the batch axis, and each spatial axis without padding (a window
// that reaches into the padding sees zeros). Output rank `rank`. (deviation_rules.cpp)
Mask conv_constant_axes(const Node& conv, size_t rank);
// The axes a slice node cuts (takes less than the whole of, or reorders).
Mask slice_cut(const Graph& g, int32_t n);
// The axes a pad node pads (something before or after).
Mask pad_axes(const Graph& g, int32_t n);

// A where node's constant condition seen from its output: the output axes along which it
// varies, and whether it picks each operand somewhere. (deviation_rules.cpp)
struct WhereSelect {
  Mask varies = 0;
  bool picks[2] = {false, false};
};
WhereSelect where_select(const Graph& g, int32_t n);

// Sums, differences, scales and identities of values of one shape as linear combinations
// of "atoms" (the other nodes, params and graph inputs; an operand broadcast to the
// result's shape stays one atom, its broadcast fixed by the shapes) with exact
// coefficients, so `(a + c) - a` is `c`. A combination of more than kMaxAtoms atoms is not
// kept (the node is then an atom itself). Filled in topological order. (sum_forms.cpp)
struct SumForms {
  using Atom = ValueRef;
  static constexpr size_t kMaxAtoms = 8;
  std::vector<char> combined;  // form(v) holds v's combination (empty: v is 0)
  explicit SumForms(size_t n) : combined(n, 0), start_(n, 0), count_(n, 0) {}
  std::span<const std::pair<Atom, double>> form(int32_t v) const {
    return {atoms_.data() + start_[size_t(v)], count_[size_t(v)]};
  }
  // Adds node v, whose op is `op`.
  void add(const Graph& g, int32_t v, Op op, const std::vector<bool>& zero, Mode mode);

 private:
  // The combinations, one after another in the order added: form(v) is count_[v] atoms
  // from atoms_[start_[v]].
  std::vector<std::pair<Atom, double>> atoms_;
  std::vector<uint32_t> start_;
  std::vector<uint8_t> count_;
};

class Analyzer {
 public:
  // Builds both readings of "zero", "uniform" and "live" (analyzer.cpp). Throws ModelError
  // for a tensor of rank above 63 (axis sets are 64-bit masks).
  Analyzer(const Graph& g, Mode mode);

  const Graph& graph() const { return g_; }
  Mode mode() const { return mode_; }
  FormPool& pool() { return pool_; }
  const std::vector<Term>& terms() const { return terms_; }
  const std::vector<Issue>& issues() const { return issues_; }
  bool live(int32_t v) const { return live_[v]; }
  // Whether swapping LN v itself could change an output (see the constructor).
  bool live_strict(int32_t v) const { return live_strict_[v]; }
  // Whether some term's safety was read while still being computed: verdicts then re-check
  // every term's final safety.
  bool stale() const { return stale_; }

  bool trusts(const Trust& t, int32_t ln) const;

  // Which nodes a graph output depends on when sums are expanded (`sums`, built on `zero`):
  // `sub(a, add(a, c))` does not depend on `a`. Only atoms' entries are meaningful.
  std::vector<bool> live_through_sums(const SumForms& sums, const std::vector<bool>& zero,
                                      const Trust& trust) const;

  // Whether swapping the LayerNorms in `swapped` for RMSNorms with nothing centered (so
  // each outputs something else) changes a graph output, given the plan's other folds:
  // `folded` LNs and `centered` producers. Two marks flow forward from the swapped LNs:
  // `changed` (the value may differ) and `unzeroed` (a mean that some zero-mean output
  // relied on may differ). A centered producer's output keeps its zero mean whatever its
  // input, and so do a `center` and an LN without affine that is kept; a folded LN keeps
  // it only while no `unzeroed` mark reaches it. A zero that needs the zero mean of an LN
  // that lost it no longer cuts; `blame` collects such LNs. Linear in the graph.
  bool swap_reaches_output(const std::vector<char>& swapped, const std::vector<char>& folded,
                           const std::vector<char>& centered, std::vector<int32_t>* blame) const;

  // The mean over `mask` (axes of the operand) of operand k of node n.
  Form operand_mean(int32_t n, int k, Mask mask);
  // The mean of node v over `mask`, memoized per (v, mask).
  Form node_mean(int32_t v, Mask mask);

  // Safety of a deviation constant along U at the output of node v, memoized per (v, U).
  const Safety& safety(int32_t v, Mask u);
  // The safety memoized for a key, or nullptr.
  const Safety* safety_of(const Key& k) const;
  // The deviation of a param term entering node c by operand k (or the norm's bias slot,
  // k = -1) constant along u (operand coordinates; output coordinates for k = -1).
  Safety injected_safety(int32_t c, int k, Mask u);
  // The axes node n averages or normalizes over (its `axes`, normalized to its output's
  // rank), computed once for each norm and center.
  Mask norm_axes(int32_t n) const {
    if (has_norm_mask(op_of(n))) return norm_masks_[size_t(n)];
    return analysis::mask_of(normalize_axes(g_.nodes[n].axes, int64_t(out_shape(n).size()),
                                            g_.nodes[n].name));
  }
  // u with v's size-1 axes added (a deviation is constant along them anyway).
  Mask canon_u(int32_t v, Mask u) const { return u | size1_of(v); }
  // size1_mask of node v's output, computed once per node.
  Mask size1_of(int32_t v) const { return size1_masks_[size_t(v)]; }

  // What node c does with a deviation constant along u (operand coordinates) entering by
  // operand k.
  EdgeResult edge(int32_t c, int k, Mask u);

 private:
  struct Expansion {
    Safety immediate;                          // !ok: breaks at once
    std::vector<std::pair<Key, bool>> children;  // (successor, edge dropped axes)
  };

  const Graph& g_;
  Mode mode_;
  // Each node's op, packed: the passes read it for every node and use, and a Node is large
  // (its attributes and names), so reading it from g_.nodes costs a cache miss each time.
  std::vector<Op> ops_;
  // norm_axes of each norm and center (shape inference has checked their axes against the
  // input's rank, which is the output's), 0 for other nodes.
  std::vector<Mask> norm_masks_;
  std::vector<Mask> size1_masks_;  // size1_of
  static bool has_norm_mask(Op op) {
    return op == Op::layer_norm || op == Op::rms_norm || op == Op::center;
  }
  FormPool pool_;
  // Each value's uses (consumer, operand), in consumer order: value v's are
  // use_list_[use_start_[v] .. use_start_[v + 1]) (one array, not a vector per value).
  std::vector<int32_t> use_start_;
  std::vector<std::pair<int32_t, int32_t>> use_list_;
  std::vector<bool> is_output_, live_, zero_, live_strict_, zero_strict_;
  std::vector<Mask> uniform_, uniform_strict_;  // per reading, like zero_ / zero_strict_
  // The strict reading's sum forms: identities no rewrite changes (the safety pass reads
  // them to cancel a deviation between routes through sums).
  SumForms strict_sums_{0};
  KeyMemo<Form> means_;
  KeyMemo<Safety> safe_;
  std::vector<Term> terms_;
  std::vector<Issue> issues_;
  std::vector<int32_t> producer_terms_;  // per node: its producer term, or -1
  std::map<std::tuple<int32_t, int, Mask>, int32_t> param_terms_;
  std::map<std::pair<int32_t, int>, int32_t> param_atoms_;
  mutable std::unordered_map<int32_t, WhereSelect> where_selects_;
  bool stale_ = false;

  // --- small helpers shared by every file ---
  Op op_of(int32_t n) const { return ops_[size_t(n)]; }
  std::span<const std::pair<int32_t, int32_t>> uses(int32_t v) const {
    return {use_list_.data() + use_start_[size_t(v)], use_list_.data() + use_start_[size_t(v) + 1]};
  }
  const Shape& in_shape(int32_t n, int k) const { return g_.shape_of(g_.node_inputs[n][k]); }
  const Shape& out_shape(int32_t n) const { return g_.node_shapes[n]; }
  bool input_is_param(int32_t n, int k) const {
    return g_.node_inputs[n][k].kind == ValueRef::Kind::param;
  }
  // The value a ref equals by construction: through identities (an inference dropout, a
  // dropout with p = 0, a scale by 1).
  ValueRef alias(ValueRef r) const;
  // Whether node c's output depends on its operand k (not: a where that never picks it).
  bool reads_operand(int32_t c, size_t k) const {
    return op_of(c) != Op::where || select_of(c).picks[k];
  }
  // where_select of where node n, computed once.
  const WhereSelect& select_of(int32_t n) const {
    auto it = where_selects_.find(n);
    if (it == where_selects_.end()) it = where_selects_.emplace(n, where_select(g_, n)).first;
    return it->second;
  }

  // --- readings (analyzer.cpp, liveness.cpp) ---
  // Live in one reading: some graph output depends on the node, not only through constant
  // means of it or through nodes that ignore their inputs.
  std::vector<bool> live_in_reading(const std::vector<bool>& zero, const Trust& trust) const;

  // --- structural zeros and zero means (structural_zeros.cpp, zero_means.cpp) ---
  // Whether node v is identically zero whatever the inputs and (generic) params:
  // sub(a, a), a scale by 0, and ops that map zero inputs to zero (no bias added).
  bool structurally_zero(int32_t v, const std::vector<bool>& zero, const Trust& trust) const;
  // Whether x is zero-mean over `axes` by construction (the local patterns: a norm without
  // affine or a center over some of them, a producer already centered over them), through
  // identities, sums of zero-mean operands and linear maps along other axes, visiting at
  // most kZeroMeanVisits nodes per question (a DAG of sums that reuse their operands has
  // exponentially many paths).
  static constexpr int kZeroMeanVisits = 64;
  bool zero_mean_over(const ValueRef& x, const Axes& axes, const Trust& trust) const;
  bool zero_mean_within(const ValueRef& x, const Axes& axes, const Trust& trust,
                        int& budget) const;
  bool zero_mean_through_matmul(int32_t v, const Axes& axes, const Trust& trust,
                                int& budget) const;
  bool zero_mean_through_mean(int32_t v, Mask b, const Trust& trust, int& budget) const;
  bool zero_mean_through_reshape(int32_t v, Mask b, const Trust& trust, int& budget) const;
  // The keepdims mean m when v = sub(y, m) with m = mean(y, B), of y's shape (v is then
  // zero-mean over B whatever y is); -1 otherwise.
  int32_t own_mean_subtracted(int32_t v) const;

  // --- uniform axes (uniform_axes.cpp) ---
  // Axes along which a node's value is the same everywhere by construction (it does not
  // depend on the position there): zero values, and what is computed from them.
  Mask uniform_axes(int32_t v, const std::vector<bool>& zero, const std::vector<Mask>& uniform,
                    const SumForms& sums) const;

  // --- constant means (constant_means.cpp) ---
  // Whether node c's output does not depend on its inputs at all: a softmax over an axis of
  // size 1 (constant 1), a norm or center over axes of size 1 (constant bias or zero).
  bool ignores_inputs(int32_t c, const std::vector<bool>& zero, const Trust& trust) const;
  // Whether the mean of node v over `axes` (a mask of v's axes) is the same whatever v's
  // input: v is a softmax along one of them (its rows sum to 1), a center over some of
  // them (0), or a LayerNorm without weight over some of them that the reading trusts to
  // stay one (the mean of its bias - which a centering of that bias does change: v's
  // input is irrelevant to such a mean, v itself is not; an RMSNorm's mean is not
  // constant).
  bool constant_mean_over(int32_t v, Mask axes, const Trust& trust) const;
  // Whether node c is a mean of its input node over axes that make it constant_mean_over.
  bool constant_mean(int32_t c, const Trust& trust) const;
  // Whether v, not a graph output, reaches the outputs only through constant means of it
  // (among its uses that are live and read their inputs): then v's input does not matter.
  bool only_constant_means(int32_t v, const std::vector<bool>& live,
                           const std::vector<bool>& zero, const Trust& trust) const;
  // Whether LN v outputs its bias whatever its input, in a reading: its input is uniform
  // along its axes (or they have size 1), and the reading trusts v to stay a LayerNorm
  // (an RMSNorm of a uniform value is not its bias).
  bool ln_of_uniform(int32_t v, const Trust& trust) const;

  // --- terms (terms.cpp) ---
  int32_t atom_of_input(int32_t i) const { return int32_t(g_.nodes.size()) + i; }
  int32_t atom_of_param_use(int32_t node, int slot);
  int32_t add_issue(const Issue& i);
  // An opaque atom: node n's own output averaged over a, explained by an issue of `kind`.
  Entry opaque_entry(int32_t n, Mask a, IssueKind kind);
  // The producer term of node n centered over `feature`, its safety computed on first use.
  int32_t producer_term(int32_t n, Mask feature);
  // The param read by operand k of node n, averaged over `mask`, as a term.
  Form param_term_leaf(int32_t n, int k, Mask mask);
  // The bias of a norm without weight, averaged over a (the norm's output axes), as a term.
  Form norm_bias_leaf(int32_t n, Mask a);
  // The leaf of a param use registered as term `ref`, averaged over `mask`.
  Form term_leaf(int32_t atom, Mask mask, int32_t ref);
  // A term's safety as known now. Asked while that very safety is being computed (a
  // deviation whose fate depends on a mean containing the term), the answer may be stale:
  // verdicts then re-check every term (stale()).
  bool term_safe_now(int32_t ref);

  // --- mean forms (mean_forms.cpp) ---
  Form combine(int32_t n, const Rule& rule);
  // Whether a mean form is one constant: only param terms averaged over all their axes.
  bool is_constant(const Form& f) const;

  // --- mean rules, one per op family (mean_rules.cpp) ---
  // Node n's mean over its axes a.
  Rule mean_rule(int32_t n, Mask a);
  Rule producer_mean(int32_t n, Mask a, Mask feature);
  Rule producer_leaf(int32_t n, Mask a, Mask feature);
  Rule matmul_mean(int32_t n, Mask a);
  Rule activation_product_mean(int32_t n, Mask a);
  Rule opaque_mean(int32_t n, Mask a, IssueKind kind);
  Rule sum_mean(int32_t n, Mask a);
  Rule product_mean(int32_t n, Mask a);
  Rule scale_mean(int32_t n, Mask a);
  Rule dropout_mean(int32_t n, Mask a);
  Rule max_mean(int32_t n, Mask a);
  Rule reduction_mean(int32_t n, Mask a);
  Rule transpose_mean(int32_t n, Mask a);
  Rule reshape_mean(int32_t n, Mask a);
  Rule slice_mean(int32_t n, Mask a);
  Rule expand_mean(int32_t n, Mask a);
  Rule pad_mean(int32_t n, Mask a);
  Rule where_mean(int32_t n, Mask a);
  Rule concat_mean(int32_t n, Mask a);
  Rule center_mean(int32_t n, Mask a);
  Rule layer_norm_mean(int32_t n, Mask a);
  Rule rms_norm_mean(int32_t n, Mask a);
  // The operand of producer n whose mean over axes other than its features passes
  // through it (linear or pointwise conv without bias, matmul with one param operand),
  // or -1.
  int transparent_operand(int32_t n) const;
  bool pointwise_conv(int32_t n) const;
  // The tag that qualifies what operand k of node n contributes through a transport.
  static uint64_t tag_of(int32_t n, int k) {
    return (uint64_t(uint32_t(n)) << 8 | uint64_t(k)) + 1;
  }
  // Output axes m of node n in operand k's coordinates, its size-1 axes dropped.
  Mask operand_mask(int32_t n, int k, Mask m) const;

  // --- deviation rules, one per op family (deviation_rules.cpp) ---
  EdgeResult linear_edge(int32_t c, int k, Mask u);
  EdgeResult conv_edge(int32_t c, int k, Mask u);
  EdgeResult matmul_edge(int32_t c, int k, Mask u);
  EdgeResult sum_edge(int32_t c, int k, Mask u);
  EdgeResult product_edge(int32_t c, int k, Mask u);
  EdgeResult scale_edge(int32_t c, int k, Mask u);
  EdgeResult dropout_edge(int32_t c, int k, Mask u);
  EdgeResult softmax_edge(int32_t c, int k, Mask u);
  EdgeResult reduction_edge(int32_t c, int k, Mask u);
  EdgeResult transpose_edge(int32_t c, int k, Mask u);
  EdgeResult reshape_edge(int32_t c, int k, Mask u);
  EdgeResult concat_edge(int32_t c, int k, Mask u);
  EdgeResult expand_edge(int32_t c, int k, Mask u);
  EdgeResult pad_edge(int32_t c, int k, Mask u);
  EdgeResult where_edge(int32_t c, int k, Mask u);
  EdgeResult norm_edge(int32_t c, int k, Mask u);
  // Concats along `axis` of copies of one value carry that value's deviation everywhere
  // when it is constant along the axis: the value they copy.
  ValueRef copy_root(ValueRef x, int64_t axis) const;

  // --- safety (safety.cpp) ---
  // The keys the routes of v's deviation (constant along u) reach, or where it breaks.
  Expansion expand(int32_t v, Mask u);
  void break_at_output(Expansion& ex, int32_t c) const;
  // Follows the route into use (c, k) of a value whose deviation is constant along u:
  // c's successor joins ex.children, or ex breaks at c (false).
  bool follow(Expansion& ex, int32_t c, int k, Mask u);
  // The concats that take v's deviation as one route, and those followed so far.
  struct Bundles {
    std::vector<int32_t> concats, followed;
    bool has(int32_t c) const {
      return std::find(concats.begin(), concats.end(), c) != concats.end();
    }
    bool followed_already(int32_t c) const {
      return std::find(followed.begin(), followed.end(), c) != followed.end();
    }
  };
  std::vector<int32_t> same_shift_concats(int32_t v, Mask u);
  void follow_bundle(Expansion& ex, Bundles& bundles, int32_t c, Mask u) const;
  // The routes from v into its use (c, k), taken together where they cancel or land
  // alike on a bundled concat; false once ex breaks.
  bool expand_use(Expansion& ex, Bundles& bundles, int32_t v, Mask u, int32_t c, int k);
  // The region through which v's deviation δ (constant along u) cancels, taken together:
  // the add / sub / scale / identity nodes reached from v or another member through an
  // operand of their own shape, and the keepdims means and maxes of members over axes
  // along which δ is constant (each passes its input's deviation unchanged). Every
  // member's deviation through the region is coef·δ: for a sum, its strict sum form with
  // each atom that is v or a member replaced by that atom's coef (the rest of its atoms
  // carry routes expand follows on their own); for a mean, its input's. Empty - expand
  // then follows every route on its own - unless v is an atom, some member's coef is 0
  // (v cancels, as in `add(v, sub(w, v))` or `sub(v, mean(v))` beside another sum), the
  // region stays small, and no member is read by a concat, a center, or a mean or max the
  // region cannot take (the routes expand treats specially).
  struct CancelRegion {
    std::vector<int32_t> nodes;  // the members other than v
    std::vector<double> coef;    // coef[i]: nodes[i]'s deviation is coef[i]·δ
    bool has(int32_t c) const { return std::find(nodes.begin(), nodes.end(), c) != nodes.end(); }
  };
  CancelRegion cancelling_region(int32_t v, Mask u) const;
  // v's routes through a region where its deviation cancels, taken together.
  void expand_region(Expansion& ex, int32_t v, Mask u, const CancelRegion& reg);
  static constexpr size_t kMaxCancelRegion = 32;
  // Whether m is a keepdims mean or max of v over axes along which a deviation of v
  // constant along u is constant: m passes it unchanged, so subtracting m from v cancels it.
  bool is_mean_of(int32_t m, int32_t v, Mask u) const;
  // The slot by which p = add(v, z), add(z, v) or sub(v, z) (z not v, same shape as v)
  // passes a deviation of v constant along u unchanged; -1 if it is not such a node.
  int carrier_slot(int32_t p, int32_t v, Mask u);
  // Whether c concatenates, along an axis of u, parts that are v, carriers of v (above) or
  // keepdims means / maxes of v over axes of u (is_mean_of), at least one not v itself: a
  // deviation of v constant along u lands on every part alike.
  bool same_shift_concat(int32_t c, int32_t v, Mask u);
  // The center node cn when s = sub(v, cn) or sub(cn, v) with cn = center(v, B), s of v's
  // shape (s is then ±mean_B(v)); -1 otherwise.
  int32_t center_partner(int32_t s, int32_t v) const;
  // Whether c = sub(v, m) or sub(m, v) with m = mean or max(v, B ⊆ u, keepdims): the
  // deviation cancels.
  bool cancels_with_mean(int32_t c, int32_t v, Mask u) const;
};

}  // namespace lnv::analysis::detail
