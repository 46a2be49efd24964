"""Trains a small GPT-2-shaped LM twice from the same initial weights: as written (LayerNorm)
and as lnverify's training fold (RMSNorm, the producers' weights centered by a CBWC
parametrization), with the same dropout masks, and prints both loss curves. The curves agree
to rounding: the fold computes the same function of the same parameters.

    PYTHONPATH=build/python python3 examples/train_cbwc_rmsnorm.py [--steps N] [--optimizer sgd|adam]
"""
import argparse
import copy

import torch
from torch import nn
from torch.nn.utils import parametrize

import lnverify.torch as lt
from lnverify.models import GPT2


def batches(steps, vocab=32, seq=16, batch=8):
    """Sequences counting up modulo vocab from random starts: next-token prediction."""
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        start = torch.randint(0, vocab, (batch, 1), generator=g)
        seqs = (start + torch.arange(seq + 1)) % vocab
        yield seqs[:, :-1], seqs[:, 1:]


def train(model, steps, optimizer):
    opt = (torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9) if optimizer == "sgd"
           else torch.optim.Adam(model.parameters(), lr=3e-3))
    model.train()
    losses = []
    for step, (x, y) in enumerate(batches(steps)):
        torch.manual_seed(step)  # the same dropout masks in both runs
        opt.zero_grad()
        logits = model(x)
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--optimizer", choices=["sgd", "adam"], default="adam")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = GPT2(vocab=32, d=32, heads=4, layers=2, seq=16, p=0.1).double()  # tied head
    example = next(batches(1))[0]
    print(lt.audit(model, example, mode="training"))
    folded = lt.fold(model, example, mode="training")  # RMSNorm + CBWC parametrizations
    original = copy.deepcopy(model)
    a = train(original, args.steps, args.optimizer)
    b = train(folded, args.steps, args.optimizer)
    print(f"{'step':>4}  {'LayerNorm loss':>18}  {'CBWC+RMSNorm loss':>18}  {'rel. diff':>9}")
    for k, (la, lb) in enumerate(zip(a, b)):
        print(f"{k:>4}  {la:>18.12f}  {lb:>18.12f}  {abs(la - lb) / abs(la):>9.1e}")
    # The trained fold as a plain inference model: centered weights, no parametrizations
    # (lnverify's remove_parametrizations unties the head from the centered table first).
    lt.remove_parametrizations(folded)
    assert not any(parametrize.is_parametrized(m) for m in folded.modules())
    print(lt.equiv(original, folded, example, trials=1))


if __name__ == "__main__":
    main()
