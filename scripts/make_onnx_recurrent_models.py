#!/usr/bin/python3
"""Exports the recurrent language models in tests/data/onnx/ (the C++ tests do not need
Python): nn.RNN, nn.GRU and nn.LSTM between two LayerNorms,

    embedding -> LayerNorm -> recurrent layer -> LayerNorm -> Linear head

each at opset 17 with do_constant_folding=True and symbolic batch/sequence dims, as
scripts/make_onnx_test_models.py exports its models. PyTorch writes ONNX's RNN, GRU and
LSTM nodes (one per layer; a bidirectional layer is one node with direction
'bidirectional'). lstm_lm_bi_tiny and rnn_lm_bi_tiny are bidirectional,
rnn_lm_bi_h0_tiny also starts from a learned initial state (a parameter expanded to the
batch: PyTorch writes it as RNN's initial_h through Expand, a constant once the dims are
bound), gru_lm_2layer_tiny has two layers. Beside each, <model>_data/test_data_set_0/ holds the example input and
PyTorch's output for it.

rnn_forms/<case>/ holds single ONNX RNN nodes in the forms PyTorch does not write
(reverse, initial_h a graph input, constant sequence_lens, layout 1), as ONNX's backend
node tests store theirs (model.onnx, test_data_set_0/input_<k>.pb, output_<k>.pb), the
outputs computed by ONNX Runtime (tools/ort_run.js; needs node and onnxruntime-node).
Run with the system Python:

    /usr/bin/python3 scripts/make_onnx_recurrent_models.py [OUT_DIR]
"""
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(__file__))
from make_onnx_test_models import export, perturb, save_reference  # noqa: E402

torch.manual_seed(0)


class RecurrentLM(nn.Module):
    def __init__(self, cell, vocab=32, d=8, hidden=6, layers=1, bidirectional=False):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.ln_in = nn.LayerNorm(d)
        self.rnn = cell(d, hidden, num_layers=layers, bidirectional=bidirectional, batch_first=True)
        width = hidden * (2 if bidirectional else 1)
        self.ln_out = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, input_ids):
        y, _ = self.rnn(self.ln_in(self.embed(input_ids)))
        return self.head(self.ln_out(y))


class RecurrentLMWithInitialState(RecurrentLM):
    """RecurrentLM whose recurrent layer starts from a learned state h0, one row per
    layer and direction, the same for every sequence of the batch."""

    def __init__(self, cell, **kwargs):
        super().__init__(cell, **kwargs)
        self.h0 = nn.Parameter(torch.randn(self.rnn.num_layers * (2 if self.rnn.bidirectional else 1), 1,
                                           self.rnn.hidden_size))

    def forward(self, input_ids):
        h0 = self.h0.expand(-1, input_ids.shape[0], -1).contiguous()
        y, _ = self.rnn(self.ln_in(self.embed(input_ids)), h0)
        return self.head(self.ln_out(y))


def rnn_model(name, direction, layout, x, h0, h, lens, weights):
    """The ONNX RNN node as a model: X, and initial_h when h0 is "input", graph inputs."""
    D, H = weights[0].shape[0], weights[0].shape[1]
    state = [x.shape[0], D, H] if layout else [D, x.shape[1], H]
    inits = [numpy_helper.from_array(w, k) for w, k in zip(weights, ("W", "R", "B"))]
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(x.shape))]
    node_inputs = ["X", "W", "R", "B", "", ""]
    if lens is not None:
        inits.append(numpy_helper.from_array(np.array(lens, dtype=np.int32), "sequence_lens"))
        node_inputs[4] = "sequence_lens"
    if h0 is not None:
        node_inputs[5] = "initial_h"
        if h0 == "input":
            inputs.append(helper.make_tensor_value_info("initial_h", TensorProto.FLOAT, state))
        else:
            inits.append(numpy_helper.from_array(h, "initial_h"))
    y_shape = [x.shape[0], x.shape[1], D, H] if layout else [x.shape[0], D, x.shape[1], H]
    node = helper.make_node("RNN", node_inputs, ["Y", "Y_h"], name=name, hidden_size=H, direction=direction,
                            **({"layout": 1} if layout else {}))
    graph = helper.make_graph([node], name, inputs,
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, y_shape),
                               helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, state)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def run_ort(model, feeds, folder):
    """ONNX Runtime's outputs of `model` on `feeds` (arrays), computed in `folder`."""
    os.makedirs(folder, exist_ok=True)
    onnx.save(model, os.path.join(folder, "model.onnx"))
    files = []
    for k, a in enumerate(feeds):
        files.append(os.path.join(folder, f"input_{k}.pb"))
        with open(files[-1], "wb") as f:
            f.write(numpy_helper.from_array(a).SerializeToString())
    ort_run = os.path.join(os.path.dirname(__file__), "..", "tools", "ort_run.js")
    subprocess.run(["node", ort_run, os.path.join(folder, "model.onnx"), folder] + files, check=True)
    outs = []
    for k in range(len(model.graph.output)):
        outs.append(numpy_helper.to_array(onnx.load_tensor(os.path.join(folder, f"output_{k}.pb"))))
    return outs


