// Axis sets as bit masks, and how elementwise broadcasting, reductions and reshapes map
// them (docs/spec/semantics.md, "Constant axes", "Shape ops"). Private to core/analysis.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/shape.h"

namespace lnv::analysis {

using Mask = uint64_t;  // bit a: axis a (ranks above 64 are rejected by the analysis)

inline Mask bit(int64_t a) { return Mask(1) << a; }
inline bool subset(Mask a, Mask b) { return (a & ~b) == 0; }
// Every axis of a tensor of rank `rank`: axes 0 .. rank - 1.
inline Mask all_axes(size_t rank) { return rank >= 64 ? ~Mask(0) : bit(int64_t(rank)) - 1; }

// Axes of `s` whose size is 1 (a deviation is trivially constant along them; a mean over
// them is the identity).
inline Mask size1_mask(const Shape& s) {
  Mask m = 0;
  for (size_t a = 0; a < s.size(); ++a)
    if (s[a] == 1) m |= bit(int64_t(a));
  return m;
}

inline Mask mask_of(const Axes& axes) {
  Mask m = 0;
  for (int64_t a : axes) m |= bit(a);
  return m;
}

inline Axes axes_of(Mask m) {
  Axes out;
  for (int a = 0; a < 64; ++a)
    if (m & bit(a)) out.push_back(a);
  return out;
}

// An operand of rank r broadcast into an output of rank R: operand axis j is output axis
// j + (R - r).
inline Mask operand_to_out(Mask m, size_t r, size_t R) { return m << (R - r); }
inline Mask out_to_operand(Mask m, size_t r, size_t R) {
  return (m >> (R - r)) & all_axes(r);
}
// Output axes along which a broadcast operand is constant (absent or of size 1).
inline Mask broadcast_const_axes(const Shape& operand, size_t R) {
  return all_axes(R - operand.size()) | operand_to_out(size1_mask(operand), operand.size(), R);
}

// Removes the bits of `removed` from `m`, compressing the remaining bits (a reduction
// without keepdims).
inline Mask drop_axes(Mask m, Mask removed, size_t rank) {
  Mask out = 0;
  int k = 0;
  for (size_t a = 0; a < rank; ++a) {
    if (removed & bit(int64_t(a))) continue;
    if (m & bit(int64_t(a))) out |= bit(k);
    ++k;
  }
  return out;
}
// Inverse of drop_axes: spreads the bits of `m` over the axes not in `removed`.
inline Mask insert_axes(Mask m, Mask removed, size_t rank) {
  Mask out = 0;
  int k = 0;
  for (size_t a = 0; a < rank; ++a) {
    if (removed & bit(int64_t(a))) continue;
    if (m & bit(k)) out |= bit(int64_t(a));
    ++k;
  }
  return out;
}

// A reshape groups the non-unit axes of its input and output into blocks of equal
// element count: (input axes, output axes). Each block's elements stay together.
struct ReshapeBlock {
  Mask in = 0, out = 0;
};
inline std::vector<ReshapeBlock> reshape_blocks(const Shape& in, const Shape& out) {
  std::vector<ReshapeBlock> blocks;
  size_t i = 0, o = 0;
  auto skip_ones = [](const Shape& s, size_t& k) {
    while (k < s.size() && s[k] == 1) ++k;
  };
  skip_ones(in, i);
  skip_ones(out, o);
  while (i < in.size() && o < out.size()) {
    ReshapeBlock b;
    int64_t pi = in[i], po = out[o];
    b.in |= bit(int64_t(i++));
    b.out |= bit(int64_t(o++));
    while (pi != po) {
      if (pi < po) {
        skip_ones(in, i);
        if (i >= in.size()) break;
        pi *= in[i];
        b.in |= bit(int64_t(i++));
      } else {
        skip_ones(out, o);
        if (o >= out.size()) break;
        po *= out[o];
        b.out |= bit(int64_t(o++));
      }
    }
    blocks.push_back(b);
    skip_ones(in, i);
    skip_ones(out, o);
  }
  return blocks;
}

}  // namespace lnv::analysis
