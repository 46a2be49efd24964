// Shapes, axes and broadcasting: the small index arithmetic every part shares.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lnv {

using Shape = std::vector<int64_t>;
using Axes = std::vector<int64_t>;

int64_t numel(const Shape& s);

// The most elements any tensor may have - an input, a param, every node's output: 2^31,
// so that every value can be materialized and indexed with room to spare.
constexpr int64_t kMaxElements = int64_t{1} << 31;
// Whether every dim of `s` is positive and their product is at most kMaxElements
// (computed without overflow, whatever the dims).
bool within_max_elements(const Shape& s);
std::string to_string(const Shape& s);

// Row-major strides of a shape.
std::vector<int64_t> strides_of(const Shape& s);

// Normalizes possibly negative axes against `rank`, sorted and unique. Throws ModelError
// at `where` for an axis out of range or a repeated axis.
Axes normalize_axes(const Axes& axes, int64_t rank, const std::string& where);
int64_t normalize_axis(int64_t axis, int64_t rank, const std::string& where);

// NumPy broadcasting of two shapes; throws ModelError at `where` when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const std::string& where);

// Maps a flat index of the broadcast result shape `out` to the flat index in an operand
// of shape `in` (which broadcasts to `out`).
int64_t broadcast_source_index(int64_t flat_out, const Shape& out, const Shape& in);

}  // namespace lnv
