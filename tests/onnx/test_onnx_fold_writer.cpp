// `fold MODEL.onnx -o FOLDED.onnx` (onnx/fold_writer.h) on the real exports of
// tests/data/onnx and on hand-made graphs, for each --rms-op spelling:
// (a) the written file passes ONNX's checker with full checking (check_onnx_file);
// (b) imported again, its norms are rms_norm exactly where the fold said so, and evaluated
//     exactly (128 bits) on random inputs it equals the fold as written (the centered
//     weights rounded to the file's float type) to 128-bit rounding, and the original to
//     float32 rounding of those weights (relative 1e-5 of the largest output);
// (c) everything the fold does not touch is byte-identical to the original: nodes (but
//     the inputs rewired to centered copies), initializers (but the centered ones), graph
//     inputs, outputs, value_info, metadata, doc strings, opset imports (but the ones
//     --rms-op adds).
// Exports that hold ops model.json lacks (opaque) skip (b)'s evaluation, naming the op.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include "core/analysis/fold_plan.h"
#include "core/error.h"
#include "core/eval/evaluator.h"
#include "onnx/constant_fold.h"
#include "onnx/fold_writer.h"
#include "onnx/import.h"
#include "tests/progress_steps.h"

namespace fs = std::filesystem;
namespace ox = ::onnx;
using namespace lnv::onnx_import;
using lnv::eval::Mpfr;

namespace {

const std::string kDir = std::string(LNV_SOURCE_DIR) + "/tests/data/onnx/";

fs::path temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("lnv_fold_writer_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

ox::ModelProto read_proto(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  ox::ModelProto mp;
  EXPECT_TRUE(mp.ParseFromIstream(&in)) << p;
  return mp;
}

void write_proto(const ox::ModelProto& mp, const fs::path& p) {
  std::ofstream out(p, std::ios::binary);
  ASSERT_TRUE(mp.SerializeToOstream(&out));
}

struct Folded {
  lnv::Graph original, folded;
  lnv::FoldPlan plan;
  FoldWriteSummary summary;
};

// With `deferred`, the file is written as `lnverify fold` writes it: from an import that
// left the weights in the file (the writer reads what it centers from there); `original`
// and `folded` are still the fully loaded graphs, for the checks.
Folded fold_to(const fs::path& src, const DimBindings& dims, const fs::path& out, RmsOp op,
               bool deferred = false) {
  Folded f{import_onnx(src, dims), {}, {}, {}};
  f.plan = lnv::detect_foldable(f.original, lnv::Mode::inference);
  f.folded = lnv::apply_fold(f.original, f.plan);
  FoldWriteOptions options;
  options.rms_op = op;
  options.sync = false;
  if (deferred) {
    lnv::Graph lazy = import_onnx(src, dims, /*defer_values=*/true);
    const lnv::FoldPlan plan = lnv::detect_foldable(lazy, lnv::Mode::inference);
    EXPECT_EQ(plan.fold, f.plan.fold);
    const ImportedParams params = imported_params(lazy);
    const lnv::Graph folded = lnv::apply_fold(std::move(lazy), plan);
    f.summary = write_folded_onnx(src, params, folded, plan.fold, out, options);
  } else {
    f.summary = write_folded_onnx(src, imported_params(f.original), f.folded, f.plan.fold, out, options);
  }
  return f;
}

size_t count_op(const lnv::Graph& g, lnv::Op op) {
  size_t n = 0;
  for (const auto& node : g.nodes) n += node.op == op;
  return n;
}

// The fold with every param and eps rounded to float32, as the writer stores them.
// The moved biases as the writer stores them: R0(beta) = W·beta (beta·B; beta for a
// residual's producer) joins the bias
// the reader adds (b: a linear's own, or the param of the add that alone reads the reader),
// rounded once to float. The add after the reader then adds float(b + R0) - float(b), an
// exact double, in place of R0 ("<R>.stored", kept unrounded by as_written).
void store_moved_biases(lnv::Graph& g) {
  auto values = [&](const std::string& name) {
    return lnv::effective_values(g.params[g.param_index(name)]);
  };
  for (const std::string& r : lnv::moved_bias_readers(g)) {
    const lnv::Node own = g.nodes[g.node_index(lnv::moved_bias_own(r))];
    const lnv::Node image = g.nodes[g.node_index(lnv::moved_bias_image(r))];
    const bool linear = image.op == lnv::Op::linear;
    const bool residual = image.op == lnv::Op::reshape;  // R0(beta) = beta (a residual's producer)
    const std::vector<double> beta =
        values(linear || residual ? image.inputs[0] : g.nodes[g.node_index(image.inputs[0])].inputs[0]);
    std::vector<double> term = beta;
    if (!residual) {
      const std::string wname = linear ? image.weight : image.inputs[1];
      const lnv::Shape ws = g.params[g.param_index(wname)].shape;
      const std::vector<double> w = values(wname);
      const bool out_first = linear || image.transpose_b;
      const int64_t out = out_first ? ws[0] : ws[1], in = out_first ? ws[1] : ws[0];
      term.assign(static_cast<size_t>(out), 0.0);
      for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < in; ++i) term[o] += w[out_first ? o * in + i : i * out + o] * beta[i];
    }
    const int64_t out = int64_t(term.size());
    std::vector<double> b(static_cast<size_t>(out), 0.0);
    if (own.op == lnv::Op::linear && !own.bias.empty()) {
      b = values(own.bias);
    } else {
      const int32_t ri = g.node_index(r);
      if (g.consumers[ri].size() == 1 && g.nodes[g.consumers[ri][0]].op == lnv::Op::add)
        for (const lnv::ValueRef& v : g.node_inputs[g.consumers[ri][0]])
          if (v.kind == lnv::ValueRef::Kind::param && g.params[v.index].shape == lnv::Shape{out})
            b = lnv::effective_values(g.params[v.index]);
    }
    std::vector<double> stored(static_cast<size_t>(out));
    for (int64_t o = 0; o < out; ++o) stored[o] = double(float(b[o] + term[o])) - double(float(b[o]));
    lnv::Param p;
    p.name = r + ".stored";
    p.shape = {out};
    p.values = stored;
    g.params.push_back(p);
    g.nodes[g.node_index(r)].inputs[1] = p.name;
  }
}

lnv::Graph as_written(lnv::Graph g) {
  store_moved_biases(g);
  for (lnv::Param& p : g.params) {
    p.values = lnv::effective_values(p);
    p.center_axes.clear();
    if (p.name.size() > 7 && p.name.compare(p.name.size() - 7, 7, ".stored") == 0) continue;
    for (double& v : p.values) v = double(float(v));
  }
  for (lnv::Node& n : g.nodes) n.eps = double(float(n.eps));
  g.finalize();
  return g;
}

double max_abs(const std::vector<lnv::Tensor<Mpfr>>& v) {
  double m = 0;
  for (const auto& t : v)
    for (const Mpfr& x : t.data) m = std::max(m, std::fabs(x.convert_to<double>()));
  return m;
}

double max_diff(const std::vector<lnv::Tensor<Mpfr>>& a, const std::vector<lnv::Tensor<Mpfr>>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t o = 0; o < a.size() && o < b.size(); ++o) {
    EXPECT_EQ(a[o].shape, b[o].shape);
    for (size_t i = 0; i < a[o].data.size() && i < b[o].data.size(); ++i)
      m = std::max(m, Mpfr(abs(a[o].data[i] - b[o].data[i])).convert_to<double>());
  }
  return m;
}

