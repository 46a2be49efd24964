#!/usr/bin/python3
"""Writes the other spelling of a folded EmbedLayerNormalization, for the benchmark of
docs/benchmarks.md ("EmbedLayerNormalization's fold"): `lnverify fold` keeps the node over
its centered tables; this script replaces it in such a fold by its lookups (Gather of the
word table, Slice of the position table's first rows, or a Gather by position_ids, Gather
of the segment table), their Add, and ONNX Runtime's SimplifiedLayerNormalization (the
RMSNorm) with the beta Add after it. The mask_index output is refused when read (this
spelling does not compute it).

    /usr/bin/python3 bench/embed_norm_unfused.py FOLDED.onnx OUT.onnx
"""
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper


def main(src, out):
    m = onnx.load(src)
    g = m.graph
    at = next(k for k, n in enumerate(g.node) if n.op_type == "EmbedLayerNormalization")
    e = g.node[at]
    read = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    if len(e.output) > 1 and e.output[1] and e.output[1] in read:
        sys.exit(f"{src}: the mask_index output of '{e.name}' is read; this spelling does not compute it")
    ins = list(e.input) + [""] * (9 - len(e.input))
    eps = next((a.f for a in e.attribute if a.name == "epsilon"), 1e-12)
    base = e.name
    # The ids before the Cast to int32 that ONNX Runtime's fusion adds (Gather takes int64).
    casts = {n.output[0]: n.input[0] for n in g.node if n.op_type == "Cast"}
    ids = lambda v: casts.get(v, v)
    nodes = [helper.make_node("Gather", [ins[2], ids(ins[0])], [base + "/word"], name=base + "/word", axis=0)]
    if ins[8]:
        nodes.append(helper.make_node("Gather", [ins[3], ids(ins[8])], [base + "/position"], name=base + "/position", axis=0))
    else:
        # rows 0 .. S-1, S the ids' second dim (Shape with start and end: opset 15)
        g.initializer.append(numpy_helper.from_array(np.array([0], np.int64), base + "/starts"))
        nodes += [helper.make_node("Shape", [ids(ins[0])], [base + "/ends"], name=base + "/seq", start=1, end=2),
                  helper.make_node("Slice", [ins[3], base + "/starts", base + "/ends"], [base + "/position"],
                                   name=base + "/position")]
    nodes.append(helper.make_node("Add", [base + "/word", base + "/position"], [base + "/sum"], name=base + "/sum"))
    total = base + "/sum"
    if ins[1]:
        nodes += [helper.make_node("Gather", [ins[4], ids(ins[1])], [base + "/segment"], name=base + "/segment", axis=0),
                  helper.make_node("Add", [total, base + "/segment"], [base + "/sum_segment"], name=base + "/sum_segment")]
        total = base + "/sum_segment"
    sum_out = e.output[2] if len(e.output) > 2 else ""
    if sum_out:
        nodes.append(helper.make_node("Identity", [total], [sum_out], name=base + "/embedding_sum"))
    nodes += [helper.make_node("SimplifiedLayerNormalization", [total, ins[5]], [base + "/normed"],
                               name=base + "/RMS", axis=-1, epsilon=eps),
              helper.make_node("Add", [base + "/normed", ins[6]], [e.output[0]], name=base + "/beta")]
    rest = [n for n in g.node if n is not e]
    g.ClearField("node")
    g.node.extend(rest[:at] + nodes + rest[at:])
    # The Casts only the fused node read go.
    read = {i for n in g.node for i in n.input}
    keep = [n for n in g.node if n.op_type != "Cast" or n.output[0] in read]
    g.ClearField("node")
    g.node.extend(keep)
    onnx.save(m, out)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
