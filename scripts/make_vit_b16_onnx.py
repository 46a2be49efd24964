#!/usr/bin/python3
"""Exports ViT-B/16 (torchvision's vit_b_16: 224×224 images in 16×16 patches, 197 tokens,
12 pre-norm layers, 768 wide, 12 heads, MLP 3072, 1000 classes) for the ONNX Runtime
benchmark (docs/benchmarks.md), with its weights in an external data file beside it. The
weights are random (no download). Not for the repository (about 350 MB):

    /usr/bin/python3 scripts/make_vit_b16_onnx.py build/large
"""
import os
import sys

import torch
import torchvision

sys.path.insert(0, os.path.dirname(__file__))
from make_onnx_test_models import export_external, perturb  # noqa: E402


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join("build", "large")
    torch.manual_seed(0)
    export_external(perturb(torchvision.models.vit_b_16(weights=None)), 0, out, "vit_b16",
                    example=torch.randn(1, 3, 224, 224))


if __name__ == "__main__":
    main()
