#!/bin/bash
# Bad ONNX input: each case exits 2 with a message naming the node, initializer or file,
# and `import` and `fold` write nothing. The bad files are built here, with ONNX's Python
# helper and by byte surgery on a good one.
source "$(dirname "$0")/cli_lib.sh"

/usr/bin/python3 - "$T" <<'PY' || { bad "building the bad models"; finish; exit 1; }
import os, sys
import numpy as np
from onnx import helper as h, numpy_helper, TensorProto as TP

out = sys.argv[1]
os.makedirs(os.path.join(out, "sub"), exist_ok=True)
rng = np.random.default_rng(0)
W = rng.standard_normal((64, 512)).astype(np.float32)  # 32768 values: left in its file
G = (1 + 0.1 * rng.standard_normal(512)).astype(np.float32)
B = (0.1 * rng.standard_normal(512)).astype(np.float32)


def tensor(name, a, raw=True):
    t = numpy_helper.from_array(a, name)
    if not raw:
        t = h.make_tensor(name, TP.FLOAT, a.shape, a.flatten().tolist())
    return t


def save(name, nodes, inits, opsets=(("", 17),), inputs=None):
    g = h.make_graph(nodes, "g", inputs or [h.make_tensor_value_info("x", TP.FLOAT, [2, 64])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [2, 512])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid(d, v) for d, v in opsets])
    m.ir_version = 8
    with open(os.path.join(out, name), "wb") as f:
        f.write(m.SerializeToString())


def good_nodes(mm_inputs=("x", "w")):
    return [h.make_node("MatMul", list(mm_inputs), ["h"], name="proj"),
            h.make_node("LayerNormalization", ["h", "ln.weight", "ln.bias"], ["y"], name="ln", axis=-1)]


def inits(w=W, g=G, b=B):
    return [tensor("w", w), tensor("ln.weight", g), tensor("ln.bias", b)]


save("good.onnx", good_nodes(), inits())
# A cycle: proj reads the LayerNorm's output, which reads proj's.
save("cycle.onnx", [h.make_node("Add", ["x2", "y"], ["h0"], name="loop_add"),
                    h.make_node("MatMul", ["h0", "w"], ["h"], name="proj"),
                    h.make_node("LayerNormalization", ["h", "ln.weight", "ln.bias"], ["y"], name="ln")],
     inits(), inputs=[h.make_tensor_value_info("x2", TP.FLOAT, [2, 64])])
save("missing_input.onnx", good_nodes(("x", "nowhere")), inits())
save("missing_initializer.onnx", good_nodes(), [tensor("w", W), tensor("ln.bias", B)])
short_raw = tensor("w", W)
short_raw.raw_data = short_raw.raw_data[:-4]
save("short_raw_large.onnx", good_nodes(), [short_raw, tensor("ln.weight", G), tensor("ln.bias", B)])
short_small = tensor("ln.weight", G)
short_small.raw_data = short_small.raw_data[:-4]
save("short_raw_small.onnx", good_nodes(), [tensor("w", W), short_small, tensor("ln.bias", B)])
short_typed = tensor("ln.bias", B, raw=False)
del short_typed.float_data[-1]
save("short_typed.onnx", good_nodes(), [tensor("w", W), tensor("ln.weight", G), short_typed])


def external(name, location, length=None):
    t = TP()
    t.name, t.data_type = "w", TP.FLOAT
    t.dims.extend(W.shape)
    t.data_location = TP.EXTERNAL
    entries = [("location", location)] + ([("length", str(length))] if length else [])
    for k, v in entries:
        e = t.external_data.add()
        e.key, e.value = k, v
    save(name, good_nodes(), [t, tensor("ln.weight", G), tensor("ln.bias", B)])


with open(os.path.join(out, "short.bin"), "wb") as f:
    f.write(W.tobytes()[:1000])
with open(os.path.join(out, "outside.bin"), "wb") as f:
    f.write(W.tobytes())
external("sub/external_missing.onnx", "absent.bin")
external("external_short.onnx", "short.bin")
external("external_short_length.onnx", "short.bin", W.nbytes)
external("sub/external_parent.onnx", "../outside.bin")
external("sub/external_absolute.onnx", os.path.join(out, "outside.bin"))
save("unknown_domain.onnx", [h.make_node("MatMul", ["x", "w"], ["h"], name="proj"),
                             h.make_node("FancyNorm", ["h"], ["y"], name="fancy", domain="com.example")],
     inits())
