#include "core/shape.h"

#include <algorithm>

#include "core/error.h"

namespace lnv {

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

bool within_max_elements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d <= 0 || d > kMaxElements / n) return false;
    n *= d;
  }
  return true;
}

std::string to_string(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int64_t i = static_cast<int64_t>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

int64_t normalize_axis(int64_t axis, int64_t rank, const std::string& where) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    throw ModelError(where, "axis " + std::to_string(axis) + " is out of range for rank " +
                                std::to_string(rank));
  return a;
}

Axes normalize_axes(const Axes& axes, int64_t rank, const std::string& where) {
  Axes out;
  for (int64_t a : axes) out.push_back(normalize_axis(a, rank, where));
  std::sort(out.begin(), out.end());
  if (std::adjacent_find(out.begin(), out.end()) != out.end())
    throw ModelError(where, "an axis is repeated");
  return out;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const std::string& where) {
  size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1)
      throw ModelError(where, "shapes " + to_string(a) + " and " + to_string(b) +
                                  " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int64_t broadcast_source_index(int64_t flat_out, const Shape& out, const Shape& in) {
  int64_t idx = 0, in_stride = 1;
  size_t offset = out.size() - in.size();
  for (int64_t i = static_cast<int64_t>(out.size()) - 1; i >= 0; --i) {
    int64_t coord = flat_out % out[i];
    flat_out /= out[i];
    if (static_cast<size_t>(i) >= offset) {
      int64_t d = in[i - offset];
      if (d != 1) idx += coord * in_stride;
      in_stride *= d;
    }
  }
  return idx;
}

}  // namespace lnv
