"""Tokenizer.from_file: encode / decode (and the batch forms) equal `hp tokenize`."""
import json

import pytest

import hyperparallel as hp
from conftest import ROOT, run

TOKENIZERS = ROOT / "tests" / "io" / "fixtures" / "tokenizers"
TEXTS = ["Hello world!", "  spaces and\ttabs  ", "naïve café — 東京 🤖", "x = a+b; // 12345"]


@pytest.mark.parametrize("name", ["llama2", "deepseek_v3"])
@pytest.mark.parametrize("add_special", [False, True])
def test_ids_equal_hp_tokenize(name, add_special, hp_cli, tmp_path):
    path = TOKENIZERS / f"{name}.tokenizer.json"
    tok = hp.Tokenizer.from_file(str(path))
    inputs = tmp_path / "in.txt"
    inputs.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    cmd = [hp_cli, "tokenize", "--tokenizer", str(path), "--file", str(inputs)]
    want = [json.loads(line) for line in run(cmd + ["--add-special"] * add_special).splitlines()]
    assert tok.encode_batch(TEXTS, add_special_tokens=add_special) == want
    assert [tok.encode(t, add_special_tokens=add_special) for t in TEXTS] == want
    ids = tmp_path / "ids.txt"
    ids.write_text("".join(json.dumps(w) + "\n" for w in want))
    texts = run([hp_cli, "tokenize", "--tokenizer", str(path), "--file", str(ids), "--decode",
                 "--skip-special"]).split("\n")[:-1]
    assert tok.decode_batch(want, skip_special_tokens=True) == texts
    assert tok.decode(want[2], skip_special_tokens=True) == texts[2]


def test_errors():
    with pytest.raises(hp.IoError, match="no_such.json"):
        hp.Tokenizer.from_file("no_such.json")
    tok = hp.Tokenizer.from_file(str(TOKENIZERS / "llama2.tokenizer.json"))
    with pytest.raises(TypeError):  # ids that are no int32: refused, not wrapped
        tok.decode([2 ** 40])
    with pytest.raises(TypeError):
        tok.encode_batch("one string, not a list")
