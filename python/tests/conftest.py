"""Shared fixtures: the repository root, the `hp` CLI the package's results are compared with
(HP_CLI, else build/hp), and the committed model / tokenizer fixtures."""
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL_FIXTURES = ROOT / "tests" / "models" / "fixtures"


@pytest.fixture(scope="session")
def hp_cli():
    path = pathlib.Path(os.environ.get("HP_CLI", ROOT / "build" / "hp"))
    if not path.exists():
        pytest.skip(f"no hp CLI at {path} (build it, or set HP_CLI)")
    return str(path)


def run(cmd, **kwargs):
    """Runs cmd from the repository root; its stdout, or an assertion naming stderr."""
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, **kwargs)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}: {proc.stderr[-2000:]}"
    return proc.stdout
