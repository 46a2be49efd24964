#!/usr/bin/python3
"""Exports a GPT-2-small-sized model (124 M parameters: vocab 50257, width 768, 12 heads,
12 layers, 1024 positions) to ONNX twice, for the real-size measurements of
docs/benchmarks.md: as one file (weights as raw_data, ~650 MB) and with its weights in an
external data file beside a small .onnx. The model is scripts/make_onnx_test_models.py's
TinyGPT2 at GPT-2 small's sizes. Nothing here is committed; run with the system Python:

    /usr/bin/python3 scripts/make_large_onnx.py [OUT_DIR]    # default: build/large

writes OUT_DIR/gpt2_small.onnx and OUT_DIR/external/gpt2_small.onnx (+ gpt2_small.data).
"""
import os
import sys

import onnx
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_onnx_test_models import TinyGPT2, export, perturb  # noqa: E402


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "build", "large")
    os.makedirs(os.path.join(out, "external"), exist_ok=True)
    torch.manual_seed(0)
    model = perturb(TinyGPT2(vocab=50257, d=768, heads=12, layers=12, max_len=1024))
    ids = torch.randint(0, 50257, (1, 8))
    single = os.path.join(out, "gpt2_small.onnx")
    export(model, ids, "input_ids", {0: "batch", 1: "seq"}, single, 17)
    m = onnx.load(single)
    external = os.path.join(out, "external", "gpt2_small.onnx")
    onnx.save_model(m, external, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="gpt2_small.data", size_threshold=1024)
    print(f"{external}: {os.path.getsize(external)} bytes, "
          f"gpt2_small.data {os.path.getsize(os.path.join(out, 'external', 'gpt2_small.data'))} bytes")


if __name__ == "__main__":
    main()