// (b): the re-import's norms and its exact evaluation.
void expect_same_function(const Folded& f, const fs::path& out, const DimBindings& dims) {
  const lnv::Graph again = import_onnx(out, dims);
  EXPECT_EQ(count_op(again, lnv::Op::rms_norm),
            count_op(f.original, lnv::Op::rms_norm) + f.plan.fold.size());
  EXPECT_EQ(count_op(again, lnv::Op::layer_norm),
            count_op(f.original, lnv::Op::layer_norm) - f.plan.fold.size());
  lnv::eval::set_mpfr_bits(128);
  const auto inputs = lnv::eval::random_inputs<Mpfr>(f.original, 7);
  std::vector<lnv::Tensor<Mpfr>> orig, written, read;
  try {
    orig = lnv::eval::evaluate<Mpfr>(f.original, inputs, {}).outputs;
  } catch (const lnv::NotEvaluableError& e) {
    std::cout << "  " << out.filename().string() << ": evaluation skipped: " << e.what() << "\n";
    return;
  }
  written = lnv::eval::evaluate<Mpfr>(as_written(f.folded), inputs, {}).outputs;
  read = lnv::eval::evaluate<Mpfr>(again, inputs, {}).outputs;
  const double scale = max_abs(orig);
  const double exact = max_diff(read, written), rounded = max_diff(read, orig);
  std::cout << "  " << out.filename().string() << ": |written file - fold as written| "
            << exact << ", |written file - original| " << rounded << " (largest output "
            << scale << ")\n";
  EXPECT_LE(exact, 1e-30 * scale);
  EXPECT_LE(rounded, 1e-5 * scale);
  EXPECT_GT(scale, 0);
}

std::string bytes(const google::protobuf::Message& m) { return m.SerializeAsString(); }

// (c): what the fold leaves alone is byte-identical.
void expect_untouched(const fs::path& src, const fs::path& out, const Folded& f, RmsOp op) {
  const ox::ModelProto a = read_proto(src), b = read_proto(out);
  EXPECT_EQ(a.ir_version(), b.ir_version());
  EXPECT_EQ(a.producer_name(), b.producer_name());
  EXPECT_EQ(a.producer_version(), b.producer_version());
  EXPECT_EQ(a.doc_string(), b.doc_string());
  EXPECT_EQ(a.graph().name(), b.graph().name());
  EXPECT_EQ(a.graph().doc_string(), b.graph().doc_string());
  ASSERT_EQ(a.metadata_props_size(), b.metadata_props_size());
  for (int k = 0; k < a.metadata_props_size(); ++k)
    EXPECT_EQ(bytes(a.metadata_props(k)), bytes(b.metadata_props(k)));
  ASSERT_EQ(a.graph().input_size(), b.graph().input_size());
  for (int k = 0; k < a.graph().input_size(); ++k)
    EXPECT_EQ(bytes(a.graph().input(k)), bytes(b.graph().input(k)));
  ASSERT_EQ(a.graph().output_size(), b.graph().output_size());
  for (int k = 0; k < a.graph().output_size(); ++k)
    EXPECT_EQ(bytes(a.graph().output(k)), bytes(b.graph().output(k)));
  ASSERT_LE(a.graph().value_info_size(), b.graph().value_info_size());
  for (int k = 0; k < a.graph().value_info_size(); ++k)
    EXPECT_EQ(bytes(a.graph().value_info(k)), bytes(b.graph().value_info(k)));
  // Opset imports: the same, but the default raised (onnx23).
  std::map<std::string, int64_t> oa, ob;
  for (const auto& o : a.opset_import()) oa[o.domain()] = o.version();
  for (const auto& o : b.opset_import()) ob[o.domain()] = o.version();
  if (op == RmsOp::onnx23 && oa[""] < 23) oa[""] = 23;
  EXPECT_EQ(oa, ob);

  // Nodes: the norms' nodes gone, every other node as it was, in the same order; an input
  // may differ only where it now reads a new ".centered" initializer.
  std::set<std::string> removed;
  const auto norms = nlohmann::json::parse(f.original.meta)["onnx"]["norms"];
  for (const std::string& n : f.plan.fold)
    for (const auto& node : norms.at(n)) removed.insert(node.get<std::string>());
  std::set<std::string> old_inits, new_inits;
  for (const auto& t : a.graph().initializer()) old_inits.insert(t.name());
  for (const auto& t : b.graph().initializer())
    if (!old_inits.count(t.name())) new_inits.insert(t.name());
  std::map<std::string, const ox::NodeProto*> by_name;
  std::map<std::string, int> position;
  for (int k = 0; k < b.graph().node_size(); ++k) {
    by_name[b.graph().node(k).name()] = &b.graph().node(k);
    position[b.graph().node(k).name()] = k;
  }
  size_t kept = 0, rewired = 0;
  int last = -1;
  for (const auto& n : a.graph().node()) {
    if (removed.count(n.name())) {
      EXPECT_FALSE(by_name.count(n.name())) << n.name();
      continue;
    }
    ++kept;
    ASSERT_TRUE(by_name.count(n.name())) << n.name();
    ox::NodeProto m = *by_name.at(n.name());
    const int at = position.at(n.name());
    EXPECT_GT(at, last) << n.name() << ": order changed";
    last = at;
    for (int k = 0; k < m.input_size() && k < n.input_size(); ++k)
      if (m.input(k) != n.input(k) && new_inits.count(m.input(k)) &&
          m.input(k).rfind(n.input(k) + ".centered", 0) == 0) {
        m.set_input(k, n.input(k));
        ++rewired;
      }
    if (op == RmsOp::onnx23 && oa[""] != 0 && n.op_type().rfind("Reduce", 0) == 0 &&
        m.input_size() == n.input_size() + 1) {
      ox::NodeProto moved = n;  // axes moved from the attribute into an input (opset 18)
      for (int k = 0; k < moved.attribute_size(); ++k)
        if (moved.attribute(k).name() == "axes") moved.mutable_attribute()->DeleteSubrange(k, 1);
      moved.add_input(m.input(m.input_size() - 1));
      EXPECT_EQ(bytes(moved), bytes(m)) << n.name();
      continue;
    }
    EXPECT_EQ(bytes(n), bytes(m)) << n.name();
  }
  std::cout << "  " << out.filename().string() << ": " << kept << " nodes kept, "
            << b.graph().node_size() - int(kept) << " new, " << removed.size() << " removed, "
            << rewired << " inputs rewired\n";
  EXPECT_FALSE(removed.empty() && !f.plan.fold.empty());

  // Initializers: each one as it was (name, order, bytes), but the ones centered in place
  // (same name, type and dims, new data) and the ones only the removed nodes read.
  std::set<std::string> read_by_kept;
  for (const auto& n : a.graph().node())
    if (!removed.count(n.name()))
      for (const auto& i : n.input()) read_by_kept.insert(i);
  std::map<std::string, int> at;
  for (int k = 0; k < b.graph().initializer_size(); ++k) at[b.graph().initializer(k).name()] = k;
  size_t changed = 0, dropped = 0;
  int previous = -1;
  for (const auto& t : a.graph().initializer()) {
    if (!at.count(t.name())) {
      EXPECT_FALSE(read_by_kept.count(t.name())) << t.name() << " dropped but still read";
      ++dropped;
      continue;
    }
    const auto& u = b.graph().initializer(at.at(t.name()));
    EXPECT_GT(at.at(t.name()), previous) << t.name() << ": order changed";
    previous = at.at(t.name());
    EXPECT_EQ(t.data_type(), u.data_type());
    EXPECT_TRUE(std::equal(t.dims().begin(), t.dims().end(), u.dims().begin(), u.dims().end()));
    if (bytes(t) != bytes(u)) ++changed;
  }
  EXPECT_EQ(dropped, f.summary.dropped);
  EXPECT_EQ(changed, f.summary.centered_in_place + f.summary.moved_in_place);
}