nan_w = W.copy()
nan_w[3, 7] = np.nan
save("nan_large.onnx", good_nodes(), inits(w=nan_w))
inf_g = G.copy()
inf_g[5] = np.inf
save("inf_norm_weight.onnx", good_nodes(), inits(g=inf_g))
# Tokens merged in pairs, x.view(B, T // 2, 2 * D) as torch exports it (the shape read
# from the input): a free seq of 1 does not fit (T // 2 is 0), a free batch of 1 does.
D = 4
pairs = [h.make_node("Shape", ["x"], ["s"], name="/Shape"),
         h.make_node("Gather", ["s", "i0"], ["b"], name="/Gather", axis=0),
         h.make_node("Gather", ["s", "i1"], ["t"], name="/Gather_1", axis=0),
         h.make_node("Div", ["t", "two"], ["half"], name="/Div"),
         h.make_node("Concat", ["b", "half", "width"], ["shape"], name="/Concat", axis=0),
         h.make_node("Reshape", ["x", "shape"], ["m"], name="/Reshape"),
         h.make_node("LayerNormalization", ["m", "ln.weight", "ln.bias"], ["y"], name="ln", axis=-1)]
g = h.make_graph(pairs, "pairs", [h.make_tensor_value_info("x", TP.FLOAT, ["batch", "seq", D])],
                 [h.make_tensor_value_info("y", TP.FLOAT, ["batch", None, 2 * D])],
                 [numpy_helper.from_array(np.array([0], np.int64), "i0"),
                  numpy_helper.from_array(np.array([1], np.int64), "i1"),
                  numpy_helper.from_array(np.array([2], np.int64), "two"),
                  numpy_helper.from_array(np.array([2 * D], np.int64), "width"),
                  tensor("ln.weight", G[:2 * D]), tensor("ln.bias", B[:2 * D])])
m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
m.ir_version = 8
with open(os.path.join(out, "token_pairs.onnx"), "wb") as f:
    f.write(m.SerializeToString())
m.graph.initializer[4].CopyFrom(tensor("ln.weight", inf_g[:2 * D]))
with open(os.path.join(out, "token_pairs_inf.onnx"), "wb") as f:
    f.write(m.SerializeToString())
PY

run "the good model imports" 0 "$LNV" import "$T/good.onnx" -o "$T/good.json"

# bad NAME FILE PATTERN: import and fold exit 2 naming PATTERN and write nothing; audit
# exits 2 too.
refused() {
  local name="$1" file="$2" pattern="$3"
  run "$name: import" 2 "$LNV" import "$file" -o "$T/o.json"
  has "$name: names it" "$pattern"
  absent "$name: import writes nothing" "$T/o.json"
  run "$name: fold" 2 "$LNV" fold "$file" -o "$T/f.json"
  absent "$name: fold writes nothing" "$T/f.json"
  run "$name: audit" 2 "$LNV" audit "$file"
}

head -c 3000 "$T/good.onnx" > "$T/truncated.onnx"
refused "truncated" "$T/truncated.onnx" "truncated\.onnx: not an ONNX model"
printf 'PK\003\004 not onnx' > "$T/foreign.onnx"
refused "non-ONNX bytes" "$T/foreign.onnx" "foreign\.onnx: not an ONNX model"
refused "cycle" "$T/cycle.onnx" \
  "node 'loop_add' \(Add\): the graph has a cycle: 'loop_add' \(Add\) reads 'ln' \(LayerNormalization\) reads 'proj' \(MatMul\) reads 'loop_add' \(Add\)"
# ONNX's checker finds these; its message spans lines: the value, then the node.
refused "a node input missing" "$T/missing_input.onnx" "input 'nowhere' of node"
has "a node input missing: names the node" "name: proj OpType: MatMul"
refused "an initializer missing" "$T/missing_initializer.onnx" "input 'ln.weight' of node"
has "an initializer missing: names the node" "name: ln OpType: LayerNormalization"
refused "short raw_data (left in the file)" "$T/short_raw_large.onnx" \
  "initializer 'w': raw_data holds 131068 bytes; FLOAT of these dims needs 131072"
refused "short raw_data (small)" "$T/short_raw_small.onnx" \
  "initializer 'ln.weight': raw_data holds 2044 bytes; FLOAT of these dims needs 2048"
