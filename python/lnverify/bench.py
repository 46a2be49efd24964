"""python -m lnverify.bench: a module against its inference fold in PyTorch, measured side by
side (docs/python.md, docs/benchmarks.md).

The module is a GPT-2-shaped LM (tests' shape, larger: --layers, --hidden, --heads, --seq,
--batch, --vocab) or a torchvision ViT-B/16-shaped model (--model vit, smaller by the same
options). Each variant (original, fold; eager, and torch.jit.script where it scripts, and
torch.compile with --compile where torch has it) runs forward and forward+backward; the
variants are interleaved round by round (the order alternating), so a machine's drift reaches
all of them alike. Printed per row: the median time and the spread (25th-75th percentile), and
the fold's median over the original's."""
import argparse
import statistics
import sys
import time

import torch

from . import torch as lt
from .models import GPT2


def _model(args):
    torch.manual_seed(0)
    if args.model == "gpt2":
        m = GPT2(args.vocab, args.hidden, args.heads, args.layers, args.seq, wpe_std=0.02)
        x = torch.randint(0, args.vocab, (args.batch, args.seq))
        return m, x
    from torchvision.models.vision_transformer import VisionTransformer
    m = VisionTransformer(image_size=args.image, patch_size=16, num_layers=args.layers,
                          num_heads=args.heads, hidden_dim=args.hidden, mlp_dim=4 * args.hidden)
    return m, torch.randn(args.batch, 3, args.image, args.image)


def _variants(module, folded, x, use_compile):
    out = {"original eager": module, "fold eager": folded}
    for name, m in (("original", module), ("fold", folded)):
        try:
            out[f"{name} script"] = torch.jit.script(m)
        except Exception as e:  # a module TorchScript cannot compile
            print(f"# {name}: torch.jit.script: {type(e).__name__}: {str(e).splitlines()[0]}",
                  file=sys.stderr)
    if use_compile and hasattr(torch, "compile"):
        for name, m in (("original", module), ("fold", folded)):
            out[f"{name} compile"] = torch.compile(m)
    return out


def _step(m, x, backward):
    if backward:
        m.zero_grad(set_to_none=True)
        m(x).float().sum().backward()
    else:
        with torch.no_grad():
            m(x)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m lnverify.bench", description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=["gpt2", "vit"], default="gpt2")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=2000)
    p.add_argument("--image", type=int, default=64)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    p.add_argument("--compile", action="store_true", help="also torch.compile (torch >= 2)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    module, x = _model(args)
    module.eval()
    folded = lt.fold(module, x)
    folded.eval()
    report = lt.audit(module, x)
    variants = _variants(module, folded, x, args.compile)
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads; model {args.model} "
          f"(layers {args.layers}, hidden {args.hidden}, heads {args.heads}, batch {args.batch}"
          + (f", seq {args.seq}" if args.model == "gpt2" else f", image {args.image}") + ")")
    print(f"# {report.summary()}")
    names = list(variants)
    times = {(n, bw): [] for n in names for bw in (False, True)}
    for bw in (False, True):
        for _ in range(args.warmup):
            for n in names:
                _step(variants[n], x, bw)
        for r in range(args.rounds):
            order = names if r % 2 == 0 else names[::-1]
            for n in order:
                t0 = time.perf_counter()
                _step(variants[n], x, bw)
                times[(n, bw)].append(time.perf_counter() - t0)
    print(f"{'variant':<18} {'pass':<9} {'median ms':>10} {'p25-p75 ms':>16} {'fold/original':>14}")
    for bw in (False, True):
        for n in names:
            ts = sorted(times[(n, bw)])
            med = statistics.median(ts)
            q = statistics.quantiles(ts, n=4)
            ratio = ""
            if n.startswith("fold"):
                base = statistics.median(times[("original" + n[4:], bw)])
                ratio = f"{med / base:.3f}"
            print(f"{n:<18} {'fwd+bwd' if bw else 'fwd':<9} {med * 1e3:>10.2f} "
                  f"{q[0] * 1e3:>7.2f}-{q[2] * 1e3:<8.2f} {ratio:>14}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