struct Export {
  std::string file;
  DimBindings dims;
};

const std::vector<Export>& exports() {
  static const std::vector<Export> list = {
      {"mlp_tiny_opset17.onnx", {{"batch", 2}}},
      {"mlp_tiny_opset14.onnx", {{"batch", 2}}},
      {"gpt2_tiny_opset17.onnx", {{"batch", 2}, {"seq", 8}}},
      {"gpt2_tiny_opset14.onnx", {{"batch", 2}, {"seq", 8}}},
      {"gpt2_tiny_opset11.onnx", {{"batch", 2}, {"seq", 8}}},
      {"bert_tiny_opset17.onnx", {{"batch", 2}, {"seq", 8}}},
      {"bert_tiny_opset14.onnx", {{"batch", 2}, {"seq", 8}}},
      {"bert_tiny_opset9.onnx", {{"batch", 2}, {"seq", 8}}},
      {"vit_tiny_opset17.onnx", {{"batch", 2}}},
      {"vit_tiny_opset14.onnx", {{"batch", 2}}},
      {"swin_tiny_opset17.onnx", {{"batch", 2}}},
      {"swin_tiny_opset14.onnx", {{"batch", 2}}},
      {"convnext_tiny_opset17.onnx", {{"batch", 2}}},
      {"convnext_tiny_opset14.onnx", {{"batch", 2}}},
      {"prenorm_lm_tiny_opset17.onnx", {{"batch", 2}, {"seq", 8}}},
      {"prenorm_lm_tiny_opset14.onnx", {{"batch", 2}, {"seq", 8}}},
  };
  return list;
}

const char* op_name(RmsOp op) {
  return op == RmsOp::decomposed ? "decomposed" : op == RmsOp::ort ? "ort" : "onnx23";
}

class RealExports : public testing::TestWithParam<std::tuple<Export, RmsOp>> {};

TEST_P(RealExports, FoldWritesACheckedEquivalentOnnxFile) {
  const auto& [e, op] = GetParam();
  const fs::path src = kDir + e.file;
  const fs::path out = temp_dir(e.file + op_name(op)) / ("folded_" + e.file);
  const bool old_softmax = e.file.find("opset9") != std::string::npos ||
                           e.file.find("opset11") != std::string::npos;
  if (op == RmsOp::onnx23 && old_softmax) {
    // Raising opset 9/11 to 23 would change Softmax (and Split, Squeeze, ... signatures).
    try {
      fold_to(src, e.dims, out, op);
      ADD_FAILURE() << "onnx23 on " << e.file << " was written";
    } catch (const lnv::ModelError& err) {
      EXPECT_NE(std::string(err.what()).find("Softmax"), std::string::npos) << err.what();
    }
    EXPECT_FALSE(fs::exists(out));
    return;
  }
  const Folded f = fold_to(src, e.dims, out, op);
  EXPECT_EQ(f.summary.norms, f.plan.fold.size());
  EXPECT_GT(f.summary.norms, 0u);
  EXPECT_NO_THROW(check_onnx_file(out));  // (a)
  expect_same_function(f, out, e.dims);   // (b)
  expect_untouched(src, out, f, op);      // (c)
}

INSTANTIATE_TEST_SUITE_P(
    AllSpellings, RealExports,
    testing::Combine(testing::ValuesIn(exports()),
                     testing::Values(RmsOp::decomposed, RmsOp::ort, RmsOp::onnx23)),
    [](const testing::TestParamInfo<std::tuple<Export, RmsOp>>& info) {
      const std::string& f = std::get<0>(info.param).file;
      return f.substr(0, f.find('.')) + "_" + op_name(std::get<1>(info.param));
    });

