#!/usr/bin/python3
"""Exports a GPT-2-small-sized model (12 layers, 768 wide, 12 heads, vocabulary 50257,
context 1024: 124 M parameters) for the fold benchmark (docs/benchmarks.md), with its
weights in an external data file beside it. The architecture is make_onnx_test_models.py's
TinyGPT2 at real size; the weights are random. Not for the repository (about 500 MB):

    /usr/bin/python3 scripts/make_gpt2_small_onnx.py build/large
"""
import os
import sys

import onnx
import torch

sys.path.insert(0, os.path.dirname(__file__))
from make_onnx_test_models import TinyGPT2, perturb  # noqa: E402


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join("build", "large")
    os.makedirs(out, exist_ok=True)
    model = perturb(TinyGPT2(vocab=50257, d=768, heads=12, layers=12, max_len=1024))
    print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters")
    tmp = os.path.join(out, "gpt2_small_inline.onnx")
    with torch.no_grad():
        torch.onnx.export(model, (torch.randint(0, 50257, (1, 8)),), tmp, opset_version=17,
                          do_constant_folding=True, input_names=["input_ids"],
                          output_names=["output"],
                          dynamic_axes={"input_ids": {0: "batch", 1: "seq"}})
    m = onnx.load(tmp)
    path = os.path.join(out, "gpt2_small.onnx")
    onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="gpt2_small.onnx.data", size_threshold=1024)
    os.remove(tmp)
    print(f"{path}: {len(m.graph.node)} nodes, "
          f"{os.path.getsize(path + '.data') / 1e6:.0f} MB of external data")


if __name__ == "__main__":
    main()
