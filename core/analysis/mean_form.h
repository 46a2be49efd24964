// The mean of a value over a set of axes (docs/spec/semantics.md, "Means"), as a sparse
// linear combination of atoms, kept in a persistent treap so that a value and its inputs
// share structure (a residual stream adds one term per block: O(log n) new nodes, not a
// copy). Private to core/analysis.
//
// An entry is keyed by (atom, mask, qual): the atom, the axes (in the atom's own
// coordinates) the mean is taken over, and a hash of the transports that are not
// whole-tensor means (placement in a concat, an elementwise factor, a mixing product).
// Entries with equal keys are the same tensor, so their coefficients add and may cancel.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/analysis/axes_mask.h"

namespace lnv::analysis {

enum class EntryStatus : uint8_t {
  term,      // centering the atom (a producer or param term) zeroes this mean
  bad_term,  // a term, but its transport or layout keeps its mean alive after centering
  opaque,    // no centering can remove it
};

struct Entry {  // 40 bytes: the fields ordered so that a pool node fills one cache line
  Mask mask = 0;
  uint64_t qual = 0;
  double coeff = 0;
  int32_t atom = 0;
  int32_t ref = -1;  // term / bad_term: index of the candidate term; opaque: -1
  int32_t issue = -1;  // bad_term / opaque: index of the issue explaining it
  EntryStatus status = EntryStatus::opaque;
  bool safe = true;  // term: centering it is exact everywhere else in the graph
  // The coefficient was rounded on its way (a product or sum of factors that double
  // arithmetic could not hold exactly): a zero it reaches is not a proof that the entry
  // cancels, so the entry is kept.
  bool inexact = false;
};

// A form is a treap root in a FormPool, times a lazy factor.
struct Form {
  int32_t root = 0;
  double factor = 1.0;
  bool inexact = false;  // the factor was rounded
};

// a·b, and whether double arithmetic rounded it (fma gives the product's exact error).
inline double exact_mul(double a, double b, bool& inexact) {
  const double p = a * b;
  if (std::fma(a, b, -p) != 0.0 || (p == 0.0 && a != 0.0 && b != 0.0)) inexact = true;
  return p;
}
// a / b, and whether double arithmetic rounded it.
inline double exact_div(double a, double b, bool& inexact) {
  const double q = a / b;
  if (std::fma(q, b, -a) != 0.0 || (q == 0.0 && a != 0.0)) inexact = true;
  return q;
}
// a + b, and whether double arithmetic rounded it (Knuth's TwoSum error term).
inline double exact_sum(double a, double b, bool& inexact) {
  const double s = a + b;
  const double bb = s - a;
  if ((a - (s - bb)) + (b - bb) != 0.0) inexact = true;
  return s;
}

class FormPool {
 public:
  FormPool() { nodes_.push_back(Node{}); }  // index 0: the empty tree

  Form leaf(const Entry& e) { return Form{make(e, 0, 0), 1.0}; }

  uint32_t size(const Form& f) const { return nodes_[f.root].size; }
  uint32_t opaque_count(const Form& f) const { return nodes_[f.root].n_opaque; }

  // a + s·b, sharing the larger operand.
  Form add(Form a, Form b, double s) {
    if (s == 0.0 || b.root == 0) return a;
    if (a.root == 0) {
      bool inexact = b.inexact;
      const double factor = exact_mul(b.factor, s, inexact);
      return Form{b.root, factor, inexact};
    }
    if (size(a) < size(b) && power_of_two(s)) {
      // s·b + a = s·(b + a/s), exactly when s is a power of two (±1 for a sub).
      Form r = add(b, a, 1.0 / s);
      r.factor = exact_mul(r.factor, s, r.inexact);
      return r;
    }
    // Coefficients stay exact (so that cancellation is seen) when the factor is ±2^k.
    if (!power_of_two(a.factor) || a.inexact) a = exact_factor(a);
    bool k_inexact = b.inexact;
    const double k = exact_div(exact_mul(b.factor, s, k_inexact), a.factor, k_inexact);
    int32_t root = a.root;
    for_each(b.root, [&](const Entry& e) {
      Entry scaled = e;
      scaled.inexact = e.inexact || k_inexact;
      scaled.coeff = exact_mul(e.coeff, k, scaled.inexact);
      root = insert(root, scaled);
    });
    return Form{root, a.factor};
  }