// --- training mode ----------------------------------------------------------------------
// `fold --mode training`: the training plan written with its centering computed in the
// graph. (a) the file passes the full checker; (b) every initializer of the input is in the
// output with the same bytes, or was read only by the replaced norms' nodes and is none of
// the fold's params, and the only new initializers are constants of at most one value
// (eps, axes); every kept node is as it was but for inputs rewired to "<v>.centered" /
// "<v>.zero" values that new nodes compute; (c) re-imported, it evaluates exactly (128
// bits) to the original's outputs and to its gradients with respect to every param both
// share by name (equal functions of the same parameters).

Folded fold_training_to(const fs::path& src, const DimBindings& dims, const fs::path& out, RmsOp op) {
  Folded f{import_onnx(src, dims), {}, {}, {}};
  f.plan = lnv::detect_foldable(f.original, lnv::Mode::training);
  lnv::FoldPlan as_stored = f.plan;
  as_stored.mode = lnv::Mode::inference;
  f.folded = lnv::apply_fold(f.original, as_stored);
  FoldWriteOptions options;
  options.rms_op = op;
  options.mode = lnv::Mode::training;
  options.sync = false;
  f.summary = write_folded_onnx(src, imported_params(f.original), f.folded, f.plan.fold, out, options);
  return f;
}

void expect_parameters_kept(const fs::path& src, const fs::path& out, const Folded& f, RmsOp op) {
  const ox::ModelProto a = read_proto(src), b = read_proto(out);
  std::set<std::string> removed;
  const auto meta = nlohmann::json::parse(f.original.meta)["onnx"];
  for (const std::string& n : f.plan.fold)
    for (const auto& node : meta["norms"].at(n)) removed.insert(node.get<std::string>());
  std::set<std::string> params;  // the fold's params, as the file names them
  for (const lnv::Param& p : f.folded.params)
    params.insert(meta["renamed"].contains(p.name) ? meta["renamed"][p.name].get<std::string>() : p.name);
  std::set<std::string> read_by_kept;
  for (const auto& n : a.graph().node())
    if (!removed.count(n.name()))
      for (const auto& i : n.input()) read_by_kept.insert(i);
  std::map<std::string, const ox::TensorProto*> in_b;
  for (const auto& t : b.graph().initializer()) in_b[t.name()] = &t;
  size_t same = 0;
  for (const auto& t : a.graph().initializer()) {
    auto it = in_b.find(t.name());
    if (it == in_b.end()) {
      EXPECT_FALSE(read_by_kept.count(t.name())) << t.name() << " dropped but still read";
      EXPECT_FALSE(params.count(t.name())) << t.name() << ": a parameter dropped";
      continue;
    }
    EXPECT_EQ(bytes(t), bytes(*it->second)) << t.name() << " changed";
    same += bytes(t) == bytes(*it->second);
    in_b.erase(it);
  }
  for (const auto& [name, t] : in_b) {
    int64_t n = 1;
    for (int64_t d : t->dims()) n *= d;
    EXPECT_LE(n, 8) << name << ": a new initializer holds more than a constant";  // axes
    if (t->data_type() == ox::TensorProto::FLOAT || t->data_type() == ox::TensorProto::DOUBLE)
      EXPECT_EQ(n, 1) << name;  // eps
  }
  std::map<std::string, const ox::NodeProto*> by_name;
  std::set<std::string> computed;
  std::map<std::string, std::string> own_of;  // y -> y' of an Add(y', beta) after a residual's producer
  for (const auto& n : b.graph().node()) {
    by_name[n.name()] = &n;
    if (n.name().find("/center/") != std::string::npos || n.name().find("/zero/") != std::string::npos ||
        n.name().find("/moved_bias/") != std::string::npos)
      computed.insert(n.output().begin(), n.output().end());
    if (n.name().find("/moved_bias/") != std::string::npos && n.op_type() == "Add")
      own_of[n.output(0)] = n.input(0);
  }
  size_t rewired = 0;
  for (const auto& n : a.graph().node()) {
    if (removed.count(n.name())) continue;
    ASSERT_TRUE(by_name.count(n.name())) << n.name();
    ox::NodeProto m = *by_name.at(n.name());
    // A node whose output a moved bias' Add follows writes y' and the Add y.
    if (n.output_size() > 0 && m.output_size() > 0 && m.output(0) != n.output(0) &&
        own_of.count(n.output(0)) && own_of.at(n.output(0)) == m.output(0)) {
      m.set_output(0, n.output(0));
      ++rewired;
    }
    for (int k = 0; k < m.input_size() && k < n.input_size(); ++k)
      if (m.input(k) != n.input(k) && computed.count(m.input(k))) {
        m.set_input(k, n.input(k));
        ++rewired;
      }
    ox::NodeProto expected = n;
    if (op == RmsOp::onnx23 && n.op_type().rfind("Reduce", 0) == 0 &&
        m.input_size() == n.input_size() + 1) {  // axes moved into an input (opset 18)
      for (int k = 0; k < expected.attribute_size(); ++k)
        if (expected.attribute(k).name() == "axes") expected.mutable_attribute()->DeleteSubrange(k, 1);
      expected.add_input(m.input(m.input_size() - 1));
    }
    EXPECT_EQ(bytes(expected), bytes(m)) << n.name();
  }
  std::cout << "  " << out.filename().string() << ": " << same << " initializers byte-identical, "
            << f.summary.centered_in_graph << " values centered in the graph, " << rewired
            << " inputs rewired\n";
  EXPECT_GT(f.summary.centered_in_graph, 0u);
  EXPECT_EQ(f.summary.centered_in_place, 0u);
}

