#!/usr/bin/python3
"""Writes the hand-written ONNX Runtime contrib-op graphs of tests/data/onnx/contrib/ (the
C++ tests do not need Python): one folder per case, backend-test style, with model.onnx and
test_data_set_0/input_<k>.pb (random inputs) and output_<k>.pb (ONNX Runtime's outputs).

    /usr/bin/python3 -I scripts/make_onnx_contrib_models.py [OUT_DIR]

Each case exercises one com.microsoft op (or a default-domain norm written below opset 17)
with a choice of its attributes and optional inputs and outputs, as ONNX Runtime 1.30's
contrib operator documentation declares them. The expected outputs are ONNX Runtime's own
(tools/ort_run.js, onnxruntime-node). Where ONNX Runtime has no CPU kernel for the op
(BiasSoftmax, BiasAdd are CUDA/ROCm-only), they come from ONNX Runtime running the op's
documented unfused composition instead; the case's `reference.onnx` is that graph. Cases
ending in `_audit` hold ops lnverify leaves opaque (MultiHeadAttention, Attention with a
mask_index, FusedGemm with LeakyRelu), for the audit tests.
"""
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests/data/onnx/contrib")
rng = np.random.default_rng(21)
MS = "com.microsoft"


def rand(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def init(name, array):
    return numpy_helper.from_array(np.asarray(array, dtype=np.float32), name)


def model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "contrib", [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape)
                                              for n, a in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
                          list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)],
                          producer_name="lnverify make_onnx_contrib_models.py")
    m.ir_version = 8
    return m


def run_ort(path, inputs, out_dir):
    tmp = tempfile.mkdtemp()
    try:
        files = []
        for k, (name, a) in enumerate(inputs):
            f = os.path.join(tmp, f"input_{k}.pb")
            with open(f, "wb") as fh:
                fh.write(numpy_helper.from_array(a, name).SerializeToString())
            files.append(f)
        r = subprocess.run(["node", os.path.join(ROOT, "tools/ort_run.js"), path, out_dir] + files,
                           capture_output=True, text=True)
        return r.returncode == 0, r.stderr.strip()
    finally:
        shutil.rmtree(tmp)


def case(name, m, inputs, reference=None):
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    data = os.path.join(d, "test_data_set_0")
    os.makedirs(data)
    path = os.path.join(d, "model.onnx")
    onnx.save(m, path)
    for k, (n, a) in enumerate(inputs):
        with open(os.path.join(data, f"input_{k}.pb"), "wb") as fh:
            fh.write(numpy_helper.from_array(a, n).SerializeToString())
    ok, err = run_ort(path, inputs, data)
    if ok:
        print(f"{name}: ONNX Runtime's outputs")
    elif reference is None:
        sys.exit(f"{name}: ONNX Runtime failed: {err}")
    else:
        ref = os.path.join(d, "reference.onnx")
        onnx.save(reference, ref)
        ok, err2 = run_ort(ref, inputs, data)
        if not ok:
            sys.exit(f"{name}: ONNX Runtime failed on the model ({err}) and the reference ({err2})")
        print(f"{name}: ONNX Runtime's outputs of the unfused reference ({err.splitlines()[-1][:100]})")
    # The graph outputs declare the shapes ONNX Runtime computed (ONNX's checker wants one).
    for k, o in enumerate(m.graph.output):
        t = onnx.TensorProto()
        with open(os.path.join(data, f"output_{k}.pb"), "rb") as fh:
            t.ParseFromString(fh.read())
        o.CopyFrom(helper.make_tensor_value_info(o.name, t.data_type, list(t.dims)))
    onnx.save(m, path)


