"""save_checkpoint / load_checkpoint: a hand-written loop resumes bit for bit, in the format of
`hp train` (hp ckpt verify reads it, hp train --resume continues it, and a loop continues an
`hp train` checkpoint)."""
import sys

import numpy as np
import pytest

import hyperparallel as hp
from conftest import ROOT, run
from test_train import ENV, SHORT, cli_losses

sys.path.insert(0, str(ROOT / "python" / "examples"))
from train_loop import train_loop  # noqa: E402

FOUR = [s for s in SHORT if not s.startswith("training.steps")] + ["training.steps=4"]


def quiet(line):
    pass


@pytest.fixture(scope="module")
def four_steps():
    """The uninterrupted loop's 4 losses (from the repository root, where the config's data is)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ROOT)
        return train_loop(overrides=FOUR, log=quiet)


def test_loop_resumes_bitwise(four_steps, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    first = train_loop(overrides=FOUR, steps=2, save=tmp_path / "run", log=quiet)
    # A fresh model, optimizer and loader (the loop rebuilds them), loaded from the checkpoint.
    rest = train_loop(overrides=FOUR, resume=tmp_path / "run", log=quiet)
    assert len(rest) == 2
    assert first + rest == four_steps  # bitwise


def test_hp_reads_and_continues_the_loops_checkpoint(hp_cli, four_steps, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    train_loop(overrides=FOUR, steps=2, save=tmp_path / "run", log=quiet)
    step_dir = tmp_path / "run" / "step-00000002"
    assert (tmp_path / "run" / "latest").read_text().strip() == "step-00000002"
    run([hp_cli, "ckpt", "verify", str(step_dir)], env=ENV)  # exits non-zero on any fault
    sets = [a for s in FOUR + [f"run.dir={tmp_path / 'cli'}"] for a in ("--set", s)]
    losses = cli_losses([hp_cli, "train", "configs/default.yaml", "--resume", str(step_dir)] + sets,
                        tmp_path / "cli")
    assert losses == four_steps[2:]


def test_loop_continues_hp_train_checkpoint(hp_cli, four_steps, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    # The 4-step run (its learning-rate schedule) stopped and checkpointed after step 2.
    sets = [a for s in FOUR + [f"run.dir={tmp_path / 'cli'}"] for a in ("--set", s)]
    run([hp_cli, "train", "configs/default.yaml", "--stop-after", "2"] + sets, env=ENV)
    assert train_loop(overrides=FOUR, resume=tmp_path / "cli", log=quiet) == four_steps[2:]


def test_extra_optimizer_state_and_errors(tmp_path):
    model_dir = ROOT / "tests" / "models" / "fixtures" / "qwen3"
    model = hp.from_pretrained(model_dir)
    opt = hp.AdamW(model)
    ids = np.arange(8) % 16
    model.loss(ids).backward()
    opt.step(1e-3)
    saved = {n: p.numpy().copy() for n, p in model.named_parameters()}
    step_dir = hp.save_checkpoint(tmp_path / "run", model, opt, step=7, extra={"epoch": 3})
    assert step_dir.endswith("step-00000007")
    other = hp.from_pretrained(model_dir)
    other_opt = hp.AdamW(other)
    res = hp.load_checkpoint(tmp_path / "run", other, other_opt)
    assert res == {"step": 7, "path": step_dir, "extra": {"epoch": 3}}
    for n, p in other.named_parameters():
        assert np.array_equal(p.numpy(), saved[n]), n
    assert [k for k, _ in other_opt.state_dict()] == [k for k, _ in opt.state_dict()]
    for (k, a), (_, b) in zip(opt.state_dict(), other_opt.state_dict()):
        assert np.array_equal(a.numpy(), b.numpy()), k
    with pytest.raises(hp.IoError, match="nowhere"):
        hp.load_checkpoint(tmp_path / "nowhere", other)
    # Another architecture's model (parameters the checkpoint lacks): an IoError naming the file.
    with pytest.raises(hp.IoError, match=r"metadata\.json: "):
        hp.load_checkpoint(step_dir, hp.from_pretrained(model_dir.parent / "qwen3_moe"))


def test_save_refuses_under_several_ranks(hp_cli, tmp_path):
    # Hand-written loops are one process (Python binds no collective): under `hp launch -n 2` every
    # rank gets the same hp.ValueError rather than two ranks writing one directory.
    script = tmp_path / "save2.py"
    script.write_text(
        "import sys, hyperparallel as hp\n"
        f"model = hp.from_pretrained({str(ROOT / 'tests/models/fixtures/qwen3')!r})\n"
        "try:\n"
        f"    hp.save_checkpoint({str(tmp_path / 'run')!r}, model)\n"
        "except hp.ValueError as e:\n"
        f"    open({str(tmp_path / 'err')!r} + sys.argv[1], 'w').write(str(e))\n")
    run([hp_cli, "launch", "-n", "2", "--", "bash", "-c",
         f'exec {sys.executable} {script} "$OMPI_COMM_WORLD_RANK"'], env=ENV)
    for rank in (0, 1):
        assert "one of 2 ranks" in (tmp_path / f"err{rank}").read_text()
    assert not (tmp_path / "run").exists()
