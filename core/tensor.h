// A dense row-major tensor over any scalar type (double, MPFR, float).
#pragma once

#include <vector>

#include "core/shape.h"

namespace lnv {

template <class T>
struct Tensor {
  Shape shape;
  std::vector<T> data;

  Tensor() = default;
  explicit Tensor(Shape s) : shape(std::move(s)), data(numel(shape), T(0)) {}
  Tensor(Shape s, std::vector<T> d) : shape(std::move(s)), data(std::move(d)) {}
  int64_t size() const { return static_cast<int64_t>(data.size()); }
};

}  // namespace lnv
