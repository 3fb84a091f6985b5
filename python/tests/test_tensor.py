"""hyperparallel.Tensor <-> NumPy: shared memory, dtypes, autograd fields, and errors instead of
crashes for bad input."""
import numpy as np
import pytest

import hyperparallel as hp


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.bool_])
def test_round_trip_shares_memory(dtype):
    a = (np.arange(12).reshape(3, 4) % 3).astype(dtype)
    t = hp.from_numpy(a)
    assert t.shape == (3, 4)
    assert t.dtype == np.dtype(dtype)
    b = np.asarray(t)
    assert np.shares_memory(a, b)  # no copy either way
    assert np.array_equal(a, b)
    a[0, 0] = 1
    assert t.tolist()[0][0] == 1  # the tensor reads the array's memory


def test_tensor_outlives_array_and_array_outlives_tensor():
    t = hp.from_numpy(np.full((1000,), 7.0, np.float32))  # the array's only owner is t
    assert float(hp.sum(t)) == 7000.0
    b = np.asarray(hp.mul(t, 2.0))
    del t
    assert b[999] == 14.0  # b keeps its tensor's storage alive


def test_views_export_their_strides():
    t = hp.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))
    tt = t.transpose(0, 1)
    assert not tt.is_contiguous()
    assert np.array_equal(np.asarray(tt), np.arange(6, dtype=np.float32).reshape(2, 3).T)


def test_non_contiguous_and_readonly_arrays_are_copied():
    a = np.arange(6, dtype=np.float64).reshape(2, 3).T
    assert np.array_equal(np.asarray(hp.from_numpy(a)), a)
    r = np.arange(3, dtype=np.float32)
    r.setflags(write=False)
    t = hp.from_numpy(r)
    assert not np.shares_memory(np.asarray(t), r)


def test_bf16_through_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.array([1.0, -2.5, 3.140625, 1e-3], dtype=ml_dtypes.bfloat16)
    t = hp.from_numpy(x)
    assert t.dtype_name == "bf16" and t.dtype == np.dtype(ml_dtypes.bfloat16)
    assert np.shares_memory(np.asarray(t), x)
    # The library's bf16 -> f32 conversion equals ml_dtypes' bit for bit.
    assert np.array_equal(np.asarray(t.to("f32")), x.astype(np.float32))
    # f32 -> bf16 rounds to nearest even in both.
    f = np.array([1.00390625, 1.01171875, -3.3, 65504.0], dtype=np.float32)
    got = np.asarray(hp.from_numpy(f).to("bf16"))
    assert np.array_equal(got.view(np.uint16), f.astype(ml_dtypes.bfloat16).view(np.uint16))


def test_autograd_fields():
    w = hp.tensor([[1.0, 2.0], [3.0, 4.0]]).requires_grad_()
    assert w.requires_grad and w.grad is None
    loss = hp.sum(hp.square(w))
    loss.backward()
    assert np.array_equal(np.asarray(w.grad), 2 * np.asarray(w))
    w.grad = None
    assert w.grad is None
    with hp.no_grad():
        y = hp.square(w)
    assert not y.requires_grad


def test_bad_input_raises_never_crashes():
    with pytest.raises(hp.ValueError, match="unsupported dtype complex128"):
        hp.from_numpy(np.zeros(3, np.complex128))
    a = hp.from_numpy(np.zeros((2, 3), np.float32))
    b = hp.from_numpy(np.zeros((4, 5), np.float32))
    with pytest.raises(hp.ValueError) as e:
        hp.matmul(a, b)
    assert str(e.value).startswith("[")  # the library's "[component] ..." message
    assert isinstance(e.value, ValueError)  # also the built-in
    with pytest.raises(hp.ValueError):
        hp.add(a, hp.from_numpy(np.zeros(3, np.int64)).to("f32").reshape(3, 1).expand([3, 4]))
    with pytest.raises(ValueError):
        hp.Tensor._from_buffer(np.zeros(5, np.uint8), [2, 3], "f32")
