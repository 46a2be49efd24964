#!/usr/bin/python3
"""Exports the recurrent language models in tests/data/onnx/ (the C++ tests do not need
Python): nn.RNN, nn.GRU and nn.LSTM between two LayerNorms,

    embedding -> LayerNorm -> recurrent layer -> LayerNorm -> Linear head

each at opset 17 with do_constant_folding=True and symbolic batch/sequence dims, as
scripts/make_onnx_test_models.py exports its models. PyTorch writes ONNX's RNN, GRU and
LSTM nodes (one per layer; a bidirectional layer is one node with direction
'bidirectional'). lstm_lm_bi_tiny is bidirectional, gru_lm_2layer_tiny has two layers.
Beside each, <model>_data/test_data_set_0/ holds the example input and PyTorch's output
for it. Run with the system Python:

    /usr/bin/python3 scripts/make_onnx_recurrent_models.py [OUT_DIR]
"""
import os
import sys

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


if __name__ == "__main__":
    main()