def gelus():
    x = rand(2, 3, 8)
    b = rand(8)
    case("gelu", model([helper.make_node("Gelu", ["x"], ["y"], domain=MS)], [("x", x)], ["y"]), [("x", x)])
    case("bias_gelu", model([helper.make_node("BiasGelu", ["x", "b"], ["y"], domain=MS)], [("x", x)], ["y"],
                            [init("b", b)]), [("x", x)])
    case("fast_gelu", model([helper.make_node("FastGelu", ["x"], ["y"], domain=MS)], [("x", x)], ["y"]), [("x", x)])
    case("fast_gelu_bias", model([helper.make_node("FastGelu", ["x", "b"], ["y"], domain=MS)], [("x", x)], ["y"],
                                 [init("b", b)]), [("x", x)])
    case("quick_gelu", model([helper.make_node("QuickGelu", ["x"], ["y"], domain=MS)], [("x", x)], ["y"]),
         [("x", x)])
    case("quick_gelu_alpha", model([helper.make_node("QuickGelu", ["x"], ["y"], domain=MS, alpha=1.25)],
                                   [("x", x)], ["y"]), [("x", x)])


def bias_ops():
    x, s, b = rand(2, 3, 8), rand(2, 3, 8), rand(8)
    ref = model([helper.make_node("Add", ["x", "b"], ["t"]), helper.make_node("Add", ["t", "s"], ["y"])],
                [("x", x), ("s", s)], ["y"], [init("b", b)])
    case("bias_add", model([helper.make_node("BiasAdd", ["x", "b", "s"], ["y"], domain=MS)], [("x", x), ("s", s)],
                           ["y"], [init("b", b)]), [("x", x), ("s", s)], ref)
    # BiasSoftmax: rows of data (dims before `axis`) add bias rows: inner broadcast, a bias
    # row per group of consecutive rows (bias [2, 1, 1, 4] on data [2, 2, 3, 4]); outer,
    # cyclic (bias [1, 1, 3, 4]); and axis 2, a softmax over the flattened [3, 4] (the
    # reference: opset 11's flattening Softmax).
    d = rand(2, 2, 3, 4)
    for name, bias_shape, axis, inner in [("bias_softmax_inner", (2, 1, 1, 4), 3, 1),
                                          ("bias_softmax_outer", (1, 1, 3, 4), 3, 0),
                                          ("bias_softmax_axis2", (1, 2, 3, 4), 2, 0)]:
        bb = rand(*bias_shape)
        ref = model([helper.make_node("Add", ["d", "b"], ["t"]), helper.make_node("Softmax", ["t"], ["y"], axis=axis)],
                    [("d", d)], ["y"], [init("b", bb)], opset=11)
        case(name, model([helper.make_node("BiasSoftmax", ["d", "b"], ["y"], domain=MS, axis=axis,
                                           is_inner_broadcast=inner)], [("d", d)], ["y"], [init("b", bb)]),
             [("d", d)], ref)


def fused_matmuls():
    # Each operand's raw shape is chosen so that A' is [2, 3, 4, 5] and B' is [2, 3, 5, 6].
    def raw(shape, trans, batch):
        r = len(shape)
        perm = list(range(1, r - 1)) + [0, r - 1] if batch else list(range(r))
        if trans:
            perm[-1], perm[-2] = perm[-2], perm[-1]
        out = [0] * r
        for j, p in enumerate(perm):
            out[p] = shape[j]
        return tuple(out)

    for ta, tb, ba, bb, alpha in [(0, 0, 0, 0, 0.5), (1, 0, 0, 0, 1.0), (0, 1, 0, 0, 1.0), (0, 1, 1, 1, 0.25),
                                  (1, 0, 1, 0, 2.0), (0, 0, 0, 1, 1.0)]:
        a = rand(*raw((2, 3, 4, 5), ta, ba))
        b = rand(*raw((2, 3, 5, 6), tb, bb))
        n = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain=MS, alpha=alpha, transA=ta, transB=tb,
                             transBatchA=ba, transBatchB=bb)
        case(f"fused_matmul_tA{ta}_tB{tb}_bA{ba}_bB{bb}", model([n], [("a", a), ("b", b)], ["y"]),
             [("a", a), ("b", b)])
    # A constant B (a weight) with transB, rank 2.
    a, w = rand(2, 3, 8), rand(6, 8)
    case("fused_matmul_weight", model([helper.make_node("FusedMatMul", ["a", "w"], ["y"], domain=MS, transB=1,
                                                        alpha=0.5)], [("a", a)], ["y"], [init("w", w)]),
         [("a", a)])


