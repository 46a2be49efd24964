#!/usr/bin/python3
"""Exports the small ONNX models in tests/data/onnx/ (the C++ tests do not need Python).

Uses Debian's python3-torch, python3-torchvision and python3-onnx (scripts/setup.sh
installs them); run with the system Python:

    /usr/bin/python3 scripts/make_onnx_test_models.py [OUT_DIR]

Each model is exported at opset 17 (one LayerNormalization node per nn.LayerNorm) and
opset 14 (the norm decomposed into ReduceMean/Sub/Pow/Sqrt/Div/Mul/Add); the GPT-2-like
model also at opset 11 and the BERT-like one at opset 9 (older spellings: Unsqueeze and
Squeeze with axes attributes, arange as ConstantOfShape/NonZero); a small MLP with two LayerNorms
(mlp_tiny, opsets 17 and 14: only ops model.json has); a pre-norm nn.TransformerEncoder
causal LM with a tied head (prenorm_lm_tiny); torchvision's ViT, Swin Transformer (most of
its 1616 nodes are shape arithmetic) and ConvNeXt; a DINOv2-style ViT whose pre-norm blocks
scale each branch by a LayerScale gamma (layerscale_vit_tiny). All are exported with
do_constant_folding=True and symbolic batch/sequence dims, so the file keeps the shape
arithmetic exporters emit (Shape/Gather/Unsqueeze/Concat/Reshape, ConstantOfShape,
Range, Equal/Where/Expand). Beside them, <model>_data/test_data_set_0/ holds the example
input and PyTorch's output for it (input_0.pb, output_0.pb; one per model, all its opsets
compute the same function). Every parameter is perturbed before export so that no two
initializers are equal and the exporter does not share one among several uses.
"""
import math
import os
import sys

import onnx
import torch
import torchvision
from torch import nn

torch.manual_seed(0)


def perturb(model):
    """Adds distinct noise to every parameter (fresh norms are all ones and zeros, and
    cloned layers are equal: the exporter would deduplicate them)."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model.eval()


class GPT2Attention(nn.Module):
    """Causal self-attention written like GPT-2's: packed qkv projection, heads split
    with view() on sizes read from the tensor, a causal mask sliced to the length."""

    def __init__(self, d, heads, max_len):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.register_buffer("bias", torch.tril(torch.ones(max_len, max_len)).view(1, 1, max_len, max_len))

    def split_heads(self, x):
        new_shape = x.size()[:-1] + (self.heads, x.size(-1) // self.heads)
        return x.view(new_shape).permute(0, 2, 1, 3)

    def forward(self, x):
        q, k, v = self.c_attn(x).split(x.size(-1), dim=2)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)
        w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(v.size(-1))
        n = w.size(-1)
        mask = self.bias[:, :, :n, :n]
        w = torch.where(mask.bool(), w, torch.tensor(-1e4, dtype=w.dtype))
        a = torch.matmul(torch.softmax(w, dim=-1), v).permute(0, 2, 1, 3).contiguous()
        return self.c_proj(a.view(a.size()[:-2] + (a.size(-2) * a.size(-1),)))


class GPT2Block(nn.Module):
    def __init__(self, d, heads, max_len):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = GPT2Attention(d, heads, max_len)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TinyGPT2(nn.Module):
    """Token and position embeddings (positions from arange of the input's length), two
    pre-norm blocks, a final LayerNorm and a head tied to the token embedding."""

    def __init__(self, vocab=64, d=32, heads=2, layers=2, max_len=16, ffn=None):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(max_len, d)
        self.h = nn.ModuleList([GPT2Block(d, heads, max_len) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)

    def forward(self, input_ids):
        positions = torch.arange(0, input_ids.size(-1), dtype=torch.long).unsqueeze(0)
        x = self.wte(input_ids) + self.wpe(positions)
        for block in self.h:
            x = block(x)
        return torch.matmul(self.ln_f(x), self.wte.weight.t())


class TinyBert(nn.Module):
    """BERT-shaped: word + position + token-type embeddings, an embedding LayerNorm, a
    post-norm nn.TransformerEncoder, and a pooler on the first token."""

    def __init__(self, vocab=64, d=32, heads=2, layers=2, max_len=16, ffn=None):
        super().__init__()
        self.word = nn.Embedding(vocab, d)
        self.position = nn.Embedding(max_len, d)
        self.token_type = nn.Embedding(2, d)
        self.emb_norm = nn.LayerNorm(d, eps=1e-12)
        layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=ffn or 2 * d, dropout=0.0,
                                           activation="gelu", batch_first=True, norm_first=False)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.pooler = nn.Linear(d, d)

    def forward(self, input_ids):
        positions = torch.arange(input_ids.size(1), dtype=torch.long).expand_as(input_ids)
        token_types = torch.zeros_like(input_ids)
        x = self.emb_norm(self.word(input_ids) + self.position(positions) + self.token_type(token_types))
        x = self.encoder(x)
        return torch.tanh(self.pooler(x[:, 0]))


class TinyMLP(nn.Module):
    """A Linear, a LayerNorm of it, a GELU MLP added back to it, a final LayerNorm: both
    LayerNorms read sums of Linear outputs (foldable). Only ops model.json has, so every
    command runs on it end to end."""

    def __init__(self, d_in=6, d=8):
        super().__init__()
        self.proj = nn.Linear(d_in, d)
        self.ln_1 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.ln_2 = nn.LayerNorm(d)

    def forward(self, x):
        h = self.proj(x)
        return self.ln_2(h + self.mlp(self.ln_1(h)))


class TinyCausalLM(nn.Module):
    """A pre-norm nn.TransformerEncoder (norm_first=True) as a causal LM: token embedding
    plus learned positions, the causal mask of nn.Transformer.generate_square_subsequent_mask
    for the input's length, the encoder's final LayerNorm, and a head tied to the token
    embedding (F.linear by its weight). With mask_buffer, the mask is a buffer of
    max_len x max_len sliced to the length, as causal LMs often keep it: exported at a
    fixed length, torch folds it into one initializer of 0 and -inf."""

    def __init__(self, vocab=64, d=32, heads=2, layers=2, max_len=16, ffn=None, mask_buffer=False):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.positions = nn.Parameter(torch.zeros(1, max_len, d))
        layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=ffn or 2 * d, dropout=0.0,
                                           activation="gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, norm=nn.LayerNorm(d),
                                             enable_nested_tensor=False)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(max_len)
                             if mask_buffer else None)

    def forward(self, input_ids):
        n = input_ids.size(1)
        x = self.embed(input_ids) + self.positions[:, :n]
        mask = nn.Transformer.generate_square_subsequent_mask(n) if self.mask is None else self.mask[:n, :n]
        x = self.encoder(x, mask=mask)
        return nn.functional.linear(x, self.embed.weight)


class LayerScaleAttention(nn.Module):
    """CaiT's / DINOv2's attention: a packed qkv Linear, heads split by reshape and
    permute, softmax(q k^T * scale) v, an output Linear."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.scale = (d // heads) ** -0.5
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        b, n, d = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q @ k.transpose(-2, -1) * self.scale).softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, d))


