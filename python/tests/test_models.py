"""from_pretrained for every registry architecture: logits equal `hp forward`'s bitwise; loss,
generation, parameters and save_pretrained."""
import numpy as np
import pytest

import hyperparallel as hp
from conftest import MODEL_FIXTURES, run

# One Hugging Face directory per registry architecture (tests/models/fixtures).
ARCHS = ["llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "mixtral", "deepseek_v3",
         "deepseek_v4_hc2"]


def cli_logits(hp_cli, model_dir, rows, vocab, tmp_path):
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("".join(" ".join(str(i) for i in r) + "\n" for r in rows))
    out = tmp_path / "logits.f32"
    run([hp_cli, "forward", "--model", str(model_dir), "--tokens", str(tokens), "--out", str(out)])
    return np.fromfile(out, dtype=np.float32).reshape(-1, vocab)


@pytest.mark.parametrize("arch", ARCHS)
def test_logits_equal_hp_forward(arch, hp_cli, tmp_path):
    model = hp.from_pretrained(MODEL_FIXTURES / arch)
    vocab = model.config["vocab_size"]
    rng = np.random.default_rng(0)
    ids = rng.integers(0, vocab, size=9)
    with hp.no_grad():
        logits = np.asarray(model.forward(ids))
    assert logits.shape == (9, vocab) and logits.dtype == np.float32
    want = cli_logits(hp_cli, MODEL_FIXTURES / arch, [ids], vocab, tmp_path)
    assert np.array_equal(logits.view(np.uint32), want.view(np.uint32))


def test_loss_generate_parameters_save(tmp_path):
    model = hp.from_pretrained(MODEL_FIXTURES / "qwen3")
    vocab = model.config["vocab_size"]
    ids = np.arange(12) % vocab
    loss = model.loss(ids)
    # HF's causal-LM loss: cross-entropy of logits[:-1] against ids[1:].
    logits = np.asarray(model.forward(ids), dtype=np.float64)
    logp = logits - np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1, keepdims=True)) \
        - logits.max(1, keepdims=True)
    want = -logp[np.arange(11), ids[1:]].mean()
    assert abs(float(loss) - want) < 1e-5
    loss.backward()
    names = [n for n, _ in model.named_parameters()]
    assert "model.embed_tokens.weight" in names
    params = dict(model.named_parameters())
    assert all(p.grad is not None for p in params.values())
    assert params["model.embed_tokens.weight"].shape == (vocab, model.config["hidden_size"])
    # Greedy generation: the first new token is the argmax of the prompt's last logits.
    new = model.generate(ids[:5], max_new_tokens=4, stop_ids=[])
    assert len(new) == 4
    with hp.no_grad():
        assert new[0] == int(np.argmax(np.asarray(model.forward(ids[:5]))[-1]))
    # save_pretrained → from_pretrained gives the same logits bitwise.
    model.save_pretrained(tmp_path / "saved")
    again = hp.from_pretrained(tmp_path / "saved")
    with hp.no_grad():
        assert np.array_equal(np.asarray(again.forward(ids)), np.asarray(model.forward(ids)))


def test_bad_ids_and_paths_raise():
    model = hp.from_pretrained(MODEL_FIXTURES / "llama")
    vocab = model.config["vocab_size"]
    with pytest.raises(hp.ValueError, match=f"outside the vocabulary \\[0, {vocab}\\)"):
        model.forward([1, vocab])
    with pytest.raises(hp.ValueError, match="must be integers"):
        model.forward([0.5, 1.0])
    with pytest.raises(hp.ValueError, match=r"\[T\] or \[B, T\]"):
        model.forward(np.zeros((1, 1, 2), np.int64))
    with pytest.raises(hp.IoError) as e:
        hp.from_pretrained("/nonexistent/model")
    assert "/nonexistent/model" in str(e.value) and isinstance(e.value, OSError)
