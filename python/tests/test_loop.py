"""The hand-written loop (python/examples/train_loop.py): the losses of `hp train` bit for bit
without the custom term, and a falling loss with it."""
import sys

import hyperparallel as hp
from conftest import ROOT
from test_train import SHORT, cli_losses

sys.path.insert(0, str(ROOT / "python" / "examples"))
from train_loop import train_loop  # noqa: E402


def test_loop_equals_hp_train(hp_cli, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    overrides = SHORT + [f"run.dir={tmp_path / 'unused'}"]
    losses = train_loop(overrides=overrides, log=lambda line: None)
    sets = [a for s in SHORT + [f"run.dir={tmp_path / 'cli'}"] for a in ("--set", s)]
    assert losses == cli_losses([hp_cli, "train", "configs/default.yaml"] + sets, tmp_path / "cli")


def test_loop_with_custom_term_learns(monkeypatch):
    monkeypatch.chdir(ROOT)
    overrides = [s for s in SHORT if not s.startswith("training.steps")] + ["training.steps=8"]
    plain = train_loop(overrides=overrides, log=lambda line: None)
    custom = train_loop(overrides=overrides, l2=0.5, log=lambda line: None)
    assert custom[0] == plain[0]  # the same model and batch: the term changes the updates only
    assert custom != plain
    assert custom[-1] < custom[0] - 0.5


def test_optimizers_by_hand():
    w = hp.tensor([[1.0, -2.0], [3.0, 0.5]]).requires_grad_()
    opt = hp.AdamW([("w", w)], weight_decay=0.0)
    hp.sum(hp.square(w)).backward()
    opt.step(0.1)
    # AdamW's first step moves each element by lr · sign(grad) (bias-corrected m / sqrt(v)).
    assert abs(w.numpy() - [[0.9, -1.9], [2.9, 0.4]]).max() < 1e-6
    m = hp.tensor([[1.0, 0.0], [0.0, 1.0]]).requires_grad_()
    muon = hp.Muon([("m", m)])
    hp.sum(m * hp.tensor([[1.0, 2.0], [3.0, 4.0]])).backward()
    muon.step(0.01)
    assert not (m.numpy() == [[1.0, 0.0], [0.0, 1.0]]).all()
    assert "state.w.exp_avg" in dict(opt.state_dict())
