"""lnverify for nn.Module: audit, fold (inference and training) and equiv (docs/python.md).

Every function exports the module in memory (torch.onnx.export into a BytesIO, opset 17, no
constant folding) and hands the bytes to lnverify's C++ core: the same ONNX reader, analysis
and exact evaluation as the CLI, so a verdict here is the CLI's verdict on the same export.
Names in reports are the module's own: ONNX nodes and initializers are mapped back to module
paths and parameter names (named_modules, named_parameters).
"""
import copy
import io
import json

import torch
from torch import nn
from torch.nn.utils import parametrize

from . import _core
from ._core import ModelError

__all__ = ["audit", "fold", "equiv", "AuditReport", "EquivReport", "RMSNorm", "Center",
           "ScaledCenter", "One", "remove_parametrizations", "ExportError", "InputError", "NoLayerNormError", "FoldError"]


class ExportError(ModelError):
    """The module does not export to ONNX (torch.onnx.export refused it)."""


class InputError(ModelError):
    """The example inputs do not run through the module (wrong shape, dtype or count)."""


class NoLayerNormError(ModelError):
    """The module has no LayerNorm: there is nothing to audit or fold."""


class FoldError(ModelError):
    """The fold the analysis plans cannot be written into the module's parameters."""


# --- modules the fold puts in ---------------------------------------------------------------

class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * weight + bias over the trailing normalized_shape axes:
    nn.LayerNorm without the mean subtraction (the bias kept, which nn.RMSNorm lacks)."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True,
                 device=None, dtype=None):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.dims = [-k for k in range(len(self.normalized_shape), 0, -1)]
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        kw = {"device": device, "dtype": dtype}
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(self.normalized_shape, **kw))
            self.bias = nn.Parameter(torch.zeros(self.normalized_shape, **kw)) if bias else None
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x):
        eps = self.eps
        if not torch.jit.is_scripting():
            if torch.onnx.is_in_onnx_export():
                # exported as LayerNormalization's export stores its eps: a float32 attribute,
                # so a fold's export computes what the original's export computes
                eps = float(torch.tensor(eps, dtype=torch.float32))
        y = x / torch.sqrt(x.pow(2).mean(self.dims, keepdim=True) + eps)
        if self.weight is not None:
            y = y * self.weight
        if self.bias is not None:
            y = y + self.bias
        return y

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class Center(nn.Module):
    """The CBWC parametrization: the tensor minus its mean over `dims` (zero with `zero`, for
    a parameter broadcast along the normalized axes, whose centering removes it)."""

    def __init__(self, dims, zero=False):
        super().__init__()
        self.dims = tuple(dims)
        self.zero = zero

    def forward(self, w):
        if self.zero:
            return w - w
        return w - w.mean(self.dims, keepdim=True)

    def extra_repr(self):
        return "zero" if self.zero else f"dims={self.dims}"


class ScaledCenter(Center):
    """CBWC of a producer that a LayerScale γ scaled (docs/spec/semantics.md, "LayerScale"):
    the tensor multiplied by γ along `dim`, then centered over `dims`. γ is the LayerScale's
    own parameter (read, not owned: it stays the trained parameter, and its gradient flows
    through this product)."""

    def __init__(self, dims, zero, gamma, dim):
        super().__init__(dims, zero)
        self.dim = dim
        self._gamma = (gamma,)  # a tuple: not registered, so γ stays its own module's parameter

    def forward(self, w):
        return super().forward(w * _along(self._gamma[0], w.dim(), self.dim))

    def extra_repr(self):
        return f"{super().extra_repr()}, scaled along dim {self.dim}"


class One(nn.Module):
    """The parametrization of a LayerScale γ whose factor the fold moved into the producer
    before it: γ reads as ones (the producer's ScaledCenter reads the trained γ)."""

    def forward(self, g):
        return torch.ones_like(g)


def _along(gamma, rank, dim):
    """γ (a scalar or one factor per index of `dim`) shaped to broadcast along `dim` of a
    tensor of `rank` dims."""
    g = gamma.reshape(-1)
    if g.numel() == 1:
        return g.reshape(())
    shape = [1] * rank
    shape[dim] = g.numel()
    return g.reshape(shape)