refused "short float_data" "$T/short_typed.onnx" \
  "initializer 'ln.bias': float_data holds 511 values; the dims need 512"
refused "external data file missing" "$T/sub/external_missing.onnx" "tensor name: w\) should be stored in .*absent\.bin"
refused "external data file too short" "$T/external_short.onnx" \
  "initializer 'w': external data holds 1000 bytes; the tensor's type and dims need 131072"
refused "external data length past the file's end" "$T/external_short_length.onnx" \
  "initializer 'w': external data file 'short\.bin' is too short"
refused "external data in ../" "$T/sub/external_parent.onnx" \
  "initializer 'w': external data location '\.\./outside\.bin' is outside the model's folder; refused"
refused "external data at an absolute path" "$T/sub/external_absolute.onnx" \
  "initializer 'w': external data location '/.*outside\.bin' is outside the model's folder; refused"
refused "unknown domain" "$T/unknown_domain.onnx" "com\.example"
refused "Inf in a LayerNorm weight" "$T/inf_norm_weight.onnx" "initializer 'ln\.weight' holds a non-finite value"

# Over 2 GiB without external data: refused from the file's size, before anything is
# read (a sparse file: nothing is written to disk).
truncate -s 2G "$T/huge.onnx"
refused "a 2 GiB file" "$T/huge.onnx" "huge\.onnx: the file is 2147483648 bytes, 2 GiB or more: over protobuf's limit"

# A NaN in a weight the analysis does not read (the MatMul's): audit never reads it;
# every command that evaluates or writes the weights refuses it, naming it.
run "NaN in a weight the analysis does not read: audit" 0 "$LNV" audit "$T/nan_large.onnx"
run "NaN in a weight: import" 2 "$LNV" import "$T/nan_large.onnx" -o "$T/o.json"
has "NaN in a weight: import names it" "nan_large\.onnx: initializer 'w': holds a non-finite value \(nan\) at flat index 1543"
absent "NaN in a weight: import writes nothing" "$T/o.json"
run "NaN in a weight: check" 2 "$LNV" check "$T/nan_large.onnx"
has "NaN in a weight: check names it" "initializer 'w': holds a non-finite value"

# Free dims bound to 1 that the graph's shapes do not fit: every command exits 2 with the
# reader's error, naming the dim that does not fit (seq, not batch) and saying to pass
# --dim; nothing is written. With seq bound, the model is read.
for cmd in audit check eval; do
  run "free seq of 1 that does not fit: $cmd" 2 "$LNV" $cmd "$T/token_pairs.onnx"
  has "free seq: $cmd warns, naming both free dims" "warning: .*token_pairs\.onnx: binding the free input dims batch, seq to 1"
  has "free seq: $cmd names the dim and says to pass --dim" \
    "node '/Reshape'.*cannot reshape .*; the free dim seq, bound to 1, does not fit the graph's shapes \(it imports with --dim seq=8\): pass --dim seq=VALUE$"
done
run "free seq of 1 that does not fit: fold" 2 "$LNV" fold "$T/token_pairs.onnx" -o "$T/tp.onnx"
has "free seq: fold names the dim" "the free dim seq, bound to 1, does not fit"
absent "free seq: fold writes nothing" "$T/tp.onnx"
run "seq bound, batch free: audit" 0 "$LNV" audit "$T/token_pairs.onnx" --dim seq=6
has "seq bound: batch alone is bound to 1" "warning: .*binding the free input dim batch to 1"
run "a bound seq that does not fit" 2 "$LNV" audit "$T/token_pairs.onnx" --dim seq=3
has "a bound seq that does not fit: the reader's error" "cannot reshape input 'x' of shape \[1, 3, 4\]"
lacks "a bound seq that does not fit: no free dim is blamed" "pass --dim"
# A failure that no value of the free dims changes is not blamed on them.
run "a non-finite weight with free dims" 2 "$LNV" check "$T/token_pairs_inf.onnx"
has "a non-finite weight with free dims: names it" "initializer 'ln\.weight' holds a non-finite value"
lacks "a non-finite weight with free dims: no free dim is blamed" "pass --dim"

