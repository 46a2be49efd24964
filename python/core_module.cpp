// lnverify._core: the C++ core, the reports and the ONNX reader for the Python package
// (python/lnverify/). A model comes in as the bytes of an ONNX export held in memory; the
// audit, the centering a fold needs and the equivalence check run on it in C++ and come back
// as the CLI's reports (JSON text and the text table) and as plain Python values.
// lnv::ModelError (and NotEvaluableError) become lnverify._core.ModelError (NotEvaluableError),
// InternalError a RuntimeError: never a crash.
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <nlohmann/json.hpp>

#include "checkers/model_equivalence.h"
#include "core/analysis/fold_plan.h"
#include "core/analysis/producers.h"
#include "core/error.h"
#include "core/graph.h"
#include "core/model_json.h"
#include "onnx/import.h"
#include "reports/audit_report.h"
#include "reports/equiv_report.h"

namespace py = pybind11;

namespace {

using lnv::Graph;
using lnv::Mode;

Mode parse_mode(const std::string& mode) {
  if (mode == "inference") return Mode::inference;
  if (mode == "training") return Mode::training;
  throw lnv::ModelError("mode", "'" + mode + "' is not a mode (inference or training)");
}

using GraphPtr = std::shared_ptr<Graph>;

GraphPtr from_onnx_bytes(const py::bytes& data, const std::string& name,
                         const std::map<std::string, int64_t>& dims) {
  std::string bytes = data;  // copied while the GIL is held
  py::gil_scoped_release release;
  return std::make_shared<Graph>(lnv::onnx_import::import_onnx_bytes(bytes, name, dims));
}

// The graph with inputs, params and nodes renamed by `names` (old -> new; names not in it
// are kept), every reference following.
GraphPtr renamed(const Graph& g, const std::map<std::string, std::string>& names) {
  auto to = [&](std::string& s) {
    if (auto it = names.find(s); it != names.end()) s = it->second;
  };
  Graph r;
  r.name = g.name;
  r.seed = g.seed;
  r.meta = g.meta;
  r.base_dir = g.base_dir;
  r.inputs = g.inputs;
  r.params = g.params;
  r.nodes = g.nodes;
  r.outputs = g.outputs;
  for (auto& i : r.inputs) to(i.name);
  for (auto& p : r.params) to(p.name);
  for (auto& n : r.nodes) {
    to(n.name);
    for (auto& i : n.inputs) to(i);
    for (std::string* s : {&n.weight, &n.bias, &n.weight_ih, &n.weight_hh, &n.wq, &n.wk, &n.wv,
                           &n.wo, &n.bq, &n.bk, &n.bv, &n.bo})
      to(*s);
    if (n.norm) {
      to(n.norm->weight);
      to(n.norm->bias);
    }
  }
  for (auto& o : r.outputs) to(o);
  r.finalize();
  return std::make_shared<Graph>(std::move(r));
}

py::list node_list(const Graph& g) {
  py::list out;
  for (const auto& n : g.nodes) {
    py::dict d;
    d["name"] = n.name;
    d["op"] = std::string(lnv::op_name(n.op));
    d["inputs"] = n.inputs;
    py::dict params;
    for (const auto& [attr, param] : n.param_attrs()) params[py::str(attr)] = param;
    d["params"] = params;
    if (n.op == lnv::Op::opaque) d["op_type"] = n.op_type;
    out.append(d);
  }
  return out;
}

py::list param_list(const Graph& g) {
  py::list out;
  for (const auto& p : g.params) out.append(py::make_tuple(p.name, std::vector<int64_t>(p.shape)));
  return out;
}

py::array_t<double> param_values(const Graph& g, const std::string& name) {
  const auto& p = g.params.at(static_cast<size_t>(g.param_index(name)));
  py::array_t<double> a(std::vector<py::ssize_t>(p.shape.begin(), p.shape.end()));
  std::copy(p.values.begin(), p.values.end(), a.mutable_data());
  return a;
}

// One param to center: `param` over `axes` of its own shape (normalized), or zeroed
// (`remove`), for the use of it in `node` (`slot`: the attribute or "inputs/k"); `scale`:
// the LayerScale γ multiplied into it along axes[0] before the centering ("" for none).
py::dict centering_entry(const std::string& param, const lnv::Axes& axes, bool remove,
                         const std::string& node, const std::string& slot,
                         const std::string& term, const std::string& scale = "") {
  py::dict d;
  d["param"] = param;
  d["axes"] = axes;
  d["remove"] = remove;
  d["node"] = node;
  d["slot"] = slot;
  d["term"] = term;  // "producer", "param" or "layer_scale" (γ itself, set to one)
  d["scale"] = scale;
  return d;
}

// A producer's weight (and bias) along its output feature axis (cbwc_attr_axis,
// cbwc_matmul_operand), scaled first by `scale` where a LayerScale moves into it.
void producer_centering(py::list& out, const Graph& g, int32_t idx, const std::string& scale) {
  const lnv::Node& n = g.nodes[static_cast<size_t>(idx)];
  if (n.op == lnv::Op::matmul) {
    const lnv::MatmulCentering mc = lnv::cbwc_matmul_operand(g, idx);
    out.append(centering_entry(n.inputs.at(static_cast<size_t>(mc.operand)), {mc.axis}, false,
                               n.name, "inputs/" + std::to_string(mc.operand), "producer", scale));
    return;
  }
  for (const auto& [attr, param] : n.param_attrs()) {
    const int64_t axis = lnv::cbwc_attr_axis(n.op, attr);
    if (axis >= 0 && !param.empty())
      out.append(centering_entry(param, {axis}, false, n.name, attr, "producer", scale));
  }
}

// What the plan's terms center, param by param: a producer's weight and bias, a param term
// over its axes, and for a LayerScale γ ⊙ producer (docs/spec/semantics.md, "LayerScale")
// γ itself (set to one) and the producer's weight and the chain's bias params, scaled by γ.
py::list plan_centering(const Graph& g, const lnv::FoldPlan& plan) {
  py::list out;
  for (const auto& t : plan.center) {
    const int32_t idx = g.node_index(t.node);
    const lnv::Node& n = g.nodes[static_cast<size_t>(idx)];
    if (t.kind == lnv::CenterTerm::Kind::param) {
      const auto& p = g.params.at(static_cast<size_t>(g.param_index(t.param)));
      const lnv::Axes axes = lnv::normalize_axes(t.axes, static_cast<int64_t>(p.shape.size()), t.param);
      out.append(centering_entry(t.param, axes, t.remove, t.node, t.slot, "param"));
      continue;
    }
    if (n.op == lnv::Op::mul) {
      const auto ls = lnv::analysis::layer_scale_of(g, idx);
      if (!ls) throw lnv::ModelError(n.name, "the fold plan centers '" + n.name +
                                                 "' (mul), which is not a LayerScale of a producer");
      const std::string gamma = n.inputs.at(static_cast<size_t>(ls->gamma));
      out.append(centering_entry(gamma, {}, false, n.name, "", "layer_scale"));
      producer_centering(out, g, ls->producer, gamma);
      for (const auto& b : ls->biases) {
        const lnv::Node& add = g.nodes[static_cast<size_t>(b.node)];
        out.append(centering_entry(add.inputs.at(static_cast<size_t>(b.operand)), {b.axis}, false,
                                   add.name, "inputs/" + std::to_string(b.operand), "producer",
                                   gamma));
      }
      continue;
    }
    producer_centering(out, g, idx, "");
  }
  return out;
}

struct Audit {
  GraphPtr graph;
  lnv::FoldPlan plan;
};

py::list verdicts(const Audit& a) {
  py::list out;
  for (const auto& v : a.plan.layer_norms) {
    py::dict d;
    d["name"] = v.name;
    d["node"] = v.node;
    d["foldable"] = py::make_tuple(v.foldable[0], v.foldable[1]);
    d["reason"] = py::make_tuple(v.reason[0], v.reason[1]);
    d["path"] = py::make_tuple(v.path[0], v.path[1]);
    py::list terms;
    for (const auto& t : v.terms)
      terms.append(t.kind == lnv::CenterTerm::Kind::param ? t.param : t.node);
    d["terms"] = terms;
    out.append(d);
  }
  return out;
}

py::dict equiv(const Graph& a, const std::string& a_name, const Graph& b,
               const std::string& b_name, const std::string& mode, int trials, uint64_t seed,
               bool grad, unsigned bits) {
  lnv::check::EquivOptions opt;
  opt.mode = parse_mode(mode);
  opt.trials = trials;
  opt.seed = seed;
  opt.grad = grad;
  opt.bits = bits;
  opt.a_name = a_name;
  opt.b_name = b_name;
  lnv::check::require_same_interface(a, a_name, b, b_name, opt.mode);
  lnv::report::EquivReport r;
  {
    py::gil_scoped_release release;
    r = lnv::check::equiv_models(a, b, opt);
  }
  py::dict d;
  d["json"] = nlohmann::json(r).dump(2) + "\n";
  d["text"] = lnv::report::to_text(r);
  d["outcome"] = std::string(lnv::report::equiv_outcome_name(r.outcome()));
  return d;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "lnverify's C++ core (docs/python.md); use the package lnverify, not this module";
  m.attr("__version__") = LNV_VERSION;

  static py::exception<lnv::ModelError> model_error(m, "ModelError", PyExc_ValueError);
  static py::exception<lnv::NotEvaluableError> not_evaluable(m, "NotEvaluableError",
                                                             model_error.ptr());
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const lnv::NotEvaluableError& e) {
      not_evaluable(e.what());
    } catch (const lnv::ModelError& e) {
      model_error(e.what());
    } catch (const lnv::InternalError& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });

  py::class_<Graph, GraphPtr>(m, "Graph")
      .def_static("from_onnx_bytes", &from_onnx_bytes, py::arg("data"), py::arg("name"),
                  py::arg("dims") = std::map<std::string, int64_t>{})
      .def_property_readonly("name", [](const Graph& g) { return g.name; })
      .def_property_readonly("inputs", [](const Graph& g) {
        py::list out;
        for (const auto& i : g.inputs) out.append(py::make_tuple(i.name, std::vector<int64_t>(i.shape)));
        return out;
      })
      .def_property_readonly("outputs", [](const Graph& g) { return g.outputs; })
      .def_property_readonly("params", &param_list)
      .def_property_readonly("nodes", &node_list)
      .def_property_readonly("meta", [](const Graph& g) { return g.meta; })
      .def("param_values", &param_values)
      .def("renamed", [](const Graph& g, const std::map<std::string, std::string>& names) {
        return renamed(g, names);
      })
      .def("to_json", [](const Graph& g) { return lnv::model_to_text(g, "."); });

  py::class_<Audit>(m, "Audit")
      .def(py::init([](GraphPtr g, const std::string& mode) {
             Audit a{std::move(g), {}};
             const Mode md = parse_mode(mode);
             py::gil_scoped_release release;
             a.plan = lnv::detect_foldable(*a.graph, md);
             return a;
           }),
           py::arg("graph"), py::arg("mode") = "inference")
      .def_property_readonly("graph", [](const Audit& a) { return a.graph; })
      .def_property_readonly("mode", [](const Audit& a) { return std::string(lnv::mode_name(a.plan.mode)); })
      .def_property_readonly("layer_norms", &verdicts)
      .def_property_readonly("fold", [](const Audit& a) { return a.plan.fold; })
      .def("centering", [](const Audit& a) { return plan_centering(*a.graph, a.plan); })
      .def("to_json", [](const Audit& a) { return lnv::report::audit_json(*a.graph, a.plan).dump(2) + "\n"; })
      .def("text", [](const Audit& a, bool verbose) {
             return lnv::report::audit_text(*a.graph, a.plan, {lnv::report::no_paint, verbose});
           }, py::arg("verbose") = false)
      .def("markdown", [](const Audit& a) { return lnv::report::audit_markdown(*a.graph, a.plan); })
      .def("summary", [](const Audit& a) { return lnv::report::audit_summary(*a.graph, a.plan); });

  m.def("equiv", &equiv, py::arg("a"), py::arg("a_name"), py::arg("b"), py::arg("b_name"),
        py::arg("mode") = "inference", py::arg("trials") = 3, py::arg("seed") = 0,
        py::arg("grad") = false, py::arg("bits") = 256);
}
