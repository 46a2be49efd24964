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

import onnx
import torch

sys.path.insert(0, os.path.dirname(__file__))
from make_onnx_test_models import TinyBert, perturb  # noqa: E402


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join("build", "large")
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    model = perturb(TinyBert(vocab=30522, d=768, heads=12, layers=12, max_len=1024, ffn=3072))
    print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters")
    tmp = os.path.join(out, "bert_base_inline.onnx")
    # Grad stays enabled so nn.TransformerEncoder takes its exportable (non-fast) path.
    with torch.enable_grad():
        torch.onnx.export(model, (torch.randint(0, 30522, (1, 8)),), tmp, opset_version=17,
                          do_constant_folding=True, input_names=["input_ids"],
                          output_names=["output"],
                          dynamic_axes={"input_ids": {0: "batch", 1: "seq"}})
    m = onnx.load(tmp)
    path = os.path.join(out, "bert_base.onnx")
    onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="bert_base.onnx.data", size_threshold=1024)
    os.remove(tmp)
    print(f"{path}: {len(m.graph.node)} nodes, "
          f"{os.path.getsize(path + '.data') / 1e6:.0f} MB of external data")


if __name__ == "__main__":
    main()