// `rms_read_back`: each folded norm imports again as an rms_norm (false where centered rows
// feed the RMSNorm directly: Sub(e, ReduceMean(e)) then an RMSNorm is LayerNorm's spelling).
void expect_same_training_function(const Folded& f, const fs::path& out, const DimBindings& dims,
                                   bool rms_read_back = true) {
  const lnv::Graph again = import_onnx(out, dims);
  if (rms_read_back)
    EXPECT_EQ(count_op(again, lnv::Op::rms_norm),
              count_op(f.original, lnv::Op::rms_norm) + f.plan.fold.size());
  lnv::eval::set_mpfr_bits(128);
  const lnv::eval::RunOptions ro{lnv::Mode::training, 7};
  const auto inputs = lnv::eval::random_inputs<Mpfr>(f.original, 7);
  lnv::eval::Evaluation<Mpfr> ea, eb;
  try {
    ea = lnv::eval::evaluate<Mpfr>(f.original, inputs, ro);
    eb = lnv::eval::evaluate<Mpfr>(again, inputs, ro);
  } catch (const lnv::NotEvaluableError& e) {
    std::cout << "  " << out.filename().string() << ": evaluation skipped: " << e.what() << "\n";
    return;
  }
  const double scale = max_abs(ea.outputs);
  EXPECT_LE(max_diff(ea.outputs, eb.outputs), 1e-30 * scale);
  // One loss: the original's cotangents (graph outputs pair by position, one file's order).
  const auto r = lnv::eval::loss_cotangents<Mpfr>(f.original, 7);
  const auto ga = lnv::eval::gradients(f.original, ea, ro, r);
  const auto gb = lnv::eval::gradients(again, eb, ro, r);
  size_t shared = 0;
  for (size_t i = 0; i < f.original.params.size(); ++i) {
    const std::string& name = f.original.params[i].name;
    if (!again.has(name) || again.ref(name).kind != lnv::ValueRef::Kind::param) continue;
    ++shared;
    const double d = max_diff({ga.params[i]}, {gb.params[again.ref(name).index]});
    EXPECT_LE(d, 1e-30 * std::max(1.0, max_abs({ga.params[i]}))) << "gradient of " << name;
  }
  std::cout << "  " << out.filename().string() << ": outputs and the gradients of " << shared
            << " shared params equal at 128 bits\n";
  EXPECT_GT(shared, 0u);
}

class TrainingFolds : public testing::TestWithParam<std::tuple<Export, RmsOp>> {};

TEST_P(TrainingFolds, KeepEveryInitializerAndTheFunctionOfTheParameters) {
  const auto& [e, op] = GetParam();
  const fs::path src = kDir + e.file;
  const fs::path out = temp_dir("train_" + e.file + op_name(op)) / ("trained_" + e.file);
  const bool old_softmax = e.file.find("opset9") != std::string::npos ||
                           e.file.find("opset11") != std::string::npos;
  if (op == RmsOp::onnx23 && old_softmax) {
    EXPECT_THROW(fold_training_to(src, e.dims, out, op), lnv::ModelError);
    EXPECT_FALSE(fs::exists(out));
    return;
  }
  const Folded f = fold_training_to(src, e.dims, out, op);
  EXPECT_EQ(f.summary.norms, f.plan.fold.size());
  EXPECT_GT(f.summary.norms, 0u);
  EXPECT_NO_THROW(check_onnx_file(out));       // (a)
  expect_parameters_kept(src, out, f, op);     // (b)
  expect_same_training_function(f, out, e.dims);  // (c)
}

INSTANTIATE_TEST_SUITE_P(
    AllSpellings, TrainingFolds,
    testing::Combine(testing::ValuesIn(exports()),
                     testing::Values(RmsOp::decomposed, RmsOp::ort, RmsOp::onnx23)),
    [](const testing::TestParamInfo<std::tuple<Export, RmsOp>>& info) {
      const std::string& f = std::get<0>(info.param).file;
      return f.substr(0, f.find('.')) + "_" + op_name(std::get<1>(info.param));
    });

// --- hand-made graphs -------------------------------------------------------------------

ox::TensorProto float_tensor(const std::string& name, std::vector<int64_t> dims, uint32_t seed) {
  ox::TensorProto t;
  t.set_name(name);
  t.set_data_type(ox::TensorProto::FLOAT);
  int64_t n = 1;
  for (int64_t d : dims) {
    t.add_dims(d);
    n *= d;
  }
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::string raw(size_t(n) * 4, '\0');
  for (int64_t k = 0; k < n; ++k) {
    const float v = u(rng);
    std::memcpy(raw.data() + 4 * k, &v, 4);
  }
  t.set_raw_data(raw);
  return t;
}

void add_value(google::protobuf::RepeatedPtrField<ox::ValueInfoProto>* list, const std::string& name,
               int32_t type, std::vector<int64_t> dims) {
  auto* v = list->Add();
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(type);
  for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
}

ox::NodeProto* add_node(ox::GraphProto* g, const std::string& name, const std::string& op,
                        std::vector<std::string> in, std::vector<std::string> out) {
  auto* n = g->add_node();
  n->set_name(name);
  n->set_op_type(op);
  for (auto& s : in) n->add_input(s);
  for (auto& s : out) n->add_output(s);
  return n;
}

ox::ModelProto base_model() {
  ox::ModelProto mp;
  mp.set_ir_version(8);
  mp.set_producer_name("lnverify-test");
  auto* o = mp.add_opset_import();
  o->set_version(17);
  auto* kv = mp.add_metadata_props();
  kv->set_key("purpose");
  kv->set_value("fold writer test");
  return mp;
}

const ox::NodeProto& node_named(const ox::ModelProto& mp, const std::string& name) {
  for (const auto& n : mp.graph().node())
    if (n.name() == name) return n;
  throw std::runtime_error("no node " + name);
}

const ox::TensorProto* initializer_named(const ox::ModelProto& mp, const std::string& name) {
  for (const auto& t : mp.graph().initializer())
    if (t.name() == name) return &t;
  return nullptr;
}

// A tied embedding: the token table W [5, 4] feeds the lookup (Gather, whose rows the fold
// centers) and the output head (Gemm with transB, which must keep W).
ox::ModelProto tied_model() {
  ox::ModelProto mp = base_model();
  auto* g = mp.mutable_graph();
  g->set_name("tied");
  add_value(g->mutable_input(), "ids", ox::TensorProto::INT64, {2, 3});
  *g->add_initializer() = float_tensor("W", {5, 4}, 1);
  *g->add_initializer() = float_tensor("ln.scale", {4}, 2);
  *g->add_initializer() = float_tensor("ln.bias", {4}, 3);
  ox::TensorProto shape;
  shape.set_name("shape");
  shape.set_data_type(ox::TensorProto::INT64);
  shape.add_dims(2);
  shape.add_int64_data(6);
  shape.add_int64_data(4);
  *g->add_initializer() = shape;
  add_node(g, "embed", "Gather", {"W", "ids"}, {"e"});
  add_node(g, "ln", "LayerNormalization", {"e", "ln.scale", "ln.bias"}, {"y"});
  add_node(g, "flat", "Reshape", {"y", "shape"}, {"y2"});
  auto* head = add_node(g, "head", "Gemm", {"y2", "W"}, {"logits"});
  auto* tb = head->add_attribute();
  tb->set_name("transB");
  tb->set_type(ox::AttributeProto::INT);
  tb->set_i(1);
  add_value(g->mutable_output(), "logits", ox::TensorProto::FLOAT, {6, 5});
  return mp;
}