def fused_gemms():
    a, w, c = rand(3, 4), rand(5, 4), rand(5)
    for act, attrs in [("Relu", {}), ("Tanh", {}), ("Sigmoid", {}),
                       ("HardSigmoid", {"activation_alpha": 0.3, "activation_beta": 0.4})]:
        n = helper.make_node("FusedGemm", ["a", "w", "c"], ["y"], domain=MS, transB=1, alpha=0.5, beta=2.0,
                             activation=act, **attrs)
        case(f"fused_gemm_{act.lower()}", model([n], [("a", a)], ["y"], [init("w", w), init("c", c)]), [("a", a)])
    n = helper.make_node("FusedGemm", ["a", "w", "c"], ["y"], domain=MS, transB=1, activation="LeakyRelu",
                         activation_alpha=0.1)
    case("fused_gemm_leakyrelu_audit", model([n], [("a", a)], ["y"], [init("w", w), init("c", c)]), [("a", a)])


def norms():
    x, s = rand(2, 3, 8), rand(2, 3, 8)
    g, be, bi = 1 + 0.1 * rand(8), 0.1 * rand(8), 0.1 * rand(8)
    inits = [init("gamma", g), init("beta", be), init("bias", bi)]
    n = helper.make_node("SkipLayerNormalization", ["x", "s", "gamma", "beta", "bias"], ["y", "mean", "inv_std", "sum"],
                         domain=MS, epsilon=1e-5)
    case("skip_layer_norm_all", model([n], [("x", x), ("s", s)], ["y", "mean", "inv_std", "sum"], inits),
         [("x", x), ("s", s)])
    n = helper.make_node("SkipLayerNormalization", ["x", "s", "gamma"], ["y"], domain=MS)
    case("skip_layer_norm_plain", model([n], [("x", x), ("s", s)], ["y"], inits[:1]), [("x", x), ("s", s)])
    n = helper.make_node("SkipSimplifiedLayerNormalization", ["x", "s", "gamma", "bias"], ["y", "", "inv_std", "sum"],
                         domain=MS, epsilon=1e-5)
    case("skip_simplified_layer_norm", model([n], [("x", x), ("s", s)], ["y", "inv_std", "sum"],
                                             [inits[0], inits[2]]), [("x", x), ("s", s)])
    n = helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["y"], axis=-1, epsilon=1e-5)
    case("layer_norm_opset14", model([n], [("x", x)], ["y"], inits[:2], opset=14), [("x", x)])
    n = helper.make_node("SimplifiedLayerNormalization", ["x", "gamma"], ["y"], axis=-1, epsilon=1e-5)
    case("simplified_layer_norm_opset14", model([n], [("x", x)], ["y"], inits[:1], opset=14), [("x", x)])


def embed_norms():
    ids = np.array([[1, 4, 2, 9], [0, 3, 3, 7]], dtype=np.int64)
    seg = np.array([[0, 0, 1, 1], [0, 1, 1, 1]], dtype=np.int64)
    pos = np.array([[3, 2, 1, 0]], dtype=np.int64)
    inits = [init("word_table", rand(10, 8)), init("pos_table", rand(6, 8)), init("seg_table", rand(2, 8)),
             init("gamma", 1 + 0.1 * rand(8)), init("beta", 0.1 * rand(8))]
    cast = lambda v: helper.make_node("Cast", [v], [v + "32"], to=TensorProto.INT32)

    def emb_model(nodes, ins, outs):
        m = model(nodes, [], outs, inits)
        for name, a in ins:
            m.graph.input.append(helper.make_tensor_value_info(name, TensorProto.INT64, a.shape))
        return m
    n = helper.make_node("EmbedLayerNormalization", ["ids32", "seg32", "word_table", "pos_table", "seg_table", "gamma", "beta"],
                         ["y", "", "sum"], name="emb", domain=MS, epsilon=1e-5)
    case("embed_layer_norm", emb_model([cast("ids"), cast("seg"), n], [("ids", ids), ("seg", seg)], ["y", "sum"]),
         [("ids", ids), ("seg", seg)])
    n = helper.make_node("EmbedLayerNormalization", ["ids32", "", "word_table", "pos_table", "", "gamma", "beta", "", "pos_ids32"],
                         ["y", "mask_index"], name="emb", domain=MS)
    case("embed_layer_norm_position_ids", emb_model([cast("ids"), cast("pos_ids"), n],
                                                    [("ids", ids), ("pos_ids", pos)], ["y"]),
         [("ids", ids), ("pos_ids", pos)])


