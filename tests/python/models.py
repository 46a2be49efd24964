"""Real modules the Python tests run on, at small sizes (float64): torchvision's ViT, Swin and
ConvNeXt, nn.Transformer (pre- and post-norm, encoder-decoder), a GPT-2-shaped LM with a
tied head, and a LayerScale block."""
import torch
from torch import nn

from lnverify import models


def GPT2(vocab=40, d=16, heads=2, layers=2, seq=8, p=0.1, tied=True):
    """The package's GPT-2-shaped LM (lnverify.models) at the tests' size."""
    return models.GPT2(vocab, d, heads, layers, seq, p=p, tied=tied)


class LayerScaleBlock(nn.Module):
    """x + gamma * mlp(ln(x)) (CaiT's LayerScale), twice, then a final LayerNorm."""

    def __init__(self, d=16):
        super().__init__()
        self.proj = nn.Linear(8, d)
        self.ln1 = nn.LayerNorm(d)
        self.mlp1 = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.gamma1 = nn.Parameter(torch.rand(d) + 0.5)
        self.ln2 = nn.LayerNorm(d)
        self.mlp2 = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.gamma2 = nn.Parameter(torch.rand(d) + 0.5)
        self.ln_f = nn.LayerNorm(d)

    def forward(self, x):
        x = self.proj(x)
        x = x + self.gamma1 * self.mlp1(self.ln1(x))
        x = x + self.gamma2 * self.mlp2(self.ln2(x))
        return self.ln_f(x)


def _randomize(m):
    """Random LayerNorm weights and biases (not ones and zeros), so a fold that mishandles
    them shows."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, nn.LayerNorm) and mod.elementwise_affine:
                mod.weight.copy_(1 + 0.3 * torch.randn(mod.weight.shape, generator=g))
                mod.bias.copy_(0.3 * torch.randn(mod.bias.shape, generator=g))
    return m


def gpt2(tied=True):
    torch.manual_seed(0)
    return _randomize(GPT2(tied=tied)).double(), (torch.randint(0, 40, (2, 8)),), lambda g: (
        torch.randint(0, 40, (2, 8), generator=g),)


def layerscale():
    torch.manual_seed(0)
    return _randomize(LayerScaleBlock()).double(), (torch.randn(2, 5, 8, dtype=torch.float64),), \
        lambda g: (torch.randn(2, 5, 8, generator=g, dtype=torch.float64),)


class Seq2Seq(nn.Module):
    """nn.Transformer (encoder-decoder) behind linear input projections, as a model feeds it
    embeddings."""

    def __init__(self, norm_first):
        super().__init__()
        self.src_proj = nn.Linear(6, 16)
        self.tgt_proj = nn.Linear(6, 16)
        self.transformer = nn.Transformer(d_model=16, nhead=2, num_encoder_layers=1,
                                          num_decoder_layers=1, dim_feedforward=32, dropout=0.1,
                                          batch_first=True, norm_first=norm_first)

    def forward(self, src, tgt):
        return self.transformer(self.src_proj(src), self.tgt_proj(tgt))


def transformer(norm_first):
    torch.manual_seed(0)
    m = Seq2Seq(norm_first)
    return _randomize(m).double(), (torch.randn(2, 5, 6, dtype=torch.float64),
                                    torch.randn(2, 4, 6, dtype=torch.float64)), \
        lambda g: (torch.randn(2, 5, 6, generator=g, dtype=torch.float64),
                   torch.randn(2, 4, 6, generator=g, dtype=torch.float64))


def _image(g=None):
    return (torch.randn(1, 3, 16, 16, generator=g, dtype=torch.float64),)


def vit():
    from torchvision.models.vision_transformer import VisionTransformer
    torch.manual_seed(0)
    m = VisionTransformer(image_size=16, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16,
                          mlp_dim=32, num_classes=10)
    with torch.no_grad():
        m.class_token.normal_()
    return _randomize(m).double(), _image(), _image


def swin():
    from torchvision.models.swin_transformer import SwinTransformer
    torch.manual_seed(0)
    m = SwinTransformer(patch_size=[4, 4], embed_dim=8, depths=[1, 1], num_heads=[2, 2],
                        window_size=[2, 2], num_classes=10)
    return _randomize(m).double(), _image(), _image


def convnext():
    from torchvision.models.convnext import ConvNeXt, CNBlockConfig
    torch.manual_seed(0)
    m = ConvNeXt([CNBlockConfig(8, 16, 1), CNBlockConfig(16, None, 1)], num_classes=10)
    return _randomize(m).double(), _image(), _image


MODELS = {
    "gpt2": gpt2,
    "layerscale": layerscale,
    "transformer_pre": lambda: transformer(True),
    "transformer_post": lambda: transformer(False),
    "vit": vit,
    "swin": swin,
    "convnext": convnext,
}