TEST(HandMade, TiedEmbeddingGetsAnUntiedCenteredCopy) {
  const ox::ModelProto mp = tied_model();
  const fs::path dir = temp_dir("tied");
  write_proto(mp, dir / "tied.onnx");
  for (RmsOp op : {RmsOp::decomposed, RmsOp::ort, RmsOp::onnx23}) {
    const fs::path out = dir / (std::string("tied_") + op_name(op) + ".onnx");
    const Folded f = fold_to(dir / "tied.onnx", {}, out, op, /*deferred=*/op == RmsOp::ort);
    ASSERT_EQ(f.plan.fold.size(), 1u);
    EXPECT_NO_THROW(check_onnx_file(out));
    const ox::ModelProto b = read_proto(out);
    EXPECT_EQ(node_named(b, "head").input(1), "W");
    EXPECT_EQ(node_named(b, "embed").input(0), "W.centered");
    EXPECT_EQ(bytes(*initializer_named(b, "W")), bytes(*initializer_named(mp, "W")));
    ASSERT_NE(initializer_named(b, "W.centered"), nullptr);
    EXPECT_EQ(f.summary.centered_in_place, 0u);
    expect_same_function(f, out, {});
    expect_untouched(dir / "tied.onnx", out, f, op);
  }
}

// In training the tie stays: the Gather reads W, its rows are centered after it, and the
// head reads W; no initializer changes.
TEST(HandMade, TrainingFoldCentersTheTiedEmbeddingsRowsAfterTheLookup) {
  ox::ModelProto mp = tied_model();
  // epsilon stated: the importer's default for an absent one is 1e-5 in double, while the
  // written RMSNorm holds the float32 attribute value
  for (auto& n : *mp.mutable_graph()->mutable_node())
    if (n.name() == "ln") {
      auto* e = n.add_attribute();
      e->set_name("epsilon");
      e->set_type(ox::AttributeProto::FLOAT);
      e->set_f(1e-5f);
    }
  const fs::path dir = temp_dir("tied_training");
  write_proto(mp, dir / "tied.onnx");
  for (RmsOp op : {RmsOp::decomposed, RmsOp::ort, RmsOp::onnx23}) {
    const fs::path out = dir / (std::string("tied_") + op_name(op) + ".onnx");
    const Folded f = fold_training_to(dir / "tied.onnx", {}, out, op);
    ASSERT_EQ(f.plan.fold.size(), 1u);
    EXPECT_NO_THROW(check_onnx_file(out));
    const ox::ModelProto b = read_proto(out);
    EXPECT_EQ(node_named(b, "embed").input(0), "W");
    EXPECT_EQ(node_named(b, "head").input(1), "W");
    EXPECT_EQ(initializer_named(b, "W.centered"), nullptr);
    EXPECT_EQ(node_named(b, "e/center/Sub").input(0), "e");
    bool rms_reads_centered = false;
    for (const auto& n : b.graph().node())
      if (n.name().rfind("ln/RMS/", 0) == 0)
        for (const auto& in : n.input()) rms_reads_centered = rms_reads_centered || in == "e.centered";
    EXPECT_TRUE(rms_reads_centered);
    expect_parameters_kept(dir / "tied.onnx", out, f, op);
    expect_same_training_function(f, out, {}, op != RmsOp::decomposed);
  }
}

// A norm scale stored as [1, C] (the importer's norm weight is [C]): the inference fold
// stores a [C] copy; the training fold reads the stored one through a Reshape.
TEST(HandMade, TrainingFoldReshapesANormScaleStoredWithOtherDims) {
  ox::ModelProto mp = base_model();
  mp.mutable_opset_import(0)->set_version(13);
  auto* g = mp.mutable_graph();
  g->set_name("wide_scale");
  add_value(g->mutable_input(), "x", ox::TensorProto::FLOAT, {2, 8});
  *g->add_initializer() = float_tensor("w", {8, 4}, 7);
  *g->add_initializer() = float_tensor("g", {1, 4}, 8);
  *g->add_initializer() = float_tensor("b", {4}, 9);
  ox::TensorProto two = float_tensor("two", {}, 0), eps = float_tensor("eps", {}, 0);
  const float two_f = 2.0f, eps_f = 1e-5f;
  two.set_raw_data(std::string(reinterpret_cast<const char*>(&two_f), 4));
  eps.set_raw_data(std::string(reinterpret_cast<const char*>(&eps_f), 4));
  *g->add_initializer() = two;
  *g->add_initializer() = eps;
  auto reduce_mean = [&](const std::string& name, const std::string& in, const std::string& out) {
    auto* axes = add_node(g, name, "ReduceMean", {in}, {out})->add_attribute();
    axes->set_name("axes");
    axes->set_type(ox::AttributeProto::INTS);
    axes->add_ints(-1);
  };
  add_node(g, "proj", "MatMul", {"x", "w"}, {"a"});
  reduce_mean("ln/mean", "a", "m");
  add_node(g, "ln/sub", "Sub", {"a", "m"}, {"d"});
  add_node(g, "ln/pow", "Pow", {"d", "two"}, {"d2"});
  reduce_mean("ln/var", "d2", "v");
  add_node(g, "ln/add_eps", "Add", {"v", "eps"}, {"ve"});
  add_node(g, "ln/sqrt", "Sqrt", {"ve"}, {"s"});
  add_node(g, "ln/div", "Div", {"d", "s"}, {"n"});
  add_node(g, "ln/mul", "Mul", {"n", "g"}, {"ng"});
  add_node(g, "ln/add", "Add", {"ng", "b"}, {"y"});
  add_value(g->mutable_output(), "y", ox::TensorProto::FLOAT, {2, 4});
  const fs::path dir = temp_dir("wide_scale");
  write_proto(mp, dir / "wide.onnx");
  for (RmsOp op : {RmsOp::decomposed, RmsOp::ort, RmsOp::onnx23}) {
    const fs::path out = dir / (std::string("wide_") + op_name(op) + ".onnx");
    const Folded f = fold_training_to(dir / "wide.onnx", {}, out, op);
    ASSERT_EQ(f.plan.fold.size(), 1u);
    EXPECT_NO_THROW(check_onnx_file(out));
    const ox::ModelProto b = read_proto(out);
    bool reshaped = false;
    for (const auto& n : b.graph().node())
      reshaped = reshaped || (n.op_type() == "Reshape" && n.input(0) == "g");
    EXPECT_TRUE(reshaped) << op_name(op);
    expect_parameters_kept(dir / "wide.onnx", out, f, op);
    expect_same_training_function(f, out, {});
  }
}