def _rms_norm_for(ln):
    """The RMSNorm taking `ln`'s place: torch's nn.RMSNorm where it exists (torch >= 2.4) and
    the LayerNorm has no bias, lnverify.torch.RMSNorm otherwise; same eps, weight and bias
    (the same Parameter objects)."""
    has_bias = getattr(ln, "bias", None) is not None
    if hasattr(nn, "RMSNorm") and not has_bias:
        r = nn.RMSNorm(ln.normalized_shape, eps=ln.eps, elementwise_affine=ln.elementwise_affine)
    else:
        r = RMSNorm(ln.normalized_shape, eps=ln.eps, elementwise_affine=ln.elementwise_affine,
                    bias=has_bias)
    if ln.elementwise_affine:
        r.weight = ln.weight
        if has_bias:
            r.bias = ln.bias
    r.train(ln.training)
    return r


# --- export ---------------------------------------------------------------------------------

class _Exported(nn.Module):
    """Wraps the module for export. Its `training` stays True, so that the exporter shares
    one initializer only among uses of one tensor (deduplication by storage), never among
    distinct parameters that happen to hold equal values (it does that for a module in eval
    mode): every initializer then is one parameter, named as the module names it. The
    wrapped module itself is put in the mode asked for."""

    def __init__(self, module):
        super().__init__()
        self.m = module

    @property
    def training(self):
        return True

    @training.setter
    def training(self, value):
        pass

    def forward(self, *args):
        return self.m(*args)


def _as_tuple(example_inputs):
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    if isinstance(example_inputs, (tuple, list)):
        return tuple(example_inputs)
    raise InputError(f"example_inputs: expected a tensor or a tuple of tensors, got "
                     f"{type(example_inputs).__name__}")


def _module_name(module):
    return type(module).__name__