# fold --mode training to ONNX: the options of a model.json output do not apply, and a
# norm weight the file computes (a float16 initializer Cast to float) cannot be read as a
# stored parameter; each exits 2 naming the option or value, and writes nothing.
for opt in "--weights $T/w.safetensors" "--inline" "--weights-dtype f32"; do
  # shellcheck disable=SC2086
  run "training fold to ONNX with $opt" 2 "$LNV" fold "$T/good.onnx" -o "$T/t.onnx" --mode training $opt
  has "training fold, $opt: names it" "${opt%% *}: applies to a model.json output"
  absent "training fold, $opt: nothing written" "$T/t.onnx"
  absent "training fold, $opt: no weights file" "$T/w.safetensors"
done
/usr/bin/python3 - "$T/cast_scale.onnx" <<'PY'
import sys
import numpy as np
from onnx import helper as h, numpy_helper, TensorProto as TP
import onnx
rng = np.random.default_rng(0)
t = lambda n, a: numpy_helper.from_array(a, n)
nodes = [h.make_node("MatMul", ["x", "w"], ["a"], name="proj"),
         h.make_node("Cast", ["g16"], ["g"], name="cast_scale", to=TP.FLOAT),
         h.make_node("LayerNormalization", ["a", "g", "b"], ["y"], name="ln", axis=-1)]
g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, [2, 64])],
                 [h.make_tensor_value_info("y", TP.FLOAT, [2, 16])],
                 [t("w", rng.standard_normal((64, 16)).astype(np.float32)),
                  t("g16", (1 + 0.1 * rng.standard_normal(16)).astype(np.float16)),
                  t("b", (0.1 * rng.standard_normal(16)).astype(np.float32))])
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), sys.argv[1])
PY
run "a computed norm weight: the inference fold writes it" 0 "$LNV" fold "$T/cast_scale.onnx" -o "$T/c.onnx"
run "a computed norm weight: the training fold refuses" 2 "$LNV" fold "$T/cast_scale.onnx" -o "$T/ct.onnx" --mode training
has "a computed norm weight: names it" "--mode training: the RMSNorm at 'ln/RMS' reads its weight 'g', which the file does not store as an initializer"
absent "a computed norm weight: nothing written" "$T/ct.onnx"

# --- ONNX Runtime's contrib ops: a missing input, a wrong attribute, a bias of the wrong
# shape, an attribute the op does not have, and the CPU-specific nchwc layout ops ---------
/usr/bin/python3 - "$T" <<'PY' || bad "building the bad contrib models"
import os, sys
import numpy as np
from onnx import helper as h, numpy_helper, TensorProto as TP
out = sys.argv[1]
rng = np.random.default_rng(0)
t = lambda n, a: numpy_helper.from_array(np.asarray(a, np.float32), n)
MS = "com.microsoft"


def save(name, node, inits, y_shape=(2, 3, 8), opsets=(("", 17), (MS, 1))):
    g = h.make_graph([node], "g", [h.make_tensor_value_info("x", TP.FLOAT, [2, 3, 8])],
                     [h.make_tensor_value_info("y", TP.FLOAT, list(y_shape))], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid(d, v) for d, v in opsets])
    m.ir_version = 8
    with open(os.path.join(out, name), "wb") as f:
        f.write(m.SerializeToString())


w = t("w", rng.standard_normal((8, 8)))
g8 = t("gamma", 1 + 0.1 * rng.standard_normal(8))
save("c_missing_input.onnx", h.make_node("FusedMatMul", ["x"], ["y"], name="mm", domain=MS), [])
save("c_bad_trans.onnx", h.make_node("FusedMatMul", ["x", "w"], ["y"], name="mm", domain=MS, transB=2), [w])
save("c_bad_activation.onnx", h.make_node("FusedGemm", ["x2", "w"], ["y"], name="gemm", domain=MS,
                                          activation="Swish"), [w, t("x2", np.ones((3, 8)))], y_shape=(3, 8))
save("c_skip_no_gamma.onnx", h.make_node("SkipLayerNormalization", ["x", "x"], ["y"], name="sln", domain=MS), [])
save("c_bias_shape.onnx", h.make_node("BiasGelu", ["x", "b"], ["y"], name="bg", domain=MS),
     [t("b", np.ones(5))])
save("c_unknown_attr.onnx", h.make_node("Gelu", ["x"], ["y"], name="gelu", domain=MS, approximate="tanh"), [])
save("c_softmax_no_broadcast.onnx", h.make_node("BiasSoftmax", ["x", "b"], ["y"], name="bsm", domain=MS, axis=2),
     [t("b", np.ones((1, 3, 8)))])