  // Every entry re-keyed with `tag` mixed into its qual (and, when issue >= 0, turned
  // into a bad entry explained by that issue).
  Form requalify(Form f, uint64_t tag, int32_t issue) {
    std::vector<Entry> entries;
    for_each(f.root, [&](const Entry& e) {
      Entry r = e;
      r.inexact = e.inexact || f.inexact;
      r.coeff = exact_mul(e.coeff, f.factor, r.inexact);
      r.qual = mix(e.qual ^ tag);
      // The outer issue also explains an inner bad term: a term the transport garbles
      // (a reshape splitting a block) would not be repaired by fixing the term itself.
      if (issue >= 0 && r.status != EntryStatus::opaque) {
        r.status = EntryStatus::bad_term;
        r.issue = issue;
      }
      entries.push_back(r);
    });
    int32_t root = 0;
    for (const Entry& e : entries) root = insert(root, e);
    return Form{root, 1.0};
  }

  // Visits the entries in key order, coefficients including the factor.
  template <class F>
  void visit(const Form& f, F&& fn) const {
    for_each(f.root, [&](const Entry& e) {
      Entry r = e;
      r.inexact = e.inexact || f.inexact;
      r.coeff = exact_mul(e.coeff, f.factor, r.inexact);
      fn(r);
    });
  }

  // Visits the entries, skipping subtrees already seen (`seen` is indexed by node);
  // used to collect the union of many forms in time proportional to their shared size.
  template <class F>
  void visit_unseen(const Form& f, std::vector<char>& seen, F&& fn) const {
    if (seen.size() < nodes_.size()) seen.resize(nodes_.size(), 0);
    std::vector<int32_t> stack{f.root};
    while (!stack.empty()) {
      int32_t t = stack.back();
      stack.pop_back();
      if (t == 0 || seen[t]) continue;
      seen[t] = 1;
      fn(nodes_[t].e);
      stack.push_back(nodes_[t].left);
      stack.push_back(nodes_[t].right);
    }
  }

  // The first entry (in key order) that is bad (opaque or bad_term), or unsafe.
  const Entry* first_bad(const Form& f) const {
    return first_where(f.root, [](const Node& n) { return n.n_bad; }, [](const Entry& e) {
      return e.status != EntryStatus::term;
    });
  }
  const Entry* first_unsafe(const Form& f) const {
    return first_where(f.root, [](const Node& n) { return n.n_unsafe; }, [](const Entry& e) {
      return e.status == EntryStatus::term && !e.safe;
    });
  }

 private:
  struct Node {
    Entry e;
    int32_t left = 0, right = 0;
    uint32_t size = 0, n_bad = 0, n_unsafe = 0, n_opaque = 0;
  };
  // The nodes, in chunks that never move: a deep model's pool holds millions of nodes, which
  // a vector would copy at each doubling.
  class Nodes {
   public:
    const Node& operator[](int32_t i) const { return chunks_[size_t(i) >> kShift][size_t(i) & kLow]; }
    size_t size() const { return size_; }
    void push_back(const Node& n) {
      if ((size_ & kLow) == 0) chunks_.push_back(std::make_unique<Node[]>(size_t(1) << kShift));
      chunks_.back()[size_ & kLow] = n;
      ++size_;
    }

   private:
    static constexpr size_t kShift = 10, kLow = (size_t(1) << kShift) - 1;
    std::vector<std::unique_ptr<Node[]>> chunks_;
    size_t size_ = 0;
  };
  Nodes nodes_;

