// stream_centered (core/stream_center.h) over random shapes, centered axes and chunk sizes
// gives effective_values' centering bit for bit: as doubles (double data), and as the
// nearest float of it (float data streamed to float, as the fold writers do).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "tests/rc_default_seed.h"

#include "core/graph.h"
#include "core/stream_center.h"

namespace lnv {
namespace {

// A param of random shape (rank 1-4) with random centered axes (possibly none) and values
// that are floats when `floats` (so both element types read the same numbers).
Param gen_param(bool floats) {
  Param p;
  p.name = "w";
  const int rank = *rc::gen::inRange(1, 5).as("rank");
  p.shape = *rc::gen::container<Shape>(size_t(rank), rc::gen::inRange<int64_t>(1, 7)).as("shape");
  if (*rc::gen::arbitrary<bool>())  // the last axis only, as a norm's weight rows
    p.center_axes = {rank - 1};
  else
    for (int a = 0; a < rank; ++a)
      if (*rc::gen::arbitrary<bool>()) p.center_axes.push_back(a);
  RC_LOG() << "center_axes: " << ::testing::PrintToString(p.center_axes) << "\n";
  p.values.resize(size_t(numel(p.shape)));
  for (double& v : p.values) {
    // Mixed magnitudes, so the sums round and their order matters.
    const double x = *rc::gen::inRange(-1000000, 1000001) * std::ldexp(1.0, *rc::gen::inRange(-30, 10));
    v = floats ? double(float(x)) : x;
  }
  return p;
}

// What stream_centered<In, Out> writes for `p`, read in chunks of `chunk` values.
template <class In, class Out>
std::vector<Out> streamed(const Param& p, uint64_t chunk) {
  std::vector<Out> out;
  uint64_t calls = 0;
  auto read = [&](uint64_t done, uint64_t n, In* dst) {
    RC_ASSERT(n >= 1 && n <= chunk && done + n <= p.values.size());
    for (uint64_t i = 0; i < n; ++i) dst[i] = static_cast<In>(p.values[done + i]);
    ++calls;
  };
  // Uncentered data is appended as read (In); centered data in Out.
  auto append = [&](const auto* v, uint64_t n) { out.insert(out.end(), v, v + n); };
  stream_centered<In, Out>(p.shape, p.center_axes, p.values.size(), read, append, "w", chunk);
  const uint64_t passes = p.center_axes.empty() ? 1 : 2;  // centering reads the data twice
  RC_ASSERT(calls == passes * ((p.values.size() + chunk - 1) / chunk));
  return out;
}

// Any chunk size, or a whole number of rows (the rows-at-a-time path).
uint64_t gen_chunk(const Param& p) {
  const uint64_t n = p.values.size(), row = uint64_t(p.shape.back());
  if (*rc::gen::arbitrary<bool>()) return *rc::gen::inRange<uint64_t>(1, n + 3).as("chunk");
  return row * *rc::gen::inRange<uint64_t>(1, n / row + 2).as("chunk in rows");
}

void classify(const Param& p, uint64_t chunk) {
  const bool last = !p.center_axes.empty() && p.center_axes.back() == int64_t(p.shape.size()) - 1;
  RC_CLASSIFY(p.center_axes.empty(), "not centered");
  RC_CLASSIFY(p.center_axes.size() == 1 && last, "last axis only (rows)");
  RC_CLASSIFY(!p.center_axes.empty() && !last, "last axis not centered");
  RC_CLASSIFY(p.center_axes.size() > 1 && last, "several axes incl. the last");
  RC_CLASSIFY(chunk < p.values.size(), "several chunks");
  RC_CLASSIFY(chunk % uint64_t(p.shape.back()) != 0, "chunks split rows");
  const uint64_t row = uint64_t(p.shape.back());
  RC_CLASSIFY(p.center_axes == Axes{int64_t(p.shape.size()) - 1} && chunk >= 4 * row &&
                  p.values.size() >= 4 * row,
              "four whole rows in a chunk");
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

RC_GTEST_PROP(StreamCenterProperties, DoublesEqualEffectiveValues, ()) {
  const Param p = gen_param(false);
  const uint64_t chunk = gen_chunk(p);
  classify(p, chunk);
  RC_ASSERT(same_bits(streamed<double, double>(p, chunk), effective_values(p)));
}

RC_GTEST_PROP(StreamCenterProperties, FloatsAreTheNearestFloatOfEffectiveValues, ()) {
  const Param p = gen_param(true);
  const uint64_t chunk = gen_chunk(p);
  classify(p, chunk);
  const std::vector<float> got = streamed<float, float>(p, chunk);
  const std::vector<double> want = effective_values(p);
  RC_ASSERT(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const float w = static_cast<float>(want[i]);
    RC_ASSERT(std::memcmp(&got[i], &w, sizeof(float)) == 0);
  }
  // Float data widened to double output (save_model's F32 param into an F64 file).
  RC_ASSERT(same_bits(streamed<float, double>(p, chunk), want));
}

}  // namespace
}  // namespace lnv