save("c_nchwc.onnx", h.make_node("ReorderInput", ["x"], ["y"], name="reorder", domain="com.microsoft.nchwc"),
     [], opsets=(("", 17), (MS, 1), ("com.microsoft.nchwc", 1)))
PY
contrib_bad() {  # NAME FILE PATTERN: audit and fold exit 2 with PATTERN, fold writes nothing
  run "$1: audit" 2 "$LNV" audit "$T/$2"
  has "$1: says so" "$3"
  run "$1: fold" 2 "$LNV" fold "$T/$2" -o "$T/$2.out.onnx"
  absent "$1: nothing written" "$T/$2.out.onnx"
}
contrib_bad "FusedMatMul without B" c_missing_input.onnx "Node \(mm\) has input size 1 not in range \[min=2, max=2\]"
contrib_bad "FusedMatMul transB=2" c_bad_trans.onnx "node 'mm' \(com.microsoft.FusedMatMul\): transB is 2; expected 0 or 1"
contrib_bad "FusedGemm activation Swish" c_bad_activation.onnx "node 'gemm' \(com.microsoft.FusedGemm\): activation 'Swish' is not an activation ONNX Runtime fuses"
contrib_bad "SkipLayerNormalization without gamma" c_skip_no_gamma.onnx "Node \(sln\) has input size 2 not in range \[min=3, max=5\]"
contrib_bad "BiasGelu bias of 5 on 8" c_bias_shape.onnx "node 'bg' \(com.microsoft.BiasGelu\): input 1 \('b'\) has shape \[5\]"
contrib_bad "Gelu with an attribute it lacks" c_unknown_attr.onnx "Unrecognized attribute: approximate for operator Gelu"
has "Gelu with an attribute it lacks: names the node" "Name: gelu OpType: Gelu"
contrib_bad "BiasSoftmax without is_inner_broadcast" c_softmax_no_broadcast.onnx "Required attribute 'is_inner_broadcast' is missing"
has "BiasSoftmax without is_inner_broadcast: names the node" "Name: bsm OpType: BiasSoftmax"

# --- Attention and MultiHeadAttention: a mask_index form or an input lnverify does not
# model, a missing input, num_heads that do not split the hidden size ----------------------
/usr/bin/python3 - "$T" <<'PY' || bad "building the bad attention models"
import os, sys
import numpy as np
from onnx import helper as h, numpy_helper, TensorProto as TP
out = sys.argv[1]
rng = np.random.default_rng(0)
t = lambda n, a: numpy_helper.from_array(np.asarray(a, np.float32), n)
MS = "com.microsoft"
qkv = [t("w", rng.standard_normal((8, 24))), t("wb", rng.standard_normal(24))]


def save(name, nodes, inits, ints=(), floats=(("x", [2, 3, 8]),)):
    ins = [h.make_tensor_value_info(n, TP.FLOAT, s) for n, s in floats]
    ins += [h.make_tensor_value_info(n, TP.INT32, s) for n, s in ints]
    g = h.make_graph(nodes, "g", ins, [h.make_tensor_value_info("y", TP.FLOAT, [2, 3, 8])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid(MS, 1)])
    m.ir_version = 8
    with open(os.path.join(out, name), "wb") as f:
        f.write(m.SerializeToString())


att = lambda ins, **a: h.make_node("Attention", ins, ["y"], name="attn", domain=MS, **{"num_heads": 2, **a})
mha = lambda ins, **a: h.make_node("MultiHeadAttention", ins, ["y"], name="mha", domain=MS, **{"num_heads": 2, **a})
save("a_end_start.onnx", [att(["x", "w", "wb", "mask"])], qkv, ints=[("mask", [4])])
save("a_megatron.onnx", [att(["x", "w", "wb", "mask"])], qkv, ints=[("mask", [2, 1, 3, 3])])
save("a_computed.onnx", [h.make_node("ReduceSum", ["m2", "axis1"], ["mask"], name="mask_sum", keepdims=0),
                         att(["x", "w", "wb", "mask"])],
     qkv + [numpy_helper.from_array(np.array([1], np.int64), "axis1")], ints=[("m2", [2, 3])])