  static bool power_of_two(double x) {
    int e = 0;
    return x != 0.0 && std::fabs(std::frexp(x, &e)) == 0.5;
  }
  static uint64_t mix(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  static uint64_t priority(const Entry& e) {
    return mix(mix(uint64_t(uint32_t(e.atom)) ^ mix(e.mask)) ^ e.qual);
  }
  static bool less(const Entry& a, const Entry& b) {
    if (a.atom != b.atom) return a.atom < b.atom;
    if (a.mask != b.mask) return a.mask < b.mask;
    return a.qual < b.qual;
  }
  static bool same_key(const Entry& a, const Entry& b) {
    return a.atom == b.atom && a.mask == b.mask && a.qual == b.qual;
  }

  int32_t make(const Entry& e, int32_t l, int32_t r) {
    Node n;
    n.e = e;
    n.left = l;
    n.right = r;
    const Node& L = nodes_[l];
    const Node& R = nodes_[r];
    n.size = 1 + L.size + R.size;
    n.n_bad = (e.status != EntryStatus::term) + L.n_bad + R.n_bad;
    n.n_unsafe = (e.status == EntryStatus::term && !e.safe) + L.n_unsafe + R.n_unsafe;
    n.n_opaque = (e.status == EntryStatus::opaque) + L.n_opaque + R.n_opaque;
    nodes_.push_back(n);
    return int32_t(nodes_.size() - 1);
  }
  int32_t with_children(int32_t t, int32_t l, int32_t r) { return make(nodes_[t].e, l, r); }

  // Persistent split into (< key, >= key).
  std::pair<int32_t, int32_t> split(int32_t t, const Entry& key) {
    if (t == 0) return {0, 0};
    if (less(nodes_[t].e, key)) {
      auto [l, r] = split(nodes_[t].right, key);
      return {with_children(t, nodes_[t].left, l), r};
    }
    auto [l, r] = split(nodes_[t].left, key);
    return {l, with_children(t, r, nodes_[t].right)};
  }
  int32_t merge(int32_t a, int32_t b) {
    if (a == 0) return b;
    if (b == 0) return a;
    if (priority(nodes_[a].e) > priority(nodes_[b].e))
      return with_children(a, nodes_[a].left, merge(nodes_[a].right, b));
    return with_children(b, merge(a, nodes_[b].left), nodes_[b].right);
  }

  // An entry vanishes only when its coefficient is exactly zero: a coefficient of 1e-30
  // is a mean that no centering removes, and a zero reached through rounding may hide one.
  static bool vanishes(const Entry& e) { return e.coeff == 0.0 && !e.inexact; }

  int32_t insert(int32_t t, const Entry& e) {
    if (t == 0) return vanishes(e) ? 0 : make(e, 0, 0);
    const Entry& here = nodes_[t].e;
    if (same_key(here, e)) {
      Entry updated = here;
      updated.inexact = here.inexact || e.inexact;
      updated.coeff = exact_sum(here.coeff, e.coeff, updated.inexact);
      if (vanishes(updated)) return merge(nodes_[t].left, nodes_[t].right);
      return make(updated, nodes_[t].left, nodes_[t].right);
    }
    if (!vanishes(e) && priority(e) > priority(here) && !contains(t, e)) {
      auto [l, r] = split(t, e);
      return make(e, l, r);
    }
    if (less(e, here)) return with_children(t, insert(nodes_[t].left, e), nodes_[t].right);
    return with_children(t, nodes_[t].left, insert(nodes_[t].right, e));
  }
  bool contains(int32_t t, const Entry& key) const {
    while (t != 0) {
      if (same_key(nodes_[t].e, key)) return true;
      t = less(key, nodes_[t].e) ? nodes_[t].left : nodes_[t].right;
    }
    return false;
  }

  Form exact_factor(Form f) {
    if (f.factor == 1.0 && !f.inexact) return f;
    std::vector<Entry> entries;
    for_each(f.root, [&](const Entry& e) {
      Entry r = e;
      r.inexact = e.inexact || f.inexact;
      r.coeff = exact_mul(e.coeff, f.factor, r.inexact);
      entries.push_back(r);
    });
    int32_t root = 0;
    for (const Entry& e : entries) root = insert(root, e);
    return Form{root, 1.0};
  }

  template <class F>
  void for_each(int32_t root, F&& fn) const {
    std::vector<int32_t> stack;
    int32_t t = root;
    while (t != 0 || !stack.empty()) {
      while (t != 0) {
        stack.push_back(t);
        t = nodes_[t].left;
      }
      t = stack.back();
      stack.pop_back();
      fn(nodes_[t].e);
      t = nodes_[t].right;
    }
  }

  template <class Count, class Pred>
  const Entry* first_where(int32_t t, Count count, Pred pred) const {
    while (t != 0 && count(nodes_[t]) > 0) {
      const Node& n = nodes_[t];
      if (count(nodes_[n.left]) > 0) {
        t = n.left;
      } else if (pred(n.e)) {
        return &n.e;
      } else {
        t = n.right;
      }
    }
    return nullptr;
  }
};

}  // namespace lnv::analysis