def rnn_case(out, name, direction="forward", layout=0, h0=None, lens=None, T=4, N=3, F=3, H=5, seed=0):
    """One ONNX RNN node (W, R, B constants) reading X and, with h0 "input", initial_h as a
    graph input (h0 "constant": an initializer), with Y and Y_h as ONNX Runtime computes
    them. ONNX Runtime runs layout 0 only: a layout-1 case's outputs are those of the same
    node in layout 0 on the transposed X and initial_h, transposed back."""
    rng = np.random.default_rng(seed)
    D = 2 if direction == "bidirectional" else 1

    def f32(shape, scale):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    x0 = f32((T, N, F), 1.0)
    weights = [f32((D, H, F), 0.6), f32((D, H, H), 0.4), f32((D, 2 * H), 0.3)]
    h_0 = f32((D, N, H), 0.8)
    feeds0 = [x0] + ([h_0] if h0 == "input" else [])
    y, y_h = run_ort(rnn_model(name, direction, 0, x0, h0, h_0, lens, weights), feeds0,
                     os.path.join(out, "rnn_forms", ".ort_layout0"))
    x, h = x0, h_0
    if layout:
        x, h = x0.transpose(1, 0, 2).copy(), h_0.transpose(1, 0, 2).copy()
        y, y_h = y.transpose(2, 0, 1, 3), y_h.transpose(1, 0, 2)
    model = rnn_model(name, direction, layout, x, h0, h, lens, weights)
    data = os.path.join(out, "rnn_forms", name, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    onnx.save(model, os.path.join(out, "rnn_forms", name, "model.onnx"))
    files = [("input_0.pb", x, "X")] + ([("input_1.pb", h, "initial_h")] if h0 == "input" else []) + \
        [("output_0.pb", y, "Y"), ("output_1.pb", y_h, "Y_h")]
    for file, a, value in files:
        with open(os.path.join(data, file), "wb") as f:
            f.write(numpy_helper.from_array(np.ascontiguousarray(a), value).SerializeToString())
    print(f"{os.path.join(out, 'rnn_forms', name)}: Y {list(y.shape)} and Y_h {list(y_h.shape)} from ONNX Runtime")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "data", "onnx")
    os.makedirs(out, exist_ok=True)
    ids = torch.randint(0, 32, (2, 5))
    models = [
        ("rnn_lm_tiny", RecurrentLM(nn.RNN)),
        ("gru_lm_2layer_tiny", RecurrentLM(nn.GRU, layers=2)),
        ("lstm_lm_tiny", RecurrentLM(nn.LSTM)),
        ("lstm_lm_bi_tiny", RecurrentLM(nn.LSTM, bidirectional=True)),
    ]
    for name, model in models:
        model = perturb(model)
        export(model, ids, "input_ids", {0: "batch", 1: "seq"}, os.path.join(out, f"{name}_opset17.onnx"), 17)
        save_reference(model, ids, os.path.join(out, f"{name}_data", "test_data_set_0"))
    torch.manual_seed(1)  # the bidirectional RNNs after the others, which stay as they were
    for name, model in [("rnn_lm_bi_tiny", RecurrentLM(nn.RNN, bidirectional=True)),
                        ("rnn_lm_bi_h0_tiny", RecurrentLMWithInitialState(nn.RNN, bidirectional=True))]:
        model = perturb(model)
        export(model, ids, "input_ids", {0: "batch", 1: "seq"}, os.path.join(out, f"{name}_opset17.onnx"), 17)
        save_reference(model, ids, os.path.join(out, f"{name}_data", "test_data_set_0"))
    rnn_case(out, "rnn_reverse", "reverse")
    rnn_case(out, "rnn_bidirectional_initial_h", "bidirectional", h0="constant", seed=1)
    rnn_case(out, "rnn_bidirectional_initial_h_input", "bidirectional", h0="input", seed=2)
    rnn_case(out, "rnn_forward_seq_lens", "forward", h0="constant", lens=[4, 2, 1], seed=3)
    rnn_case(out, "rnn_reverse_seq_lens_initial_h_input", "reverse", h0="input", lens=[2, 4, 1], seed=4)
    rnn_case(out, "rnn_bidirectional_seq_lens", "bidirectional", h0="input", lens=[3, 1, 4], seed=5)
    rnn_case(out, "rnn_batchwise_bidirectional", "bidirectional", layout=1, h0="input", lens=[4, 3, 2], seed=6)
    rnn_case(out, "rnn_batchwise_reverse", "reverse", layout=1, h0="constant", seed=7)
    shutil.rmtree(os.path.join(out, "rnn_forms", ".ort_layout0"))


if __name__ == "__main__":
    main()