// A per-token bias c [3, 1] added before a LayerNorm over the features is broadcast along
// the norm's axis: the fold removes it. In training it stays a parameter read through
// "c.zero" = Sub(c, ReduceMean(c, [1])), which is zero with gradient zero.
TEST(HandMade, TrainingFoldZeroesARemovedTermInTheGraph) {
  ox::ModelProto mp = base_model();
  auto* g = mp.mutable_graph();
  g->set_name("removed");
  add_value(g->mutable_input(), "x", ox::TensorProto::FLOAT, {2, 3, 4});
  *g->add_initializer() = float_tensor("w", {4, 4}, 10);
  *g->add_initializer() = float_tensor("c", {3, 1}, 11);
  *g->add_initializer() = float_tensor("ln.scale", {4}, 12);
  *g->add_initializer() = float_tensor("ln.bias", {4}, 13);
  add_node(g, "proj", "MatMul", {"x", "w"}, {"a"});
  add_node(g, "shift", "Add", {"a", "c"}, {"s"});
  auto* ln = add_node(g, "ln", "LayerNormalization", {"s", "ln.scale", "ln.bias"}, {"y"});
  auto* e = ln->add_attribute();
  e->set_name("epsilon");
  e->set_type(ox::AttributeProto::FLOAT);
  e->set_f(1e-5f);
  add_value(g->mutable_output(), "y", ox::TensorProto::FLOAT, {2, 3, 4});
  const fs::path dir = temp_dir("removed");
  write_proto(mp, dir / "removed.onnx");
  const fs::path out = dir / "removed_training.onnx";
  const Folded f = fold_training_to(dir / "removed.onnx", {}, out, RmsOp::decomposed);
  ASSERT_EQ(f.plan.fold.size(), 1u);
  bool removed_term = false;
  for (const auto& t : f.plan.center) removed_term = removed_term || (t.param == "c" && t.remove);
  ASSERT_TRUE(removed_term) << "the plan removes c";
  EXPECT_NO_THROW(check_onnx_file(out));
  const ox::ModelProto b = read_proto(out);
  EXPECT_EQ(node_named(b, "shift").input(1), "c.zero");
  EXPECT_EQ(node_named(b, "c/zero/Sub").input(0), "c");
  expect_parameters_kept(dir / "removed.onnx", out, f, RmsOp::decomposed);
  expect_same_training_function(f, out, {});
}

// An initializer shared by two MatMuls (an exporter deduplicating equal tensors): the one
// feeding the LayerNorm is centered, the other keeps the original.
TEST(HandMade, DeduplicatedInitializerIsSplit) {
  ox::ModelProto mp = base_model();
  auto* g = mp.mutable_graph();
  g->set_name("dedup");
  add_value(g->mutable_input(), "x", ox::TensorProto::FLOAT, {2, 4});
  *g->add_initializer() = float_tensor("Wd", {4, 4}, 4);
  *g->add_initializer() = float_tensor("ln.scale", {4}, 5);
  *g->add_initializer() = float_tensor("ln.bias", {4}, 6);
  add_node(g, "proj_a", "MatMul", {"x", "Wd"}, {"a"});
  add_node(g, "ln", "LayerNormalization", {"a", "ln.scale", "ln.bias"}, {"y"});
  add_node(g, "proj_c", "MatMul", {"x", "Wd"}, {"c"});
  add_value(g->mutable_output(), "y", ox::TensorProto::FLOAT, {2, 4});
  add_value(g->mutable_output(), "c", ox::TensorProto::FLOAT, {2, 4});
  const fs::path dir = temp_dir("dedup");
  write_proto(mp, dir / "dedup.onnx");
  const fs::path out = dir / "dedup_folded.onnx";
  const Folded f = fold_to(dir / "dedup.onnx", {}, out, RmsOp::decomposed);
  ASSERT_EQ(f.plan.fold.size(), 1u);
  EXPECT_NO_THROW(check_onnx_file(out));
  const ox::ModelProto b = read_proto(out);
  EXPECT_EQ(node_named(b, "proj_a").input(1), "Wd.centered");
  EXPECT_EQ(node_named(b, "proj_c").input(1), "Wd");
  EXPECT_EQ(bytes(*initializer_named(b, "Wd")), bytes(*initializer_named(mp, "Wd")));
  expect_same_function(f, out, {});
  expect_untouched(dir / "dedup.onnx", out, f, RmsOp::decomposed);
}

// mlp_tiny_opset17 as dir/mlp.onnx with its initializers of 64 bytes or more in
// dir/mlp.bin; returns that file's bytes.
std::string write_external_mlp(const fs::path& dir) {
  ox::ModelProto mp = read_proto(kDir + "mlp_tiny_opset17.onnx");
  std::string data;
  for (auto& t : *mp.mutable_graph()->mutable_initializer()) {
    if (!t.has_raw_data() || t.raw_data().size() < 64) continue;
    const size_t offset = data.size();
    data += t.raw_data();
    t.clear_raw_data();
    t.set_data_location(ox::TensorProto::EXTERNAL);
    for (const auto& [k, v] : std::vector<std::pair<std::string, std::string>>{
             {"location", "mlp.bin"}, {"offset", std::to_string(offset)},
             {"length", std::to_string(data.size() - offset)}}) {
      auto* kv = t.add_external_data();
      kv->set_key(k);
      kv->set_value(v);
    }
  }
  EXPECT_FALSE(data.empty());
  std::ofstream(dir / "mlp.bin", std::ios::binary) << data;
  write_proto(mp, dir / "mlp.onnx");
  return data;
}