save("a_past.onnx", [att(["x", "w", "wb", "", "past"])], qkv, floats=[("x", [2, 3, 8]), ("past", [2, 2, 2, 1, 4])])
save("a_missing.onnx", [att(["x"])], [])
save("a_heads.onnx", [att(["x", "w", "wb"], num_heads=3)], qkv)
save("m_heads.onnx", [mha(["x", "x", "x"], num_heads=3)], [])
save("m_no_value.onnx", [mha(["x", "x"])], [])
save("m_attention_bias.onnx", [mha(["x", "x", "x", "", "", "ab"])], [], floats=[("x", [2, 3, 8]), ("ab", [1, 2, 3, 3])])
save("m_end_start.onnx", [mha(["x", "x", "x", "", "mask"])], [], ints=[("mask", [4])])
# EmbedLayerNormalization's mask_index read by an Attention, its mask computed in the
# graph (lnverify counts a mask that is an integer graph input).
table = lambda n, r: t(n, rng.standard_normal((r, 8)))
embed = h.make_node("EmbedLayerNormalization", ["ids", "", "word", "pos", "", "g", "b", "mask"],
                    ["emb", "mask_index"], name="embed", domain=MS)
save("e_mask_computed.onnx", [h.make_node("Add", ["m", "one"], ["mask"], name="mask_add"), embed,
                              att(["emb", "w", "wb", "mask_index"])],
     qkv + [table("word", 10), table("pos", 6), t("g", np.ones(8)), t("b", np.zeros(8)),
            numpy_helper.from_array(np.array(1, np.int32), "one")],
     ints=[("ids", [2, 3]), ("m", [2, 3])], floats=())
PY
contrib_bad "Attention mask_index of end/start positions" a_end_start.onnx "node 'attn' \(com.microsoft.Attention\): mask_index \('mask'\) of shape \[4\] is the end/start positions form, which lnverify does not model"
contrib_bad "Attention mask_index of Megatron's 4-D form" a_megatron.onnx "node 'attn' \(com.microsoft.Attention\): mask_index \('mask'\) of shape \[2, 1, 3, 3\] is not a form lnverify models"
contrib_bad "Attention mask_index computed in the graph" a_computed.onnx "node 'attn' \(com.microsoft.Attention\): mask_index \('mask'\) of shape \[2\] is computed by node 'mask_sum' \(ReduceSum\)"
contrib_bad "Attention with past" a_past.onnx "node 'attn' \(com.microsoft.Attention\): past or present state .* is not modelled"
contrib_bad "Attention without weights" a_missing.onnx "Node \(attn\) has input size 1 not in range \[min=2, max=7\]"
contrib_bad "Attention num_heads 3 on hidden 8" a_heads.onnx "node 'attn' \(com.microsoft.Attention\): num_heads 3 and qkv_hidden_sizes \[8, 8, 8\] do not split"
contrib_bad "MultiHeadAttention num_heads 3 on hidden 8" m_heads.onnx "node 'mha' \(com.microsoft.MultiHeadAttention\): num_heads 3 does not divide the hidden sizes 8"
contrib_bad "MultiHeadAttention without value" m_no_value.onnx "node 'mha' \(com.microsoft.MultiHeadAttention\): query \('x'\) of shape \[2, 3, 8\] with key given and value absent"
contrib_bad "MultiHeadAttention attention_bias" m_attention_bias.onnx "node 'mha' \(com.microsoft.MultiHeadAttention\): attention_bias \('ab'\) is not modelled"
contrib_bad "MultiHeadAttention key_padding_mask of end/start positions" m_end_start.onnx "node 'mha' \(com.microsoft.MultiHeadAttention\): key_padding_mask \('mask'\) of shape \[4\] is the end/start positions form"
contrib_bad "EmbedLayerNormalization mask_index of a computed mask" e_mask_computed.onnx "node 'attn' \(com.microsoft.Attention\): mask_index \('mask_index'\) of shape \[2\] is the mask_index of node 'embed' \(com.microsoft.EmbedLayerNormalization\), counted from its mask \('mask'\), which lnverify does not model there"
E="$ROOT/tests/data/onnx/contrib/embed_layer_norm_position_ids/model.onnx"
contrib_bad "nchwc layout ops" c_nchwc.onnx "node 'reorder' \(com.microsoft.nchwc.ReorderInput\).*save the model at level 'extended'"

finish
