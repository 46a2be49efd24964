"""A GPT-2-shaped causal LM in plain PyTorch layers, shared by the benchmark
(`python -m lnverify.bench`), the training example and the tests: token and position
embeddings, pre-norm blocks (attention, GELU MLP, both residual), a final LayerNorm and a
head tied to the token embedding."""
import torch
from torch import nn


class GPT2Block(nn.Module):
    """Pre-norm attention (dropout `p` on the attention weights) and MLP (dropout `p` on the
    hidden activations), both residual."""

    def __init__(self, d, heads, p=0.0):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, dropout=p, batch_first=True)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Dropout(p), nn.Linear(4 * d, d))

    def forward(self, x, mask):
        y = self.ln_1(x)
        x = x + self.attn(y, y, y, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    """The LM over `seq` tokens; `wpe_std` scales the random position embedding."""

    def __init__(self, vocab, d, heads, layers, seq, p=0.0, tied=True, wpe_std=0.1):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Parameter(torch.randn(seq, d) * wpe_std)
        self.h = nn.ModuleList([GPT2Block(d, heads, p) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        if tied:
            self.head.weight = self.wte.weight
        self.register_buffer("mask", torch.triu(torch.full((seq, seq), float("-inf")), 1))

    def forward(self, idx):
        x = self.wte(idx) + self.wpe
        for b in self.h:
            x = b(x, self.mask)
        return self.head(self.ln_f(x))