def embed_bert():
    # The committed BERT as ONNX Runtime saves it at level `extended`, its embeddings fused
    # into EmbedLayerNormalization as ONNX Runtime's transformer optimizer fuses BERT's (the
    # offline optimizer does not): Cast(input_ids) to int32, the word and position tables,
    # no segment input (the export adds token_type row 0 to every token: here added to the
    # position table), the embedding LayerNorm's gamma, beta and epsilon. Ids [1, 16] (16
    # positions). The fold benchmark of docs/benchmarks.md times it.
    m = onnx.load(os.path.join(ROOT, "tests/data/onnx/ort_optimized/bert_tiny_opset17_extended.onnx"))
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    ln = next(n for n in g.node if n.op_type == "LayerNormalization" and n.input[1] == "emb_norm.weight")
    pos = numpy_helper.to_array(inits["position.weight"]) + numpy_helper.to_array(inits["token_type.weight"])[0]
    inits["position.weight"].CopyFrom(numpy_helper.from_array(pos.astype(np.float32), "position.weight"))
    eps = next(a.f for a in ln.attribute if a.name == "epsilon")
    fused = [helper.make_node("Cast", ["input_ids"], ["input_ids_int32"], name="embeddings/Cast", to=TensorProto.INT32),
             helper.make_node("EmbedLayerNormalization", ["input_ids_int32", "", "word.weight", "position.weight", "",
                                                          "emb_norm.weight", "emb_norm.bias"],
                              [ln.output[0], "mask_index"], name="embeddings", domain=MS, epsilon=eps)]
    at = list(g.node).index(ln)
    nodes = list(g.node[:at]) + fused + list(g.node[at + 1:])
    # The nodes the embeddings' sum alone read (the lookups, the position ids, the adds) go.
    while True:
        read = {i for n in nodes for i in n.input} | {o.name for o in g.output}
        dead = [n for n in nodes if n.domain != MS and not any(o in read for o in n.output)]
        if not dead:
            break
        nodes = [n for n in nodes if n not in dead]
    del g.node[:]
    g.node.extend(nodes)
    used = {i for n in nodes for i in n.input}
    kept = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(kept)
    del g.value_info[:]
    ids = np.random.default_rng(16).integers(0, 64, size=(1, 16)).astype(np.int64)
    g.input[0].CopyFrom(helper.make_tensor_value_info("input_ids", TensorProto.INT64, ids.shape))
    m.producer_name = "lnverify make_onnx_contrib_models.py"
    case("embed_layer_norm_bert", m, [("input_ids", ids)])


def attentions():
    x = rand(2, 3, 8)
    w, wb = rand(8, 24), rand(24)
    for name, attrs, weights in [("attention", {}, (w, wb)), ("attention_unidirectional", {"unidirectional": 1}, (w, wb)),
                                 # (onnxruntime-node 1.30 crashes on an Attention without its bias)
                                 ("attention_scale", {"scale": 0.3}, (w, wb)),
                                 ("attention_qkv_hidden_sizes", {"qkv_hidden_sizes": [8, 8, 4]},
                                  (rand(8, 20), rand(20)))]:
        ins = ["x", "w"] + (["wb"] if weights[1] is not None else [])
        inits = [init("w", weights[0])] + ([init("wb", weights[1])] if weights[1] is not None else [])
        n = helper.make_node("Attention", ins, ["y"], name="attn", domain=MS, num_heads=2, **attrs)
        case(name, model([n], [("x", x)], ["y"], inits), [("x", x)])
    mask = np.array([[1, 1, 0], [1, 1, 1]], dtype=np.int32)
    n = helper.make_node("Attention", ["x", "w", "wb", "mask"], ["y"], name="attn", domain=MS, num_heads=2)
    g = model([n], [("x", x)], ["y"], [init("w", w), init("wb", wb)])
    g.graph.initializer.append(numpy_helper.from_array(mask, "mask"))
    case("attention_mask_audit", g, [("x", x)])