// External data: untouched initializers keep pointing at the input's data file (beside
// the input) or at a byte-identical copy of it (elsewhere); centered ones go to
// FOLDED.onnx.data, streamed from the input's data file (the values are checked exactly by
// expect_same_function), from a fully loaded import and from one that left the weights in
// the file, as the CLI does.
TEST(HandMade, ExternalDataStaysAndCenteredTensorsGoToTheSideFile) {
  const fs::path dir = temp_dir("external");
  const std::string data = write_external_mlp(dir);
  ASSERT_FALSE(data.empty());
  const DimBindings dims{{"batch", 2}};
  for (const auto& [out, deferred] : std::vector<std::pair<fs::path, bool>>{
           {dir / "beside.onnx", false}, {dir / "elsewhere" / "away.onnx", false},
           {dir / "lazy" / "away.onnx", true}}) {
    fs::create_directories(out.parent_path());
    const Folded f = fold_to(dir / "mlp.onnx", dims, out, RmsOp::decomposed, deferred);
    EXPECT_NO_THROW(check_onnx_file(out));
    EXPECT_EQ(f.summary.side_file, out.string() + ".data");
    EXPECT_TRUE(fs::exists(out.string() + ".data"));
    const ox::ModelProto b = read_proto(out);
    size_t to_side = 0, kept = 0;
    for (const auto& t : b.graph().initializer()) {
      if (t.data_location() != ox::TensorProto::EXTERNAL) continue;
      for (const auto& kv : t.external_data())
        if (kv.key() == "location") (kv.value() == "mlp.bin" ? kept : to_side) += 1;
    }
    EXPECT_GT(to_side, 0u);  // the centered weights that were external
    EXPECT_LE(to_side, f.summary.centered_in_place);
    EXPECT_GT(kept, 0u);
    std::ifstream copy(out.parent_path() / "mlp.bin", std::ios::binary);
    const std::string got((std::istreambuf_iterator<char>(copy)), std::istreambuf_iterator<char>());
    EXPECT_EQ(got, data);
    EXPECT_EQ(f.summary.copied_files.size(), out.parent_path() == dir ? 0u : 1u);
    expect_same_function(f, out, dims);
    expect_untouched(dir / "mlp.onnx", out, f, RmsOp::decomposed);
  }
}

using lnv::test::Step;
using lnv::test::check_steps;

// The importer and the writer tell their steps, counted by what they walk.
TEST(HandMade, ImportAndWriteReportTheirSteps) {
  const fs::path dir = temp_dir("steps");
  const std::string data = write_external_mlp(dir);
  std::vector<Step> heard;
  const lnv::ProgressFn listen = [&](std::string_view phase, std::string_view, uint64_t done,
                                     uint64_t total) { heard.push_back({std::string(phase), "", done, total}); };
  const lnv::Graph g = import_onnx(dir / "mlp.onnx", {{"batch", 2}}, false, listen);
  EXPECT_EQ(check_steps(heard), (std::vector<std::string>{"parse model", "check model", "infer shapes",
                                                          "decode model", "fold constants",
                                                          "import nodes"}));
  // Over the nodes left after constant folding.
  EXPECT_EQ(heard.back().total,
            fold_constants(load_onnx(dir / "mlp.onnx", {{"batch", 2}})).model.graph.nodes.size());

  heard.clear();
  const auto plan = lnv::detect_foldable(g, lnv::Mode::inference);
  const lnv::Graph folded = lnv::apply_fold(g, plan);
  FoldWriteOptions options;
  options.sync = false;
  options.progress = listen;
  const fs::path out = dir / "elsewhere" / "away.onnx";
  fs::create_directories(out.parent_path());
  const FoldWriteSummary w =
      write_folded_onnx(dir / "mlp.onnx", imported_params(g), folded, plan.fold, out, options);
  EXPECT_EQ(check_steps(heard), (std::vector<std::string>{"parse model", "center weights",
                                                          "copy external data", "write model",
                                                          "commit files"}));
  for (const Step& s : heard) {
    if (s.phase == "center weights") EXPECT_EQ(s.total, w.centered_in_place);  // no copies here
    if (s.phase == "copy external data") EXPECT_EQ(s.total, data.size());
    if (s.phase == "write model") EXPECT_EQ(s.total, fs::file_size(out));
  }
}

// External data cut short after the import (which checked it) while the writer streams
// it: a ModelError naming the initializer, and nothing written beside the input or
// elsewhere.
TEST(HandMade, ExternalDataCutShortWhileStreamingWritesNothing) {
  const fs::path dir = temp_dir("cut_short");
  const std::string data = write_external_mlp(dir);
  const DimBindings dims{{"batch", 2}};
  lnv::Graph lazy = import_onnx(dir / "mlp.onnx", dims, /*defer_values=*/true);
  const lnv::FoldPlan plan = lnv::detect_foldable(lazy, lnv::Mode::inference);
  ASSERT_FALSE(plan.fold.empty());
  const ImportedParams params = imported_params(lazy);
  const lnv::Graph folded = lnv::apply_fold(std::move(lazy), plan);
  fs::resize_file(dir / "mlp.bin", data.size() / 2);
  FoldWriteOptions options;
  options.sync = false;
  fs::create_directories(dir / "elsewhere");
  for (const fs::path& out : {dir / "o.onnx", dir / "elsewhere" / "o.onnx"}) {
    SCOPED_TRACE(out.string());
    try {
      write_folded_onnx(dir / "mlp.onnx", params, folded, plan.fold, out, options);
      ADD_FAILURE() << "written";
    } catch (const lnv::ModelError& e) {
      EXPECT_NE(std::string(e.what()).find("initializer '"), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(fs::is_empty(dir / "elsewhere"));
  std::set<std::string> left;
  for (const auto& entry : fs::directory_iterator(dir)) left.insert(entry.path().filename().string());
  EXPECT_EQ(left, (std::set<std::string>{"mlp.onnx", "mlp.bin", "elsewhere"}));
}

// Refusals leave nothing behind.
TEST(HandMade, RefusalsWriteNothing) {
  const fs::path dir = temp_dir("refuse");
  fs::copy_file(kDir + "mlp_tiny_opset14.onnx", dir / "m.onnx");
  const DimBindings dims{{"batch", 2}};
  EXPECT_THROW(fold_to(dir / "m.onnx", dims, dir / "m.onnx", RmsOp::decomposed), lnv::ModelError);
  FoldWriteOptions keep;
  keep.rms_op = RmsOp::onnx23;
  keep.keep_opset = true;
  const lnv::Graph g = import_onnx(dir / "m.onnx", dims);
  const auto plan = lnv::detect_foldable(g, lnv::Mode::inference);
  const lnv::Graph folded = lnv::apply_fold(g, plan);
  try {
    write_folded_onnx(dir / "m.onnx", imported_params(g), folded, plan.fold, dir / "o.onnx", keep);
    ADD_FAILURE() << "written";
  } catch (const lnv::ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("--keep-opset"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir / "o.onnx"));
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) files += entry.is_regular_file();
  EXPECT_EQ(files, 1u);
}

}  // namespace