def _flat_outputs(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        flat = []
        for o in out:
            flat += _flat_outputs(o)
        return flat
    if isinstance(out, dict):
        flat = []
        for o in out.values():
            flat += _flat_outputs(o)
        return flat
    return []


def _export_bytes(module, inputs, training):
    """The module exported as ONNX bytes (opset 17), inputs named input_0.., outputs
    output_0..; training: dropout exported active (TrainingMode.TRAINING)."""
    modes = {m: m.training for m in module.modules()}
    # Running and tracing the module draws dropout masks: the caller's random state is kept.
    with torch.random.fork_rng(devices=[]):
        return _export_in(module, inputs, training, modes)


def _export_in(module, inputs, training, modes):
    try:
        module.train(training)
        try:
            with torch.no_grad():
                outs = _flat_outputs(module(*inputs))
        except Exception as e:  # the module's own error on these inputs
            shapes = ", ".join(str(tuple(t.shape)) if isinstance(t, torch.Tensor) else type(t).__name__
                               for t in inputs)
            raise InputError(f"{_module_name(module)}: the example inputs ({shapes}) do not run "
                             f"through the module: {type(e).__name__}: {e}") from e
        if not outs:
            raise ExportError(f"{_module_name(module)}: the module returns no tensor")
        buf = io.BytesIO()
        kwargs = {}
        try:
            import inspect
            if "dynamo" in inspect.signature(torch.onnx.export).parameters:
                kwargs["dynamo"] = False
        except (TypeError, ValueError):
            pass
        mode = torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL
        wrapper = _Exported(module)
        failure = None
        try:
            torch.onnx.export(wrapper, inputs, buf, opset_version=17, do_constant_folding=False,
                              training=mode, export_params=True,
                              keep_initializers_as_inputs=False,
                              input_names=[f"input_{k}" for k in range(len(inputs))],
                              output_names=[f"output_{k}" for k in range(len(outs))], **kwargs)
        except ModelError:
            raise
        except Exception as e:
            failure = f"{type(e).__name__}: {e}"
        if failure is not None:
            # Raised outside the except block, without the exporter's exception: its traceback
            # holds Python wrappers of the exporter's graphs, and one kept alive past the
            # export (a caller keeping the error) breaks torch's next export in this process.
            raise ExportError(f"{_module_name(module)}: torch.onnx.export does not export the "
                              f"module: {failure}")
        return buf.getvalue()
    finally:
        for m, t in modes.items():
            m.training = t


def _import(module, inputs, training):
    data = _export_bytes(module, inputs, training)
    name = f"<{_module_name(module)} export>"
    return data, _core.Graph.from_onnx_bytes(data, name)


# --- names: ONNX back to the module ---------------------------------------------------------

_PREFIX = "m."


def _scope_module(node_name, modules):
    """The module path of an ONNX node's scope ("/m/h.0/mlp/mlp.0/MatMul" -> "h.0.mlp.0"),
    resolved against the module's named_modules; "" for the root or an unscoped node."""
    parts = [p for p in node_name.split("/") if p]
    if len(parts) < 2 or parts[0] != "m":
        return ""
    path = ""
    for comp in parts[1:-1]:
        candidates = [f"{path}.{comp}" if path else comp]
        parent = path.rsplit(".", 1)[0] if "." in path else ""
        candidates.append(f"{parent}.{comp}" if parent else comp)
        candidates.append(comp)
        for c in candidates:
            if c in modules:
                path = c
                break
        else:
            break
    return path


def _op_part(node_name):
    return node_name.rstrip("/").rsplit("/", 1)[-1]


class _Names:
    """Maps one export's graph (params, nodes) to the module's parameter names and module
    paths, and each graph param to the tensor it holds (with the permutation of its dims)."""

    def __init__(self, module, graph):
        self.module = module
        self.modules = dict(module.named_modules(remove_duplicate=False))
        self.tensors = _named_tensors(module)  # name -> tensor (parameters, buffers; every alias)
        self.aliases = {}  # id(tensor) -> [names]
        for n, t in self.tensors.items():
            self.aliases.setdefault(id(t), []).append(n)
        self.graph = graph
        self.nodes = graph.nodes
        self.param_source = {}  # graph param -> (torch name, perm) ; perm: graph = t.permute(perm)
        users = {}
        for nd in self.nodes:
            for v in list(nd["inputs"]) + list(nd["params"].values()):
                users.setdefault(v, []).append(nd["name"])
        self.users = users
        for gname, shape in graph.params:
            src = self._find_param(gname, tuple(shape))
            if src is not None:
                self.param_source[gname] = src
        self.rename = self._renaming()

    def _find_param(self, gname, shape):
        direct = gname[len(_PREFIX):] if gname.startswith(_PREFIX) else None
        if direct in self.tensors and tuple(self.tensors[direct].shape) == shape:
            return direct, tuple(range(len(shape)))
        # An initializer the importer derived (a Transpose folded into it) or one the
        # exporter named itself: the tensor whose values it holds exactly, dims possibly
        # permuted, found among the tensors of the using nodes' modules, else among all; taken
        # only when exactly one tensor matches, and never for constant values (zeros, ones),
        # which name no tensor.
        values = torch.from_numpy(self.graph.param_values(gname))
        if values.numel() == 0 or bool(values.min() == values.max()):
            return None
        scopes = {_scope_module(u, self.modules) for u in self.users.get(gname, [])}

        def under(n):
            return any(not sc or n.startswith(sc + ".") for sc in scopes)

        matches = []
        for n, t in self.tensors.items():
            if t.numel() != values.numel() or t.dim() != len(shape) or not t.is_floating_point():
                continue
            if any(t is self.tensors[m] for m, _ in matches):
                continue
            for perm in _perms(t.dim()):
                if tuple(t.shape[k] for k in perm) == shape and torch.equal(
                        t.detach().permute(*perm).to(torch.float64).cpu(), values):
                    matches.append((n, perm))
                    break
        inside = [m for m in matches if under(m[0])]
        for found in (inside, matches):
            if len(found) == 1:
                return found[0]
        return None

    def param_name(self, gname):
        src = self.param_source.get(gname)
        return src[0] if src else None

    def _renaming(self):
        used = set()
        names = {}

        def take(old, want):
            new = want or old
            k = 2
            while new in used:
                new = f"{want}.{k}"
                k += 1
            used.add(new)
            names[old] = new

        for gname, _ in self.graph.params:
            take(gname, self.param_name(gname) or gname)
        for nm, _ in self.graph.inputs:
            take(nm, nm)
        for nd in self.nodes:
            take(nd["name"], self._node_name(nd))
        return names

    def producer_param(self, nd):
        """The weight a producer node multiplies by (graph name), or None."""
        if nd["op"] == "matmul":
            for v in nd["inputs"]:
                if v in self.param_source:
                    return v
            return None
        p = nd["params"]
        return p.get("weight") or p.get("wo") or p.get("weight_ih")

    def _node_name(self, nd):
        op = nd["op"]
        if op in ("layer_norm", "rms_norm", "linear", "matmul", "embedding", "conv1d", "conv2d",
                  "attention", "rnn"):
            w = nd["params"].get("weight") if op in ("layer_norm", "rms_norm") else self.producer_param(nd)
            tn = self.param_name(w) if w else None
            if tn and "." in tn:
                return tn.rsplit(".", 1)[0]
        scope = _scope_module(nd["name"], self.modules)
        if op in ("layer_norm", "rms_norm") and scope and isinstance(
                self.modules.get(scope), (nn.LayerNorm,)):
            return scope
        part = _op_part(nd["name"])
        return f"{scope}:{part}" if scope else part

    def onnx_name(self, new):
        for old, n in self.rename.items():
            if n == new:
                return old
        return None


def _named_tensors(module):
    """Every parameter, then every buffer, under each name it has (a tied tensor under each)."""
    params, buffers = {}, {}
    for mname, m in module.named_modules(remove_duplicate=False):
        prefix = mname + "." if mname else ""
        for n, p in m._parameters.items():
            if p is not None:
                params[prefix + n] = p
        for n, b in m._buffers.items():
            if b is not None:
                buffers[prefix + n] = b
    for n, b in buffers.items():
        params.setdefault(n, b)
    return params


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _perms(rank):
    import itertools
    if rank > 5:
        return [tuple(range(rank))]
    ident = tuple(range(rank))
    return [ident] + [p for p in itertools.permutations(range(rank)) if p != ident]


# --- audit ----------------------------------------------------------------------------------

class AuditReport:
    """The audit of a module: per LayerNorm module its verdict in both modes, the reason for
    a "no" (naming the module that breaks it) and what its fold centers, under the module's
    own names. print() shows the CLI's table; to_json() the CLI's audit JSON."""

    def __init__(self, module, graph, names, audit, onnx_bytes):
        self.module_name = _module_name(module)
        self.mode = audit.mode
        self._graph = graph
        self._names = names
        self._audit = audit
        self.onnx_bytes = onnx_bytes
        self.layer_norms = audit.layer_norms
        self.notes = []

    @property
    def onnx_names(self):
        """Module-side name -> the ONNX export's name, for every renamed node and param."""
        return {new: old for old, new in self._names.rename.items()}

    def to_json(self):
        return self._audit.to_json()

    def to_dict(self):
        return json.loads(self._audit.to_json())

    def to_markdown(self):
        return self._audit.markdown()

    def summary(self):
        return self._audit.summary()

    def text(self, verbose=False):
        out = self._audit.text(verbose)
        for n in self.notes:
            out += f"note: {n}\n"
        return out

    def foldable(self, mode=None):
        """The names of the LayerNorms foldable in `mode` (default: the report's mode)."""
        k = 0 if (mode or self.mode) == "inference" else 1
        return [v["name"] for v in self.layer_norms if v["foldable"][k]]

    def __str__(self):
        return self.text()

    def __repr__(self):
        return f"<lnverify AuditReport of {self.module_name}: {self.summary()}>"


def _audit(module, example_inputs, mode):
    if mode not in ("inference", "training"):
        raise ModelError(f"mode: '{mode}' is not a mode (inference or training)")
    if not isinstance(module, nn.Module):
        raise ModelError(f"module: expected an nn.Module, got {type(module).__name__}")
    inputs = _as_tuple(example_inputs)
    data, graph = _import(module, inputs, mode == "training")
    names = _Names(module, graph)
    renamed = graph.renamed(names.rename)
    audit = _core.Audit(renamed, mode)
    if not audit.layer_norms:
        raise NoLayerNormError(f"{_module_name(module)}: the module has no LayerNorm (no "
                               f"nn.LayerNorm or layer_norm in its export): nothing to audit or fold")
    report = AuditReport(module, renamed, names, audit, data)
    return report


def audit(module, example_inputs, mode="inference"):
    """Audits `module` on `example_inputs` (a tensor or a tuple of tensors, which fix the
    shapes): exported in eval mode for mode="inference", in training mode (dropout active)
    for mode="training"; the plan ("centered") is for `mode`. Returns an AuditReport."""
    report = _audit(module, example_inputs, mode)
    plan = _Plan(module, report)
    report.notes = plan.notes
    return report


# --- the fold -------------------------------------------------------------------------------

class _Plan:
    """What a fold of `module` does, in module terms: the LayerNorm modules to swap and, per
    tensor to center, the dims (in the tensor's own layout) and the aliases (module
    attributes) that read it centered or raw."""

    def __init__(self, module, report):
        self.report = report
        names = report._names
        self.names = names
        graph = report._graph
        by_new = {new: old for old, new in names.rename.items()}
        self.swap = []       # module paths of the LayerNorms to swap
        self.unswapped = []  # folded LNs that are no nn.LayerNorm module (left as they are)
        for ln in report._audit.fold:
            mod = names.modules.get(ln)
            if type(mod) is nn.LayerNorm:
                self.swap.append(ln)
            else:
                self.unswapped.append(ln)
        # centering, per graph param: (dims, zero) and the uses (graph node names, new names)
        self.problems = []   # why the plan cannot be written into the module's tensors
        self.gammas = {}     # LayerScale γ moved into its producer: graph name -> torch name
        self.center = {}  # (graph param, torch name) -> {"dims": set, "zero": bool}
        centered_uses = {}
        for e in report._audit.centering():
            gp_new = e["param"]
            gp = by_new.get(gp_new, gp_new)
            if e["term"] == "layer_scale":
                self._layer_scale(gp, gp_new, e["node"], by_new)
                continue
            src = names.param_source.get(gp)
            if src is None:
                # a constant the module does not hold: fine when centering leaves it as it is
                v = torch.from_numpy(graph.param_values(gp))
                done = (v == 0).all() if e["remove"] else (
                    v.mean(tuple(e["axes"]), keepdim=True) == 0).all()
                if bool(done):
                    continue
                self.problems.append(f"{report.module_name}: the fold centers '{gp_new}' (ONNX "
                                     f"'{gp}'), which is no parameter or buffer of the module")
                continue
            tname, perm = src
            dims = {perm[a] for a in e["axes"]}
            entry = self.center.setdefault((gp, tname), {"dims": set(), "zero": False, "scale": set()})
            entry["dims"] |= dims
            entry["zero"] = entry["zero"] or e["remove"]
            if e["scale"]:
                entry["scale"].add((e["scale"], perm[e["axes"][0]]))
            centered_uses.setdefault(gp, set()).add(by_new.get(e["node"], e["node"]))
        # per tensor: which aliases read it centered, which raw
        self.tensor_plan = {}  # id(tensor) -> {"tensor", "dims", "zero", "centered": set, "raw": set}
        for (gp, tname), c in self.center.items():
            t = names.tensors[tname]
            tp = self.tensor_plan.setdefault(id(t), {"tensor": t, "dims": set(), "zero": False,
                                                      "scale": set(), "centered": set(), "raw": set()})
            tp["dims"] |= c["dims"]
            tp["zero"] = tp["zero"] or c["zero"]
            tp["scale"] |= c["scale"]
        for gp, (tname, _) in names.param_source.items():
            t = names.tensors[tname]
            if id(t) not in self.tensor_plan:
                continue
            tp = self.tensor_plan[id(t)]
            uses = names.users.get(gp, [])
            cen = centered_uses.get(gp, set())
            for u in uses:
                alias = self._alias_for(t, tname, u)
                (tp["centered"] if u in cen else tp["raw"]).add(alias)
        self.notes = []
        for tp in self.tensor_plan.values():
            if len(tp["scale"]) > 1:
                self.problems.append(
                    f"{report.module_name}: the fold scales {', '.join(sorted(tp['centered']))} by "
                    f"more than one LayerScale factor or along more than one dim "
                    f"({', '.join(sorted(g for g, _ in tp['scale']))}); one tensor cannot hold both")
            tp["scale"] = next(iter(tp["scale"]), None)
            both = tp["centered"] & tp["raw"]
            if both:
                tp["conflict"] = sorted(both)
            elif tp["raw"]:
                self.notes.append(
                    f"{', '.join(sorted(tp['centered']))} is tied to {', '.join(sorted(tp['raw']))}: "
                    f"the fold centers it for {', '.join(sorted(tp['centered']))} only; "
                    f"{', '.join(sorted(tp['raw']))} keeps the uncentered values (inference: an "
                    f"untied copy; training: the centering is a parametrization of "
                    f"{', '.join(sorted(tp['centered']))}, the tie stays)")

    def _layer_scale(self, gp, gp_new, mul, by_new):
        """γ of a LayerScale that the fold moves into its producer: set to one (inference) or
        read as one (training); the producer's entries carry the scale."""
        names, report = self.names, self.report
        src = names.param_source.get(gp)
        mul = by_new.get(mul, mul)
        if src is None:
            self.problems.append(f"{report.module_name}: the fold moves the LayerScale factor "
                                 f"'{gp_new}' (ONNX '{gp}'), which is no parameter or buffer of "
                                 f"the module, into the layer before it")
            return
        tname, _ = src
        others = sorted(u for u in names.users.get(gp, []) if u != mul)
        if others:
            self.problems.append(f"{report.module_name}: the fold moves the LayerScale factor "
                                 f"'{tname}' into the layer before it, but {', '.join(others)} "
                                 f"also read(s) it")
            return
        self.gammas[gp_new] = tname

    def _alias_for(self, t, tname, use_node):
        """The attribute name under which the module of `use_node` reads tensor `t`."""
        scope = _scope_module(use_node, self.names.modules)
        aliases = self.names.aliases[id(t)]
        best = None
        for a in aliases:
            owner = a.rsplit(".", 1)[0] if "." in a else ""
            if owner == scope or (scope and owner.startswith(scope + ".")) or (
                    owner and scope.startswith(owner + ".")) or owner == "" and scope == "":
                if best is None or len(owner) > len(best.rsplit(".", 1)[0] if "." in best else ""):
                    best = a
        return best or tname


def _owner(module, name):
    path, _, attr = name.rpartition(".")
    return (module.get_submodule(path) if path else module), attr


def _check_plan(plan):
    if plan.problems:
        raise FoldError("; ".join(plan.problems))
    for tp in plan.tensor_plan.values():
        if "conflict" in tp:
            raise FoldError(f"{plan.report.module_name}: the fold centers {', '.join(tp['conflict'])} "
                            f"for one use and keeps it raw for another inside the same module; "
                            f"a fold by parameters cannot express that")


def _centered(t, dims, zero):
    with torch.no_grad():
        if zero:
            return torch.zeros_like(t)
        return t - t.mean(tuple(sorted(dims)), keepdim=True)


def _swap_norms(new, plan):
    for path in plan.swap:
        parent, attr = _owner(new, path)
        setattr(parent, attr, _rms_norm_for(getattr(parent, attr)))


def fold(module, example_inputs, mode="inference"):
    """A new module (a deep copy) in which each foldable nn.LayerNorm is an RMSNorm and the
    terms feeding it are centered; the rest (classes, hooks) untouched.

    mode="inference": the producers' weights (and biases, added parameters) are replaced by
    their centered values; a tensor that another module reads raw (a tied table) is untied.
    mode="training": the weights stay the trained parameters and each reads centered through
    a torch.nn.utils.parametrize parametrization (Center: CBWC); ties stay.
    parametrize.remove_parametrizations(m, name, leave_parametrized=True) turns it into the
    inference fold."""
    report = _audit(module, example_inputs, mode)
    plan = _Plan(module, report)
    report.notes = plan.notes
    _check_plan(plan)
    memo = {}
    new = copy.deepcopy(module, memo)
    pending = []  # (tensor, its folded value): written after every value is computed
    _swap_norms(new, plan)  # the RMSNorms take the LayerNorms' Parameter objects
    for tp in plan.tensor_plan.values():
        t_new = memo.get(id(tp["tensor"]), None)
        if t_new is None:
            raise FoldError(f"{report.module_name}: cannot find the copy of "
                            f"{', '.join(sorted(tp['centered']))}")
        dims, zero = tp["dims"], tp["zero"]
        gamma, dim = None, None
        if tp["scale"] is not None:
            gname, dim = tp["scale"]
            gamma = memo[id(plan.names.tensors[plan.gammas[gname]])]
        if mode == "inference":
            with torch.no_grad():
                value = _centered(t_new if gamma is None else t_new * _along(gamma, t_new.dim(), dim),
                                  dims, zero)
            if not tp["raw"]:
                pending.append((t_new, value))
            else:
                for alias in sorted(tp["centered"]):
                    owner, attr = _owner(new, alias)
                    if isinstance(t_new, nn.Parameter):
                        setattr(owner, attr, nn.Parameter(value.clone(), requires_grad=t_new.requires_grad))
                    else:
                        owner.register_buffer(attr, value.clone())
        else:
            for alias in sorted(tp["centered"]):
                owner, attr = _owner(new, alias)
                if not isinstance(getattr(owner, attr), nn.Parameter):
                    raise FoldError(f"{report.module_name}: '{alias}' is a buffer; the training "
                                    f"fold centers parameters through parametrizations only")
                if gamma is None:
                    p = Center(sorted(dims), zero)
                else:  # a buffer γ is a constant: its values, before it reads as one
                    p = ScaledCenter(sorted(dims), zero, gamma if isinstance(gamma, nn.Parameter)
                                     else gamma.detach().clone(), dim)
                parametrize.register_parametrization(owner, attr, p)
    # γ of each LayerScale moved into its producer: one, once every product is taken
    for gname, tname in sorted(plan.gammas.items()):
        owner, attr = _owner(new, tname)
        if mode == "training" and isinstance(getattr(owner, attr), nn.Parameter):
            parametrize.register_parametrization(owner, attr, One())
        else:
            with torch.no_grad():
                getattr(owner, attr).fill_(1.0)
    with torch.no_grad():
        for t, value in pending:
            t.copy_(value)
    return new


def remove_parametrizations(module):
    """Turns a training fold into the inference fold, in place, and returns it: every Center
    parametrization removed with leave_parametrized=True (the centered values become the
    parameters). A parameter that another module reads raw (a head tied to a centered
    embedding) is untied first: torch's remove_parametrizations writes the centered values
    into the original tensor, which the tie would otherwise hand to the raw reader too.
    The centerings go first, then the One of each LayerScale γ: a ScaledCenter reads the
    trained γ, which leave_parametrized turns into ones (with torch's own
    remove_parametrizations, keep that order)."""
    for kind in (Center, One):
        for m in list(module.modules()):
            if not parametrize.is_parametrized(m):
                continue
            for name in list(m.parametrizations.keys()):
                plist = m.parametrizations[name]
                if not all(isinstance(f, kind) for f in plist):
                    continue
                original = plist.original
                for alias, t in _named_tensors(module).items():
                    if t is original and ".parametrizations." not in alias:
                        owner, attr = _owner(module, alias)
                        setattr(owner, attr, nn.Parameter(original.detach().clone(),
                                                          requires_grad=original.requires_grad))
                parametrize.remove_parametrizations(m, name, leave_parametrized=True)
    return module


# --- equivalence ----------------------------------------------------------------------------

class EquivReport:
    """The result of lnverify's exact equivalence check (the CLI's `equiv` report)."""

    def __init__(self, result):
        self.outcome = result["outcome"]
        self._json = result["json"]
        self._text = result["text"]

    @property
    def equal(self):
        return self.outcome == "equal"

    def to_json(self):
        return self._json

    def to_dict(self):
        return json.loads(self._json)

    def __bool__(self):
        return self.equal

    def __str__(self):
        return self._text

    def __repr__(self):
        return f"<lnverify EquivReport: {self.outcome}>"


def _outputs_by_position(graph):
    outs = list(graph.outputs)
    if len(set(outs)) != len(outs):
        return graph  # one node computes two outputs: kept as named
    return graph.renamed({o: f"output_{k}" for k, o in enumerate(outs)})


def equiv(a, b, example_inputs, mode="inference", trials=3, seed=0, grad=False, bits=256):
    """Whether modules `a` and `b` compute the same function, proved by exact evaluation
    (bits-bit MPFR) on `trials` random inputs of the example inputs' shapes: both exported
    in memory and compared output by output (with grad, also the gradients with respect to
    float inputs). Returns an EquivReport (outcome "equal", "different" or "inconclusive")."""
    if mode not in ("inference", "training"):
        raise ModelError(f"mode: '{mode}' is not a mode (inference or training)")
    inputs = _as_tuple(example_inputs)
    # outputs paired by position: named output_0, ... in both (the importer names an output
    # after the node computing it, which a fold may change: a LayerNorm become an RMSNorm)
    ga, gb = (_outputs_by_position(_import(m, inputs, mode == "training")[1]) for m in (a, b))
    res = _core.equiv(ga, f"{_module_name(a)} (a)", gb, f"{_module_name(b)} (b)", mode=mode,
                      trials=trials, seed=seed, grad=grad, bits=bits)
    return EquivReport(res)
