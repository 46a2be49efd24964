#!/usr/bin/python3
"""Exports a BERT-base-sized model (12 post-norm layers, 768 wide, 12 heads, feed-forward
3072, vocabulary 30522; 1024 positions instead of BERT's 512 so that the fold benchmark
can run at sequence 1024) for the ONNX Runtime benchmark (docs/benchmarks.md), with its
weights in an external data file beside it. The architecture is make_onnx_test_models.py's
TinyBert at real size; the weights are random. Not for the repository (about 450 MB):

    /usr/bin/python3 scripts/make_bert_base_onnx.py build/large
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from make_onnx_test_models import TinyBert, export_external, perturb  # noqa: E402


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join("build", "large")
    torch.manual_seed(0)
    export_external(perturb(TinyBert(vocab=30522, d=768, heads=12, layers=12, max_len=1024,
                                     ffn=3072)), 30522, out, "bert_base")


if __name__ == "__main__":
    main()
