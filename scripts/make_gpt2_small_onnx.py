#!/usr/bin/python3
"""Exports a GPT-2-small-sized model (12 layers, 768 wide, 12 heads, vocabulary 50257,
context 1024: 124 M parameters) for the fold benchmark (docs/benchmarks.md), with its
weights in an external data file beside it. The architecture is make_onnx_test_models.py's
TinyGPT2 at real size; the weights are random. Not for the repository (about 500 MB):

    /usr/bin/python3 scripts/make_gpt2_small_onnx.py build/large
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from make_onnx_test_models import TinyGPT2, export_external, perturb  # noqa: E402


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join("build", "large")
    export_external(perturb(TinyGPT2(vocab=50257, d=768, heads=12, layers=12, max_len=1024)),
                    50257, out, "gpt2_small")


if __name__ == "__main__":
    main()
