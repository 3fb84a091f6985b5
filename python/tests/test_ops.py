"""The ops with autograd: the README's C++ snippet in Python, and a few ops' values and gradients
against NumPy."""
import numpy as np
import pytest

import hyperparallel as hp


def test_readme_snippet_gradient():
    hp.manual_seed(0)
    w, x = hp.randn([16, 8]).requires_grad_(), hp.randn([4, 8])
    loss = hp.mean(hp.square(hp.linear(x, w)))
    loss.backward()
    wn, xn = np.asarray(w, np.float64), np.asarray(x, np.float64)
    y = xn @ wn.T
    assert abs(float(loss) - (y ** 2).mean()) < 1e-5
    want = 2 * y.T @ xn / y.size  # d mean(y²) / d w
    assert np.allclose(np.asarray(w.grad), want, rtol=1e-5, atol=1e-6)
    # The same seed draws the same values (the library's Philox generator).
    hp.manual_seed(0)
    assert np.array_equal(np.asarray(hp.randn([16, 8])), np.asarray(w))


def test_elementwise_reductions_views():
    a = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    t = hp.from_numpy(a.copy()).requires_grad_()
    out = hp.sum(hp.silu(t) * 2.0 + hp.exp(t).transpose(0, 1).reshape(3, 4) - 1.0)
    ref = (a / (1 + np.exp(-a)) * 2 + np.exp(a).T.reshape(3, 4) - 1).sum()
    assert abs(float(out) - ref) < 1e-4
    out.backward()
    sig = 1 / (1 + np.exp(-a))
    want = 2 * (sig * (1 + a * (1 - sig))) + np.exp(a)
    assert np.allclose(np.asarray(t.grad), want, rtol=1e-5)
    assert np.allclose(np.asarray(hp.softmax(t, -1)),
                       np.exp(a) / np.exp(a).sum(-1, keepdims=True), rtol=1e-6)
    assert np.asarray(hp.mean(t, [1], keepdim=True)).shape == (3, 1)
    assert [s.shape for s in hp.split(t, [1, 3], 1)] == [(3, 1), (3, 3)]


def test_cross_entropy_and_attention():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((5, 7)).astype(np.float32)
    targets = np.array([0, 6, 3, -100, 2], np.int64)
    t = hp.from_numpy(logits).requires_grad_()
    loss = hp.cross_entropy(t, hp.from_numpy(targets))
    logp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    keep = targets != -100
    assert abs(float(loss) - -logp[keep, targets[keep]].mean()) < 1e-6
    loss.backward()
    assert np.allclose(np.asarray(t.grad)[3], 0)  # the ignored row gets no gradient
    q = hp.from_numpy(rng.standard_normal((1, 2, 4, 8)).astype(np.float32))
    out = np.asarray(hp.scaled_dot_product_attention(q, q, q, causal=True))
    qn = np.asarray(q)[0]
    s = qn @ qn.transpose(0, 2, 1) / np.sqrt(8) + np.triu(np.full((4, 4), -np.inf), 1)
    p = np.exp(s - s.max(-1, keepdims=True))
    assert np.allclose(out[0], (p / p.sum(-1, keepdims=True)) @ qn, atol=1e-5)


def test_shape_errors_name_the_shapes():
    with pytest.raises(hp.ValueError, match=r"\[2, 3\]"):
        hp.linear(hp.zeros([2, 3]), hp.zeros([4, 5]))
    with pytest.raises(hp.ValueError):
        hp.reshape(hp.zeros([2, 3]), [4, 2])
    with pytest.raises(hp.IndexError):
        hp.select(hp.zeros([2, 3]), 0, 5)