class LayerScaleBlock(nn.Module):
    """A pre-norm block with LayerScale (CaiT, DeiT III, DINOv2): each branch's output is
    scaled per feature by a learned gamma before the residual add."""

    def __init__(self, d, heads, mlp):
        super().__init__()
        self.norm1 = nn.LayerNorm(d)
        self.attn = LayerScaleAttention(d, heads)
        self.gamma_1 = nn.Parameter(0.1 * torch.ones(d))
        self.norm2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, mlp), nn.GELU(), nn.Linear(mlp, d))
        self.gamma_2 = nn.Parameter(0.1 * torch.ones(d))

    def forward(self, x):
        x = x + self.gamma_1 * self.attn(self.norm1(x))
        return x + self.gamma_2 * self.mlp(self.norm2(x))


class TinyLayerScaleViT(nn.Module):
    """DINOv2-style: a Conv patch embedding, a class token, learned positions, two
    LayerScale blocks, a final LayerNorm, the class token to a Linear head."""

    def __init__(self, d=16, heads=2, mlp=32, patch=8, image=16, classes=4):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, d, patch, stride=patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d))
        self.pos_embed = nn.Parameter(torch.zeros(1, (image // patch) ** 2 + 1, d))
        self.blocks = nn.ModuleList([LayerScaleBlock(d, heads, mlp) for _ in range(2)])
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, images):
        x = self.patch_embed(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x)[:, 0])


def tiny_vit():
    """torchvision's VisionTransformer (class token, nn.MultiheadAttention, pre-norm)."""
    return torchvision.models.VisionTransformer(image_size=16, patch_size=8, num_layers=2,
                                                num_heads=2, hidden_dim=32, mlp_dim=64,
                                                num_classes=10)


def tiny_swin():
    """torchvision's SwinTransformer: shifted windows (torch.roll, an attention mask built
    with slices and ScatterND-style assignments), relative position bias, patch merging."""
    from torchvision.models.swin_transformer import SwinTransformer
    return SwinTransformer(patch_size=[4, 4], embed_dim=8, depths=[2, 2], num_heads=[1, 2],
                           window_size=[4, 4], num_classes=4)


def tiny_convnext():
    """torchvision's ConvNeXt: a patchify stem (Conv, LayerNorm2d), blocks of a depthwise
    7x7 Conv, a permute to channels-last, LayerNorm, a GELU MLP and a layer scale,
    LayerNorm2d + Conv downsampling, and a LayerNorm2d before the classifier."""
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt
    return ConvNeXt([CNBlockConfig(8, 16, 2), CNBlockConfig(16, None, 2)], num_classes=4)


def export(model, example, input_name, dynamic, path, opset):
    # Grad stays enabled so nn.TransformerEncoder takes its exportable (non-fast) path.
    with torch.enable_grad():
        torch.onnx.export(model, (example,), path, opset_version=opset, do_constant_folding=True,
                          input_names=[input_name], output_names=["output"],
                          dynamic_axes={input_name: dynamic})
    m = onnx.load(path)
    onnx.checker.check_model(m)
    ops = {}
    for n in m.graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    print(f"{path}: {len(m.graph.node)} nodes, {os.path.getsize(path)} bytes; "
          + ", ".join(f"{k} {v}" for k, v in sorted(ops.items(), key=lambda kv: -kv[1])))


def export_external(model, vocab, out, name, example=None):
    """`model` exported (opset 17, input_ids [batch, seq] below `vocab`, or with `example`
    images [batch, 3, H, W]) as out/NAME.onnx, its tensors of 1 KiB or more in
    out/NAME.onnx.data: the real-size benchmark models."""
    print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters")
    os.makedirs(out, exist_ok=True)
    tmp = os.path.join(out, name + "_inline.onnx")
    if example is None:
        export(model, torch.randint(0, vocab, (1, 8)), "input_ids", {0: "batch", 1: "seq"}, tmp, 17)
    else:
        export(model, example, "images", {0: "batch"}, tmp, 17)
    m = onnx.load(tmp)
    path = os.path.join(out, name + ".onnx")
    onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location=name + ".onnx.data", size_threshold=1024)
    os.remove(tmp)
    print(f"{path}: {len(m.graph.node)} nodes, "
          f"{os.path.getsize(path + '.data') / 1e6:.0f} MB of external data")


