"""hyperparallel.train runs what `hp train` runs: the same losses bit for bit, at 1 rank and under
`hp launch -n 2`; per-step callbacks; config errors as ConfigError with the CLI's message."""
import json
import os
import subprocess
import sys

import pytest

import hyperparallel as hp
from conftest import ROOT, run

# A short run of the README's default config (no sample, no checkpoint).
SHORT = ["training.steps=3", "training.batch_size=4", "training.seq_len=64",
         "training.sample_tokens=0", "checkpoint.interval=100000", "lr_scheduler.warmup_steps=1",
         "metrics.log_every=1", "training.mixed_precision=f32"]


# Ranks on one host without cross-memory attach (containers), one thread each, as the CLI tests.
ENV = {**os.environ, "HP_NUM_THREADS": "1", "OMPI_MCA_btl_vader_single_copy_mechanism": "none"}


def cli_losses(cmd, run_dir):
    run(cmd, env=ENV)
    recs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in recs if "loss" in r and "eval_loss" not in r]


def test_losses_equal_hp_train(hp_cli, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    seen = []
    res = hp.train("configs/default.yaml", SHORT + [f"run.dir={tmp_path / 'py'}"],
                   on_step=lambda m: seen.append(m))
    assert [m["step"] for m in seen] == [1, 2, 3]
    assert res["losses"] == [m["loss"] for m in seen]
    assert res["losses"][2] < res["losses"][0]
    sets = [a for s in SHORT + [f"run.dir={tmp_path / 'cli'}"] for a in ("--set", s)]
    want = cli_losses([hp_cli, "train", "configs/default.yaml"] + sets, tmp_path / "cli")
    assert res["losses"] == want  # bitwise: JSON keeps 17 significant digits


def test_losses_equal_hp_train_on_two_ranks(hp_cli, tmp_path):
    sets = [a for s in SHORT + [f"run.dir={tmp_path / 'cli'}"] for a in ("--set", s)]
    want = cli_losses([hp_cli, "launch", "-n", "2", "--", hp_cli, "train", "configs/default.yaml"]
                      + sets, tmp_path / "cli")
    script = tmp_path / "train2.py"
    overrides = SHORT + [f"run.dir={tmp_path / 'py'}"]
    script.write_text(
        "import json, sys, hyperparallel as hp\n"
        f"res = hp.train('configs/default.yaml', {overrides!r})\n"
        f"open({str(tmp_path / 'out')!r} + sys.argv[1], 'w').write(json.dumps(res['losses']))\n")
    # Each rank writes its own file; the ranks' losses are the global ones, so all equal.
    run([hp_cli, "launch", "-n", "2", "--", "bash", "-c",
         f'exec {sys.executable} {script} "$OMPI_COMM_WORLD_RANK"'],
        env=ENV)
    for rank in (0, 1):
        assert json.loads((tmp_path / f"out{rank}").read_text()) == want


def test_callback_stops_and_raises(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    res = hp.train("configs/default.yaml", SHORT + [f"run.dir={tmp_path / 'a'}"],
                   on_step=lambda m: m["step"] == 2)
    assert len(res["losses"]) == 2

    def boom(m):
        raise KeyError("from the callback")

    with pytest.raises(KeyError, match="from the callback"):
        hp.train("configs/default.yaml", SHORT + [f"run.dir={tmp_path / 'b'}"], on_step=boom)


def test_config_errors_carry_the_cli_message(hp_cli, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    bad = ["training.stpes=3"]
    with pytest.raises(hp.ConfigError) as e:
        hp.train("configs/default.yaml", bad)
    assert isinstance(e.value, hp.ValueError) and isinstance(e.value, ValueError)
    proc = subprocess.run([hp_cli, "train", "configs/default.yaml", "--set", bad[0]], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert str(e.value) in proc.stderr
    assert "did you mean training.steps" in str(e.value)
    with pytest.raises(hp.IoError):
        hp.train("configs/no_such.yaml")
