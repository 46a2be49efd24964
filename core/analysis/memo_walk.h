// The memoized walk behind both on-demand analyses of the analyzer: mean forms (a key is
// a value and the axes averaged) and deviation safety (a value and the axes its deviation
// is constant along). A key's result depends on the results of other keys; a deep
// residual stream chains 10^6 of them, so the walk keeps its own stack instead of
// recursing, and computes each key once. Private to core/analysis.
#pragma once

#include <vector>

namespace lnv::analysis::detail {

// Fills memo[root] (and the memo of every key it depends on, not yet filled).
//
//   Step step = expand(key);                  what key needs (computed again once they are in memo)
//   for_each_child(key, step, need);          calls need(child) for each key step depends on
//   memo.emplace(key, finish(key, step));     when every child is in memo
//
// expand and finish may run nested walks over the same or another memo (a mean form may
// need a safety, a safety a mean form); every key they fill is reused here.
template <class Memo, class Key, class Expand, class ForEachChild, class Finish>
void memo_walk(Memo& memo, const Key& root, Expand&& expand, ForEachChild&& for_each_child,
               Finish&& finish) {
  std::vector<Key> stack{root};
  while (!stack.empty()) {
    const Key key = stack.back();
    if (memo.count(key)) {
      stack.pop_back();
      continue;
    }
    auto step = expand(key);
    bool ready = true;
    for_each_child(key, step, [&](const Key& child) {
      if (!memo.count(child)) {
        stack.push_back(child);
        ready = false;
      }
    });
    if (!ready) continue;
    stack.pop_back();
    memo.emplace(key, finish(key, step));
  }
}

}  // namespace lnv::analysis::detail
