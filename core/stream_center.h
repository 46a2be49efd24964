// Centering a tensor while it streams from one file into another: only a chunk of it is
// in memory at a time. Used by save_model (a deferred safetensors param into the weights
// file) and by the ONNX fold writer (an external-data initializer into the side file).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/shape.h"

namespace lnv {

// Streams a row-major tensor of shape `s` (`count` values) from `read(done, n, In* dst)`
// (values done .. done+n) to `append(const T* values, n)`: the values as read when
// `center_axes` is empty, else centered over those axes in `Out` (float: the nearest float
// of the double). The centering is effective_values' arithmetic on the same doubles in the
// same order (fiber sums in row-major order, then value - sum / size), so the result equals
// centering the whole tensor in memory; it reads the data twice. `In` is the element type
// the chunks are read as (float for float32 data, widened in the arithmetic; double
// otherwise). `what` names the tensor in internal errors. `chunk_values` (at least 1) is
// how many values are in memory at a time; the result does not depend on it.
template <class In, class Out, class Read, class Append>
void stream_centered(const Shape& s, const Axes& center_axes, uint64_t count, Read&& read,
                     Append&& append, const std::string& what,
                     uint64_t chunk_values = uint64_t{1} << 17 /* 0.5 or 1 MB */) {
  LNV_INTERNAL_ASSERT(chunk_values >= 1, "streaming " + what + " in empty chunks");
  std::vector<In> chunk(std::min<uint64_t>(chunk_values, std::max<uint64_t>(count, 1)));
  auto for_each_chunk = [&](auto&& visit) {
    for (uint64_t done = 0; done < count;) {
      const uint64_t n = std::min<uint64_t>(chunk.size(), count - done);
      read(done, n, chunk.data());
      visit(chunk.data(), n);
      done += n;
    }
  };
  if (center_axes.empty()) {
    for_each_chunk([&](const In* v, uint64_t n) { append(v, n); });
    return;
  }
  const size_t rank = s.size();
  LNV_INTERNAL_ASSERT(rank >= 1, "centering " + what + " of rank 0");
  std::vector<bool> centered(rank, false);
  for (int64_t a : center_axes) {
    LNV_INTERNAL_ASSERT(a >= 0 && a < int64_t(rank), "center axis out of range");
    centered[a] = true;
  }
  int64_t group = 1;
  for (size_t a = 0; a < rank; ++a)
    if (centered[a]) group *= s[a];
  // Fiber key of a flat index: sum over uncentered axes of index * kst (as effective_values).
  std::vector<int64_t> kst(rank, 0);
  for (int64_t a = int64_t(rank) - 1, k = 1; a >= 0; --a)
    if (!centered[a]) {
      kst[a] = k;
      k *= s[a];
    }
  std::vector<double> fiber(static_cast<size_t>(numel(s) / group), 0.0);
  // Walks the values row by row (rows of the last axis): along a row the key is constant
  // (last axis centered) or steps by 1 (kst of the last axis is 1), so the inner loops are
  // plain array loops. `row` is called with (row offset in the chunk, count, key of the first).
  const int64_t row_len = s[rank - 1];
  const bool along = centered[rank - 1];
  auto walk = [&](auto&& row) {
    std::vector<int64_t> idx(rank, 0);
    int64_t row_key = 0, j = 0;
    return [&, row, idx, row_key, j](uint64_t n) mutable {
      for (uint64_t i = 0; i < n;) {
        const int64_t m = std::min<int64_t>(int64_t(n - i), row_len - j);
        row(i, m, along ? row_key : row_key + j);
        i += m;
        j += m;
        if (j < row_len) continue;
        j = 0;
        for (int64_t a = int64_t(rank) - 2; a >= 0; --a) {
          row_key += kst[a];
          if (++idx[a] < s[a]) break;
          row_key -= s[a] * kst[a];
          idx[a] = 0;
        }
      }
    };
  };
  const In* v = nullptr;
  auto sum_pass = walk([&](uint64_t at, int64_t m, int64_t key) {
    const In* x = v + at;
    if (along) {
      double acc = fiber[key];
      for (int64_t t = 0; t < m; ++t) acc += double(x[t]);
      fiber[key] = acc;
    } else {
      double* f = fiber.data() + key;
      for (int64_t t = 0; t < m; ++t) f[t] += double(x[t]);
    }
  });
  if (along && group == row_len) {
    // Each row is its own fiber (the usual embedding-table case): the sums run along the
    // rows, and four whole rows at a time keep four independent additions in flight (each
    // row's sum is still added in its own order, so the result is the same).
    uint64_t flat = 0;  // of the chunk's first value
    for_each_chunk([&](const In* x, uint64_t n) {
      const uint64_t len = static_cast<uint64_t>(row_len);
      for (uint64_t i = 0; i < n;) {
        const uint64_t row = (flat + i) / len, j = (flat + i) % len;
        if (j == 0 && i + 4 * len <= n) {
          double a0 = fiber[row], a1 = fiber[row + 1], a2 = fiber[row + 2], a3 = fiber[row + 3];
          const In *x0 = x + i, *x1 = x0 + len, *x2 = x1 + len, *x3 = x2 + len;
          for (uint64_t t = 0; t < len; ++t) {
            a0 += double(x0[t]);
            a1 += double(x1[t]);
            a2 += double(x2[t]);
            a3 += double(x3[t]);
          }
          fiber[row] = a0, fiber[row + 1] = a1, fiber[row + 2] = a2, fiber[row + 3] = a3;
          i += 4 * len;
        } else {
          const uint64_t m = std::min(n - i, len - j);
          double acc = fiber[row];
          for (uint64_t t = 0; t < m; ++t) acc += double(x[i + t]);
          fiber[row] = acc;
          i += m;
        }
      }
      flat += n;
    });
  } else {
    for_each_chunk([&](const In* values, uint64_t n) {
      v = values;
      sum_pass(n);
    });
  }
  for (double& f : fiber) f /= double(group);  // now the fiber means
  // The centered values, in the output's type (float: the nearest float of the double).
  auto center_into = [&](auto* dst) {
    return walk([&, dst](uint64_t at, int64_t m, int64_t key) {
      const In* x = v + at;
      auto* y = dst + at;
      using Y = std::remove_pointer_t<decltype(y)>;
      if (along) {
        const double mean = fiber[key];
        for (int64_t t = 0; t < m; ++t) y[t] = static_cast<Y>(double(x[t]) - mean);
      } else {
        const double* f = fiber.data() + key;
        for (int64_t t = 0; t < m; ++t) y[t] = static_cast<Y>(double(x[t]) - f[t]);
      }
    });
  };
  std::vector<Out> dst(chunk.size());
  auto pass = center_into(dst.data());
  for_each_chunk([&](const In* values, uint64_t n) {
    v = values;
    pass(n);
    append(static_cast<const Out*>(dst.data()), n);
  });
}

}  // namespace lnv