def unshaped_audit():
    # x -> LN a (a graph output); x -> MultiHeadAttention -> + x -> LN b: lnverify has no
    # schema for MultiHeadAttention, so its output shape is unknown: LN b is a "no" naming
    # it and LN a keeps its verdict.
    x = rand(2, 3, 8)
    g, be = 1 + 0.1 * rand(8), 0.1 * rand(8)
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["h"], name="fc"),
             helper.make_node("LayerNormalization", ["h", "gamma", "beta"], ["ya"], name="ln_a", axis=-1),
             helper.make_node("MultiHeadAttention", ["x", "x", "x"], ["att"], name="mha", domain=MS, num_heads=2),
             helper.make_node("Add", ["att", "x"], ["r"], name="residual"),
             helper.make_node("LayerNormalization", ["r", "gamma", "beta"], ["yb"], name="ln_b", axis=-1)]
    case("mha_unshaped_audit", model(nodes, [("x", x)], ["ya", "yb"],
                                     [init("w0", rand(8, 8)), init("gamma", g), init("beta", be)]), [("x", x)])


def unshaped_decomposed_audit():
    # The same, the norms spelled out as torch.onnx.export writes them (ReduceMean, Sub, Pow,
    # ReduceMean, Add eps, Sqrt, Div, Mul weight, Add bias; an RMSNorm without the centering):
    # LN b and RMSNorm c after the MultiHeadAttention are a "no" naming it, LN a beside it
    # keeps its verdict.
    x = rand(2, 3, 8)
    g, be = 1 + 0.1 * rand(8), 0.1 * rand(8)

    def decomposed(name, v, out, centered=True):
        p = f"/{name}/"
        nodes = []
        if centered:
            nodes += [helper.make_node("ReduceMean", [v], [p + "mean"], name=p + "ReduceMean", axes=[-1]),
                      helper.make_node("Sub", [v, p + "mean"], [p + "d"], name=p + "Sub")]
            v = p + "d"
        nodes += [helper.make_node("Pow", [v, "two"], [p + "sq"], name=p + "Pow"),
                  helper.make_node("ReduceMean", [p + "sq"], [p + "var"], name=p + "ReduceMean_1", axes=[-1]),
                  helper.make_node("Add", [p + "var", "eps"], [p + "var_eps"], name=p + "Add"),
                  helper.make_node("Sqrt", [p + "var_eps"], [p + "std"], name=p + "Sqrt"),
                  helper.make_node("Div", [v, p + "std"], [p + "normed"], name=p + "Div"),
                  helper.make_node("Mul", [p + "normed", "gamma"], [p + "scaled" if centered else out], name=p + "Mul")]
        if centered:
            nodes.append(helper.make_node("Add", [p + "scaled", "beta"], [out], name=p + "Add_1"))
        return nodes
    nodes = ([helper.make_node("MatMul", ["x", "w0"], ["h"], name="fc")] + decomposed("ln_a", "h", "ya") +
             [helper.make_node("MultiHeadAttention", ["x", "x", "x"], ["att"], name="mha", domain=MS, num_heads=2),
              helper.make_node("Add", ["att", "x"], ["r"], name="residual")] + decomposed("ln_b", "r", "yb") +
             decomposed("rms_c", "att", "yc", centered=False))
    inits = [init("w0", rand(8, 8)), init("gamma", g), init("beta", be), init("two", np.array(2.0)),
             init("eps", np.array(1e-5))]
    case("mha_decomposed_unshaped_audit", model(nodes, [("x", x)], ["ya", "yb", "yc"], inits, opset=17), [("x", x)])


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    gelus()
    bias_ops()
    fused_matmuls()
    fused_gemms()
    norms()
    embed_norms()
    attentions()
    unshaped_audit()
    embed_bert()
    unshaped_decomposed_audit()
