"""DLPack: Tensor.__dlpack__ / __dlpack_device__ and hp.from_dlpack share memory with NumPy both
ways (python/examples/torch_interop.py checks PyTorch the same way)."""
import numpy as np
import pytest

import hyperparallel as hp


@pytest.mark.parametrize("dtype", ["f64", "f32", "f16", "i32", "i64", "u8", "bool"])
def test_numpy_from_dlpack_shares_the_tensor(dtype):
    t = hp.ones([2, 3], dtype)
    a = np.from_dlpack(t)
    assert a.shape == (2, 3) and a.dtype == t.dtype
    t.fill_(0)  # the array sees the tensor's memory
    assert not a.any()
    assert t.__dlpack_device__() == (1, 0)


def test_numpy_from_dlpack_keeps_views_and_the_tensor_alive():
    base = hp.arange(0, 12, dtype="f32").reshape(3, 4)
    a = np.from_dlpack(base.transpose(0, 1))  # strided: strides come along
    del base
    assert np.array_equal(a, np.arange(12, dtype=np.float32).reshape(3, 4).T)


def test_copy_true_is_a_copy():
    t = hp.ones([4], "f32")

    class Copied:  # np.from_dlpack(x, copy=True) asks the producer for a copy
        def __dlpack__(self, **kwargs):
            return t.__dlpack__(**{**kwargs, "copy": True})

        def __dlpack_device__(self):
            return t.__dlpack_device__()

    a = np.from_dlpack(Copied())
    t.fill_(0)
    assert np.array_equal(a, [1, 1, 1, 1])


def test_from_dlpack_shares_numpy_memory():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = hp.from_dlpack(a)
    assert t.shape == (2, 3) and t.dtype_name == "f32"
    a[0, 0] = 42  # the tensor sees the array's memory
    assert t.numpy()[0, 0] == 42
    del a
    assert t.tolist() == [[42, 1, 2], [3, 4, 5]]  # the tensor keeps the array alive


def test_from_dlpack_round_trip_and_copies():
    t = hp.randn([3, 5])
    back = hp.from_dlpack(t)  # a Tensor is a DLPack producer too
    t.fill_(7)
    assert back.tolist() == t.tolist()
    a = np.arange(12, dtype=np.int64).reshape(3, 4)[:, ::2]  # not row-major: copied
    s = hp.from_dlpack(a)
    assert s.dtype_name == "i64" and s.tolist() == a.tolist()
    with pytest.raises(hp.ValueError, match="from_dlpack: DLPack dtype"):
        hp.from_dlpack(np.zeros(3, np.int16))


def test_bf16_and_f8_keep_their_dlpack_type():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    for name, np_type in (("bf16", ml_dtypes.bfloat16), ("f8e4m3", ml_dtypes.float8_e4m3fn)):
        t = hp.ones([4], "f32").to(name)
        back = hp.from_dlpack(t)  # through DLPack's own code for the type, not as integers
        assert back.dtype_name == name
        t.fill_(2)
        assert np.array_equal(back.numpy().astype(np.float32), [2, 2, 2, 2])
        assert back.numpy().dtype == np.dtype(np_type)
