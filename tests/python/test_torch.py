"""lnverify.torch on real modules: audit names and verdicts against the CLI on the same
export, the inference fold (float64 outputs, exact equivalence), the training fold (SGD and
Adam trajectories), errors."""
import copy
import json
import os
import re
import subprocess

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn.utils import parametrize  # noqa: E402

import lnverify  # noqa: E402
import lnverify.torch as lt  # noqa: E402
from models import MODELS, gpt2, layerscale  # noqa: E402

CLI = os.environ["LNVERIFY_CLI"]


def cli_audit(tmp_path, data):
    """The CLI's audit JSON of the same ONNX bytes."""
    path = tmp_path / "export.onnx"
    path.write_bytes(data)
    out = subprocess.run([CLI, "audit", str(path), "--json", "-"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def renamed(text, names):
    return re.sub(r"`([^`]+)`", lambda m: "`" + names.get(m[1], m[1]) + "`", text)


def assert_audit_is_the_clis(report, cli):
    to_new = {old: new for new, old in report.onnx_names.items()}
    mine = report.to_dict()
    assert mine["format"] == cli["format"] == "lnverify.report"
    assert [to_new[e["name"]] for e in cli["layer_norms"]] == [e["name"] for e in mine["layer_norms"]]
    for c, m in zip(cli["layer_norms"], mine["layer_norms"]):
        assert c["foldable"] == m["foldable"], m["name"]
        for mode in ("inference", "training"):
            assert renamed(c["reasons"][mode], to_new) == m["reasons"][mode], m["name"]
        if report.mode == "inference":  # the CLI's audit plans the inference fold
            assert [to_new.get(x, x) for x in c["centered"]] == m["centered"], m["name"]
    if report.mode == "inference":
        assert cli["summary"] == mine["summary"]


@pytest.mark.parametrize("name", list(MODELS))
def test_audit_verdicts_are_the_clis_on_the_same_export(name, tmp_path):
    module, inputs, _ = MODELS[name]()
    report = lt.audit(module, inputs)
    assert_audit_is_the_clis(report, cli_audit(tmp_path, report.onnx_bytes))
    # every LayerNorm is named by its module, as the user wrote it
    modules = dict(module.named_modules())
    for v in report.layer_norms:
        assert isinstance(modules.get(v["name"]), nn.LayerNorm), v["name"]


@pytest.mark.parametrize("name", ["gpt2", "transformer_pre"])
def test_training_audit_is_the_clis_on_the_training_export(name, tmp_path):
    module, inputs, _ = MODELS[name]()
    report = lt.audit(module, inputs, mode="training")
    assert report.mode == "training"
    assert b"Dropout" in report.onnx_bytes  # exported with dropout active
    assert_audit_is_the_clis(report, cli_audit(tmp_path, report.onnx_bytes))


def test_gpt2_report_names_modules_and_parameters():
    module, inputs, _ = gpt2()
    report = lt.audit(module, inputs)
    assert [v["name"] for v in report.layer_norms] == ["h.0.ln_1", "h.0.ln_2", "h.1.ln_1",
                                                       "h.1.ln_2", "ln_f"]
    entries = {e["name"]: e for e in report.to_dict()["layer_norms"]}
    assert entries["h.0.ln_1"]["centered"] == ["wte", "wpe"]
    assert "h.0.attn.out_proj" in entries["h.0.ln_2"]["centered"]
    assert "h.0.mlp.3" in entries["h.1.ln_1"]["centered"]
    text = str(report)
    assert text.splitlines()[0].split() == ["LayerNorm", "inference", "training", "bias", "centered"]
    assert "5 of 5 LayerNorms foldable (inference)" in text
    # the tie: the head keeps the uncentered table, and the report says so
    assert any("wte.weight" in n and "head.weight" in n and "uncentered" in n for n in report.notes)
    assert "head.weight keeps the uncentered values" in text


def test_training_reason_names_the_dropout_module():
    class Drop(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Linear(4, 8)
            self.drop_emb = nn.Dropout(0.1)
            self.ln = nn.LayerNorm(8)

        def forward(self, x):
            return self.ln(self.drop_emb(self.emb(x)))

    report = lt.audit(Drop().double(), torch.randn(2, 4, dtype=torch.float64), mode="training")
    (v,) = report.layer_norms
    assert v["name"] == "ln" and v["foldable"] == (True, False)
    assert "`drop_emb:Dropout`" in v["reason"][1]


def outputs(module, inputs):
    module.eval()
    with torch.no_grad():
        out = module(*inputs)
    return out if isinstance(out, tuple) else (out,)


def test_a_layer_scale_fold_moves_gamma_into_the_linear_before_it():
    module, inputs, fresh = MODELS["layerscale"]()
    report = lt.audit(module, inputs)
    assert report.foldable("inference") == ["ln1", "ln2", "ln_f"]
    folded = lt.fold(module, inputs)
    # γ is one; the last Linear of each branch holds C·diag(γ)·W and C(γ ⊙ b)
    for k in (1, 2):
        gamma = getattr(module, f"gamma{k}")
        lin, lin_f = getattr(module, f"mlp{k}")[2], getattr(folded, f"mlp{k}")[2]
        assert torch.equal(getattr(folded, f"gamma{k}"), torch.ones_like(gamma))
        w = gamma[:, None] * lin.weight
        torch.testing.assert_close(lin_f.weight, w - w.mean(0, keepdim=True), rtol=0, atol=1e-15)
        b = gamma * lin.bias
        torch.testing.assert_close(lin_f.bias, b - b.mean(), rtol=0, atol=1e-15)
    g = torch.Generator().manual_seed(5)
    for x in (inputs, fresh(g)):
        torch.testing.assert_close(folded(*x), module(*x), rtol=1e-12, atol=1e-12)
    assert lt.equiv(module, folded, inputs, trials=1).outcome == "equal"
    # γ moved without the centering: the producer's output is not centered, the fold wrong
    broken = copy.deepcopy(folded)
    with torch.no_grad():
        broken.mlp1[2].bias.add_(0.5)
    assert lt.equiv(module, broken, inputs, trials=1).outcome == "different"


def test_a_layer_scale_training_fold_reads_gamma_through_the_producer():
    module, inputs, _ = MODELS["layerscale"]()
    folded = lt.fold(module, inputs, mode="training")
    assert isinstance(folded.parametrizations.gamma1[0], lt.One)
    (sc,) = folded.mlp1[2].parametrizations.weight
    assert isinstance(sc, lt.ScaledCenter)
    # the γ the producer reads is the trained parameter itself
    assert sc._gamma[0] is folded.parametrizations.gamma1.original
    names = {n for n, _ in folded.named_parameters()}
    assert "parametrizations.gamma1.original" in names
    x = inputs[0]
    torch.testing.assert_close(folded(x), module(x), rtol=1e-12, atol=1e-12)
    # the same gradients for γ, W and b: the function is the same for every γ, W, b
    ga = torch.autograd.grad(module(x).pow(3).sum(), [module.gamma1, module.mlp1[2].weight])
    gb = torch.autograd.grad(folded(x).pow(3).sum(), [folded.parametrizations.gamma1.original,
                                                      folded.mlp1[2].parametrizations.weight.original])
    for a, b in zip(ga, gb):
        torch.testing.assert_close(b, a, rtol=1e-10, atol=1e-12)
    # lnverify's remove_parametrizations: the inference fold (centerings before the γs)
    removed = lt.remove_parametrizations(folded)
    inference = lt.fold(module, inputs)
    for k, v in inference.state_dict().items():
        torch.testing.assert_close(removed.state_dict()[k], v, rtol=0, atol=1e-15)


def test_a_layer_scale_trains_like_the_original():
    module, inputs, _ = MODELS["layerscale"]()
    folded = lt.fold(module, inputs, mode="training")
    orig = copy.deepcopy(module)
    x = inputs[0]
    target = torch.randn(module(x).shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    losses = []
    for m in (orig, folded):
        opt = torch.optim.Adam(m.parameters(), lr=1e-2)
        curve = []
        for _ in range(20):
            opt.zero_grad()
            loss = (m(x) - target).pow(2).mean()
            loss.backward()
            opt.step()
            curve.append(loss.item())
        losses.append(curve)
    assert losses[0][-1] < losses[0][0]
    for a, b in zip(*losses):
        assert abs(a - b) <= 1e-10 * abs(a), losses
    torch.testing.assert_close(folded.parametrizations.gamma1.original, orig.gamma1, rtol=1e-9, atol=1e-12)


def test_a_shared_layer_scale_factor_is_refused_naming_its_other_reader():
    class Shared(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(8, 8)
            self.ln1, self.ln2 = nn.LayerNorm(8), nn.LayerNorm(8)
            self.fc = nn.Linear(8, 8)
            self.gamma = nn.Parameter(torch.rand(8) + 0.5)

        def forward(self, x):
            x = self.proj(x)
            x = x + self.gamma * self.fc(self.ln1(x))
            return self.ln2(x) + self.gamma  # γ read a second time

    torch.manual_seed(0)
    module = Shared().double()
    x = torch.randn(2, 3, 8, dtype=torch.float64)
    assert lt.audit(module, x).foldable() == ["ln1", "ln2"]
    with pytest.raises(lt.FoldError, match="LayerScale factor 'gamma'.*also read"):
        lt.fold(module, x)


FOLDED_MODELS = list(MODELS)


@pytest.mark.parametrize("name", FOLDED_MODELS)
def test_inference_fold_keeps_the_outputs(name):
    module, inputs, fresh = MODELS[name]()
    before = copy.deepcopy(module.state_dict())
    report = lt.audit(module, inputs)
    folded = lt.fold(module, inputs)
    # the original is untouched
    for k, v in module.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert type(folded) is type(module)
    mods = dict(folded.named_modules())
    for v in report.layer_norms:
        if v["foldable"][0] and type(dict(module.named_modules())[v["name"]]) is nn.LayerNorm:
            assert isinstance(mods[v["name"]], (lt.RMSNorm, getattr(nn, "RMSNorm", lt.RMSNorm)))
        else:  # not foldable, or no plain nn.LayerNorm (torchvision's LayerNorm2d): kept
            assert isinstance(mods[v["name"]], nn.LayerNorm)
    # where something folds, centering happened: some parameter changed
    changed = [k for k, v in folded.state_dict().items() if k in before and not torch.equal(v, before[k])]
    assert bool(changed) == bool(report.foldable("inference")), (changed, report.foldable())
    g = torch.Generator().manual_seed(5)
    for x in (inputs, fresh(g), fresh(g)):
        for a, b in zip(outputs(module, x), outputs(folded, x)):
            torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-12 * a.abs().max().item())


def test_a_functional_layer_norm_is_named_by_its_module_and_kept_by_the_fold():
    class MyNorm(nn.Module):  # not an nn.LayerNorm: F.layer_norm with its own parameters
        def __init__(self, d):
            super().__init__()
            self.scale = nn.Parameter(torch.rand(d) + 0.5)
            self.shift = nn.Parameter(torch.randn(d))

        def forward(self, x):
            return nn.functional.layer_norm(x, x.shape[-1:], self.scale, self.shift)

    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(4, 8), MyNorm(8), nn.Linear(8, 3)).double()
    x = torch.randn(5, 4, dtype=torch.float64)
    report = lt.audit(module, x)
    assert [v["name"] for v in report.layer_norms] == ["1"]
    assert report.foldable() == ["1"]
    folded = lt.fold(module, x)
    assert isinstance(folded[1], MyNorm)  # kept; its input is zero-mean now
    assert folded[0].weight.sum(0).abs().max() < 1e-14 and not torch.equal(folded[0].weight, module[0].weight)
    torch.testing.assert_close(folded(x), module(x), rtol=1e-12, atol=1e-13)


def test_gpt2_fold_unties_the_head_and_centers_the_table():
    module, inputs, _ = gpt2()
    folded = lt.fold(module, inputs)
    assert folded.head.weight is not folded.wte.weight
    torch.testing.assert_close(folded.head.weight, module.wte.weight, rtol=0, atol=0)
    means = folded.wte.weight.mean(1)
    assert means.abs().max() < 1e-15
    assert folded.h[0].attn.out_proj.weight.mean(0).abs().max() < 1e-15
    assert folded.h[0].mlp[3].bias.mean().abs() < 1e-15


@pytest.mark.parametrize("name", ["gpt2"])
def test_equiv_proves_the_fold_and_refutes_a_broken_one(name):
    module, inputs, _ = MODELS[name]()
    folded = lt.fold(module, inputs)
    r = lt.equiv(module, folded, inputs, trials=1)
    assert r.outcome == "equal", str(r)
    assert r.to_dict()["format"] == "lnverify.equiv"
    broken = copy.deepcopy(folded)
    for m in broken.modules():
        if isinstance(m, nn.Linear):
            with torch.no_grad():
                m.weight[0, 0] += 1e-3
            break
    assert lt.equiv(module, broken, inputs, trials=1).outcome == "different"


def test_a_float32_fold_is_equal_up_to_weight_storage():
    module, inputs, _ = gpt2()
    module = module.float()
    r = lt.equiv(module, lt.fold(module, inputs), inputs, trials=1)
    assert r.outcome == "equal" and "equal up to weight storage" in str(r), str(r)


def test_equiv_pairs_outputs_by_position_when_the_last_norm_folds():
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8)).double()
    x = torch.randn(3, 4, dtype=torch.float64)
    folded = lt.fold(module, x)
    assert isinstance(folded[1], (lt.RMSNorm, getattr(nn, "RMSNorm", lt.RMSNorm)))
    r = lt.equiv(module, folded, x, trials=2, grad=True)
    assert r.outcome == "equal", str(r)
    assert "output_0" in str(r)


def train(module, make_opt, inputs, targets, steps=20):
    torch.manual_seed(123)
    module.train()
    opt = make_opt(module.parameters())
    losses = []
    for step in range(steps):
        torch.manual_seed(1000 + step)  # the same dropout masks for both models
        opt.zero_grad()
        logits = module(*inputs)
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_training_fold_trains_like_the_original(optimizer):
    module, inputs, _ = gpt2()
    report = lt.audit(module, inputs, mode="training")
    assert report.foldable("training") == ["h.0.ln_1", "h.0.ln_2", "h.1.ln_1", "h.1.ln_2", "ln_f"]
    folded = lt.fold(module, inputs, mode="training")
    assert parametrize.is_parametrized(folded.wte, "weight")
    assert folded.head.weight is folded.wte.parametrizations.weight.original  # the tie stays
    make = {"sgd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
            "adam": lambda p: torch.optim.Adam(p, lr=1e-2)}[optimizer]
    targets = torch.randint(0, 40, (2, 8), generator=torch.Generator().manual_seed(3))
    orig = copy.deepcopy(module)
    l0 = train(orig, make, inputs, targets)
    l1 = train(folded, make, inputs, targets)
    assert l0[-1] < l0[0]  # it trained
    for a, b in zip(l0, l1):
        assert abs(a - b) <= 1e-10 * abs(a), (l0, l1)
    # the same trained parameters
    p1 = {re.sub(r"(^|\.)parametrizations\.(\w+)\.original$", r"\1\2", k): v
          for k, v in folded.named_parameters()}
    assert "wpe" in p1 and "wte.weight" in p1
    # atol: the gradient of the key bias is zero in exact arithmetic (softmax ignores a shift),
    # so both runs see rounding noise (~1e-17) there, which Adam divides by sqrt(v) + 1e-8
    for k, v in orig.named_parameters():
        torch.testing.assert_close(p1[k], v, rtol=1e-9, atol=1e-9)


def remove_all(module):
    for m in list(module.modules()):
        if parametrize.is_parametrized(m):
            for name in list(m.parametrizations.keys()):
                parametrize.remove_parametrizations(m, name, leave_parametrized=True)
    return module


def test_torch_remove_parametrizations_gives_the_inference_fold():
    module, inputs, _ = gpt2(tied=False)
    folded = remove_all(lt.fold(module, inputs, mode="training"))
    inference = lt.fold(module, inputs)
    for k, v in inference.state_dict().items():
        torch.testing.assert_close(folded.state_dict()[k], v, rtol=0, atol=1e-15)
    assert lt.equiv(module, folded, inputs, trials=1).outcome == "equal"


def test_a_tied_training_fold_needs_lnverifys_remove_parametrizations():
    module, inputs, _ = gpt2()
    # torch's writes the centered table into the tensor the head shares: no longer the model
    plain = remove_all(lt.fold(module, inputs, mode="training"))
    assert lt.equiv(module, plain, inputs, trials=1).outcome == "different"
    # lnverify's unties the head first: the inference fold
    folded = lt.remove_parametrizations(lt.fold(module, inputs, mode="training"))
    assert not any(parametrize.is_parametrized(m) for m in folded.modules())
    inference = lt.fold(module, inputs)
    for k, v in inference.state_dict().items():
        torch.testing.assert_close(folded.state_dict()[k], v, rtol=0, atol=1e-15)
    assert lt.equiv(module, folded, inputs, trials=1).outcome == "equal"


# --- errors ---------------------------------------------------------------------------------

class NoExport(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(4)

    def forward(self, x):
        return self.ln(x), {"not": "a tensor"}.get("nope", torch.fft.fft(x).real)


def test_a_module_that_does_not_export_is_an_export_error_naming_it():
    with pytest.raises(lt.ExportError, match="NoExport") as e:
        lt.audit(NoExport(), torch.randn(2, 4))
    assert isinstance(e.value, lnverify.ModelError)


def test_an_input_of_the_wrong_shape_is_an_input_error_naming_the_module():
    module, _, _ = layerscale()
    with pytest.raises(lt.InputError, match=r"LayerScaleBlock.*\(2, 5, 7\)"):
        lt.fold(module, torch.randn(2, 5, 7, dtype=torch.float64))


def test_a_module_without_layernorm_is_an_error_naming_it():
    with pytest.raises(lt.NoLayerNormError, match="Sequential"):
        lt.audit(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), torch.randn(2, 4))


def test_a_weight_read_centered_and_raw_in_one_module_is_a_fold_error_naming_it():
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 8)
            self.ln = nn.LayerNorm(8)

        def forward(self, x):  # lin.weight also read raw, outside any LayerNorm's input
            return self.ln(self.lin(x)), x.unsqueeze(0) @ self.lin.weight.t()

    torch.manual_seed(0)
    module = Twice().double()
    x = torch.randn(3, 4, dtype=torch.float64)
    assert lt.audit(module, x).foldable() == ["ln"]  # the CLI would untie a centered copy
    with pytest.raises(lt.FoldError, match=r"Twice: .*lin\.weight"):
        lt.fold(module, x)


def test_a_bad_mode_is_a_model_error():
    with pytest.raises(lnverify.ModelError, match="mode"):
        lt.fold(nn.LayerNorm(4), torch.randn(2, 4), mode="eval")