def save_reference(model, example, folder):
    """PyTorch's own output for `example`, beside the exports, as ONNX's backend test data
    stores it (test_data_set_0/input_0.pb, output_0.pb): the import must reproduce it."""
    from onnx import numpy_helper
    os.makedirs(folder, exist_ok=True)
    with torch.no_grad():
        y = model(example)
    for name, t in (("input_0.pb", example), ("output_0.pb", y)):
        with open(os.path.join(folder, name), "wb") as f:
            f.write(numpy_helper.from_array(t.numpy()).SerializeToString())


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "data", "onnx")
    os.makedirs(out, exist_ok=True)
    ids = torch.randint(0, 64, (2, 8))
    images = torch.randn(2, 3, 16, 16)
    models = [
        ("gpt2_tiny", perturb(TinyGPT2()), ids, "input_ids", {0: "batch", 1: "seq"}, (17, 14, 11)),
        ("bert_tiny", perturb(TinyBert()), ids, "input_ids", {0: "batch", 1: "seq"}, (17, 14, 9)),
        ("vit_tiny", perturb(tiny_vit()), images, "images", {0: "batch"}, (17, 14)),
        ("swin_tiny", perturb(tiny_swin()), torch.randn(2, 3, 32, 32), "images", {0: "batch"}, (17, 14)),
        ("mlp_tiny", perturb(TinyMLP()), torch.randn(2, 3, 6), "x", {0: "batch"}, (17, 14)),
        ("prenorm_lm_tiny", perturb(TinyCausalLM()), ids, "input_ids", {0: "batch", 1: "seq"}, (17, 14)),
        ("convnext_tiny", perturb(tiny_convnext()), images, "images", {0: "batch"}, (17, 14)),
        ("layerscale_vit_tiny", perturb(TinyLayerScaleViT()), images, "images", {0: "batch"}, (17, 14)),
        # 128 tokens, no symbolic dim: the causal mask is one [1, 128, 128] initializer of
        # 64 KiB, which the reader leaves in the file until it is read.
        ("causal_lm_seq128", perturb(TinyCausalLM(vocab=16, d=8, layers=1, max_len=128, mask_buffer=True)),
         torch.randint(0, 16, (1, 128)), "input_ids", {}, (17,)),
    ]
    for name, model, example, input_name, dynamic, opsets in models:
        for opset in opsets:
            export(model, example, input_name, dynamic, os.path.join(out, f"{name}_opset{opset}.onnx"), opset)
        save_reference(model, example, os.path.join(out, f"{name}_data", "test_data_set_0"))


if __name__ == "__main__":
    main()
