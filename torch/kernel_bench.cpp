#include "torch/kernel_bench.h"

#include <malloc.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <functional>
#include <sstream>

#include <ATen/ATen.h>

#include "torch/kernels/norm_kernels.h"

namespace lnv::torch {
namespace {

constexpr float kEps = 1e-5f;

struct Kernel {
  std::string name;
  double bytes_per_call;
  std::function<void()> run;
};

// The buffers of one shape, allocated once and reused by every call.
struct Buffers {
  at::Tensor x, residual, weight, bias, out, sum_out;

  explicit Buffers(KernelShape s) {
    const auto gen = at::make_generator<at::CPUGeneratorImpl>(12345);
    x = at::randn({s.rows, s.cols}, gen);
    residual = at::randn({s.rows, s.cols}, gen);
    weight = at::randn({s.cols}, gen) * 0.1 + 1.0;
    bias = at::randn({s.cols}, gen) * 0.1;
    out = at::zeros_like(x);  // zeros: the pages are touched before timing
    sum_out = at::zeros_like(x);
  }
};

std::vector<Kernel> kernels_for(KernelShape s, Buffers& b) {
  const int64_t M = s.rows, N = s.cols;
  const double row_bytes = double(M * N) * sizeof(float);
  const double affine_bytes = 2.0 * N * sizeof(float);
  const float* x = b.x.data_ptr<float>();
  const float* r = b.residual.data_ptr<float>();
  const float* w = b.weight.data_ptr<float>();
  const float* bi = b.bias.data_ptr<float>();
  float* out = b.out.data_ptr<float>();
  float* sum = b.sum_out.data_ptr<float>();
  return {
      {"at::layer_norm", 2 * row_bytes + affine_bytes,
       [&b, N] { at::layer_norm(b.x, {N}, b.weight, b.bias, kEps); }},
      {"our layer_norm", 2 * row_bytes + affine_bytes,
       [=] { kernels::layer_norm(x, w, bi, out, M, N, kEps); }},
      {"our rms_norm", 2 * row_bytes + affine_bytes,
       [=] { kernels::rms_norm(x, w, bi, out, M, N, kEps); }},
      {"our add+rms_norm", 4 * row_bytes + affine_bytes,
       [=] { kernels::add_rms_norm(x, r, w, bi, sum, out, M, N, kEps); }},
      {"copy", 2 * row_bytes, [=] { kernels::copy_rows(x, out, M, N); }},
  };
}

double time_per_call(const Kernel& k, int64_t calls, Clock clock) {
  const double start = now_seconds(clock);
  for (int64_t i = 0; i < calls; ++i) k.run();
  return (now_seconds(clock) - start) / double(calls);
}

// Calls per sample: after a warm-up call, the batch doubles until it lasts an eighth of
// sample_seconds (so the clock's resolution and one disturbed call do not decide), then
// is scaled to last about sample_seconds.
int64_t calls_per_sample(const Kernel& k, const KernelBenchOptions& opt) {
  time_per_call(k, 1, opt.clock);
  int64_t n = 1;
  double t = time_per_call(k, n, opt.clock);
  while (t * double(n) < opt.sample_seconds / 8 && n < (int64_t(1) << 24)) {
    n *= 2;
    t = time_per_call(k, n, opt.clock);
  }
  return std::max<int64_t>(1, int64_t(opt.sample_seconds / std::max(t, 1e-12)));
}

KernelShapeResult bench_shape(KernelShape s, const KernelBenchOptions& opt) {
  Buffers buffers(s);
  const std::vector<Kernel> ks = kernels_for(s, buffers);

  std::vector<int64_t> calls(ks.size());
  for (size_t k = 0; k < ks.size(); ++k) calls[k] = calls_per_sample(ks[k], opt);

  std::vector<std::vector<double>> samples(ks.size());
  for (int rep = 0; rep < opt.repeats; ++rep)
    for (size_t i = 0; i < ks.size(); ++i) {
      const size_t k = (i + size_t(rep)) % ks.size();  // rotate who goes first
      samples[k].push_back(time_per_call(ks[k], calls[k], opt.clock));
    }

  KernelShapeResult res;
  res.shape = s;
  for (size_t k = 0; k < ks.size(); ++k) {
    KernelResult kr;
    kr.name = ks[k].name;
    kr.bytes_per_call = ks[k].bytes_per_call;
    kr.seconds = summarize(samples[k]);
    kr.gb_per_s = kr.bytes_per_call / kr.seconds.median / 1e9;
    res.kernels.push_back(kr);
  }
  auto find = [&](const std::string& name) -> const KernelResult& {
    for (const KernelResult& kr : res.kernels)
      if (kr.name == name) return kr;
    throw std::logic_error("no kernel " + name);
  };
  const double copy = find("copy").gb_per_s;
  for (KernelResult& kr : res.kernels) kr.share_of_copy = kr.gb_per_s / copy;
  const KernelResult &rms = find("our rms_norm"), &our_ln = find("our layer_norm"),
                     &aten_ln = find("at::layer_norm"), &cp = find("copy");
  res.rms_over_our_ln = our_ln.seconds.median / rms.seconds.median;
  res.rms_over_aten_ln = aten_ln.seconds.median / rms.seconds.median;

  std::vector<double> over_ln, over_aten, share;
  for (size_t i = 0; i < rms.seconds.samples.size(); ++i) {
    const double t = rms.seconds.samples[i];
    over_ln.push_back(our_ln.seconds.samples[i] / t);
    over_aten.push_back(aten_ln.seconds.samples[i] / t);
    share.push_back(rms.bytes_per_call / t / (cp.bytes_per_call / cp.seconds.samples[i]));
  }
  res.rms_over_our_ln_rounds = summarize(over_ln);
  res.rms_over_aten_ln_rounds = summarize(over_aten);
  res.rms_share_of_copy_rounds = summarize(share);
  return res;
}

}  // namespace

std::vector<KernelShape> default_kernel_shapes() {
  return {{512, 768}, {4096, 768}, {16384, 768}, {2048, 4096}};
}

const std::vector<std::string>& kernel_names() {
  static const std::vector<std::string> names = [] {
    Buffers b({1, 8});
    std::vector<std::string> out;
    for (const Kernel& k : kernels_for({1, 8}, b)) out.push_back(k.name);
    return out;
  }();
  return names;
}

std::vector<KernelShapeResult> bench_norm_kernels(const std::vector<KernelShape>& shapes,
                                                  const KernelBenchOptions& opt) {
  std::vector<KernelShapeResult> out;
  for (const KernelShape& s : shapes) {
    out.push_back(bench_shape(s, opt));
    if (opt.progress) opt.progress(int64_t(out.size()), int64_t(shapes.size()));
  }
  return out;
}

std::string format_kernel_table(const std::vector<KernelShapeResult>& results) {
  std::ostringstream os;
  char line[256];
  for (const KernelShapeResult& r : results) {
    std::snprintf(line, sizeof line, "%lldx%lld (%.1f MiB per tensor)\n",
                  (long long)r.shape.rows, (long long)r.shape.cols,
                  double(r.shape.rows * r.shape.cols) * sizeof(float) / (1 << 20));
    os << line;
    std::snprintf(line, sizeof line, "  %-20s %10s %6s %7s %9s %7s %8s\n", "kernel",
                  "median us", "IQR", "range", "best us", "GB/s", "% copy");
    os << line;
    for (const KernelResult& k : r.kernels) {
      std::snprintf(line, sizeof line, "  %-20s %10.1f %5.0f%% %6.0f%% %9.1f %7.1f %7.0f%%\n",
                    k.name.c_str(), k.seconds.median * 1e6, 100 * k.seconds.iqr(),
                    100 * k.seconds.spread(), k.seconds.min * 1e6, k.gb_per_s,
                    100 * k.share_of_copy);
      os << line;
    }
    std::snprintf(line, sizeof line,
                  "  speedup of our rms_norm: %.2fx over our layer_norm, %.2fx over "
                  "at::layer_norm\n",
                  r.rms_over_our_ln, r.rms_over_aten_ln);
    os << line;
    const Timing &a = r.rms_over_our_ln_rounds, &b = r.rms_over_aten_ln_rounds,
                 &c = r.rms_share_of_copy_rounds;
    std::snprintf(line, sizeof line,
                  "  per round, median [q1-q3]: rms/our LN %.2fx [%.2f-%.2f], rms/at::LN "
                  "%.2fx [%.2f-%.2f], rms %.0f%% [%.0f-%.0f%%] of copy\n\n",
                  a.median, a.q1, a.q3, b.median, b.q1, b.q3, 100 * c.median, 100 * c.q1,
                  100 * c.q3);
    os << line;
  }
  return os.str();
}

void to_json(nlohmann::json& j, const KernelShapeResult& r) {
  auto rounds = [](const Timing& t) {
    return nlohmann::json{{"median", t.median}, {"q1", t.q1}, {"q3", t.q3},
                          {"min", t.min},       {"max", t.max}, {"samples", t.samples}};
  };
  j = {{"rows", r.shape.rows},
       {"cols", r.shape.cols},
       {"rms_over_our_layer_norm", r.rms_over_our_ln},
       {"rms_over_aten_layer_norm", r.rms_over_aten_ln},
       {"rms_over_our_layer_norm_rounds", rounds(r.rms_over_our_ln_rounds)},
       {"rms_over_aten_layer_norm_rounds", rounds(r.rms_over_aten_ln_rounds)},
       {"rms_share_of_copy_rounds", rounds(r.rms_share_of_copy_rounds)},
       {"kernels", nlohmann::json::array()}};
  for (const KernelResult& k : r.kernels)
    j["kernels"].push_back({{"name", k.name},
                            {"bytes_per_call", k.bytes_per_call},
                            {"median_s", k.seconds.median},
                            {"q1_s", k.seconds.q1},
                            {"q3_s", k.seconds.q3},
                            {"iqr_rel", k.seconds.iqr()},
                            {"range_rel", k.seconds.spread()},
                            {"min_s", k.seconds.min},
                            {"max_s", k.seconds.max},
                            {"samples_s", k.seconds.samples},
                            {"gb_per_s", k.gb_per_s},
                            {"share_of_copy", k.share_of_copy}});
}

void reuse_freed_memory() {
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
}

}  // namespace lnv::torch
