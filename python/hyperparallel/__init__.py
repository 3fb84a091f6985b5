"""HyperParallel from Python: the C++ library's tensors, ops, models, tokenizers and training.

Everything here calls the library itself (the extension module ``hyperparallel._core``, built from
this repository by ``pip install .``), so results are those of the C++ API and the ``hp`` CLI, bit
for bit. docs/PYTHON.md describes the package.
"""

import contextlib as _contextlib
import json as _json

import numpy as _np

from . import _core
from ._core import (  # noqa: F401  (re-exported)
    CommError,
    Config,
    ConfigError,
    DataLoader,
    Error,
    IndexError,
    InternalError,
    IoError,
    MemoryError,
    Model,
    Optimizer,
    PlanError,
    ScheduleError,
    Tensor,
    Tokenizer,
    TrainingDiverged,
    ValueError,
    WatchdogError,
    __version__,
    build_model,
    clip_factor,
    clip_grad_norm,
    config_yaml,
    grad_enabled,
    grad_norm,
    manual_seed,
    set_grad_enabled,
    train,
)

try:  # bf16 and the f8 formats as NumPy dtypes
    import ml_dtypes as _ml_dtypes
except ImportError:  # pragma: no cover - exercised where ml_dtypes is absent
    _ml_dtypes = None

# hp dtype name -> NumPy dtype, for the types NumPy has.
_NUMPY_DTYPES = {
    "f64": _np.dtype(_np.float64),
    "f32": _np.dtype(_np.float32),
    "f16": _np.dtype(_np.float16),
    "i32": _np.dtype(_np.int32),
    "i64": _np.dtype(_np.int64),
    "u8": _np.dtype(_np.uint8),
    "bool": _np.dtype(_np.bool_),
}
if _ml_dtypes is not None:
    for _name, _attr in (("bf16", "bfloat16"), ("f8e4m3", "float8_e4m3fn"),
                         ("f8e5m2", "float8_e5m2"), ("e8m0", "float8_e8m0fnu")):
        if hasattr(_ml_dtypes, _attr):
            _NUMPY_DTYPES[_name] = _np.dtype(getattr(_ml_dtypes, _attr))
_HP_NAMES = {dt: name for name, dt in _NUMPY_DTYPES.items()}


def _dtype_name(dtype):
    """The hp name ("f32", "bf16", ...) of an hp name, a NumPy dtype or a Python type."""
    if isinstance(dtype, str) and dtype in ("f64", "f32", "bf16", "f16", "f8e4m3", "f8e5m2",
                                            "e8m0", "i32", "i64", "u8", "bool"):
        return dtype
    try:
        np_dtype = _np.dtype(dtype)
    except TypeError as e:
        raise ValueError(f"[python] unknown dtype {dtype!r}") from e
    if np_dtype in _HP_NAMES:
        return _HP_NAMES[np_dtype]
    hint = " (bf16 needs ml_dtypes: pip install ml_dtypes)" if "bfloat16" in str(dtype) else ""
    raise ValueError(f"[python] unsupported dtype {np_dtype} (supported: "
                     f"{', '.join(str(d) for d in _HP_NAMES)}){hint}")


def from_numpy(array):
    """A Tensor sharing `array`'s memory (C-contiguous, writeable arrays; others are copied)."""
    a = _np.asarray(array)
    name = _dtype_name(a.dtype)
    if not (a.flags.c_contiguous and a.flags.writeable):
        a = _np.array(a, order="C", copy=True)
    return Tensor._from_buffer(a.reshape(-1).view(_np.uint8), list(a.shape), name)


def tensor(data, dtype=None, requires_grad=False):
    """A Tensor holding a copy of `data` (nested lists, NumPy arrays, numbers)."""
    a = _np.array(data, dtype=None if dtype is None else _NUMPY_DTYPES.get(_dtype_name(dtype)))
    if dtype is None and a.dtype == _np.float64 and not isinstance(data, _np.ndarray):
        a = a.astype(_np.float32)  # Python floats become f32, as in torch.tensor
    t = from_numpy(a)
    return t.requires_grad_(True) if requires_grad else t


def _to_numpy(t, dtype=None, copy=None):
    a = t._array()
    name = t.dtype_name
    if name in ("bf16", "f8e4m3", "f8e5m2", "e8m0"):
        if name not in _NUMPY_DTYPES:
            raise ValueError(f"[python] a {name} tensor to NumPy needs ml_dtypes (pip install "
                             "ml_dtypes), or t.to('f32') first")
        a = a.view(_NUMPY_DTYPES[name])
    if dtype is not None:
        a = a.astype(dtype, copy=False)
    if copy:
        a = a.copy()
    return a


def _dtype_of(t):
    return _NUMPY_DTYPES.get(t.dtype_name, t.dtype_name)


def _tensor_arg(x, dtype=None):
    if isinstance(x, Tensor):
        return x
    if dtype is not None:
        return from_numpy(_np.ascontiguousarray(x, dtype=dtype))
    return tensor(x)


def _ids_arg(ids):
    """Token ids as an i64/i32 Tensor (lists and integer arrays are converted)."""
    if isinstance(ids, Tensor):
        return ids
    a = _np.asarray(ids)
    if a.dtype.kind not in "iu":
        raise ValueError(f"[python] token ids must be integers, got {a.dtype}")
    return from_numpy(_np.ascontiguousarray(a, dtype=_np.int64))


@_contextlib.contextmanager
def no_grad():
    """Ops inside record no autograd tape (as hp::autograd::NoGradGuard)."""
    prev = grad_enabled()
    set_grad_enabled(False)
    try:
        yield
    finally:
        set_grad_enabled(prev)


def from_pretrained(path, dtype="f32"):
    """A Model from a Hugging Face directory (config.json + safetensors), any registry architecture."""
    return Model.from_pretrained(str(path), _dtype_name(dtype))


# --- Tensor methods and ops ----------------------------------------------------------------------

Tensor.numpy = lambda self: _to_numpy(self)
Tensor.__array__ = lambda self, dtype=None, copy=None: _to_numpy(self, dtype, copy)
Tensor.dtype = property(_dtype_of)
Tensor.to = lambda self, dtype: _core.cast(self, _dtype_name(dtype))
Tensor.tolist = lambda self: _to_numpy(self).tolist()
Tensor.__float__ = lambda self: float(self.item())

_OPS = ("add sub mul div maximum minimum pow neg abs exp log sqrt rsqrt square tanh sigmoid silu gelu "
        "relu clamp where matmul reshape view permute transpose narrow slice select expand unsqueeze "
        "squeeze flatten sum mean max amax logsumexp softmax log_softmax topk linear embedding "
        "rms_norm layer_norm rotary_embedding rope_cos_sin scaled_dot_product_attention "
        "cross_entropy gather scatter_add index_select index_add cat stack split dropout "
        "empty zeros ones full arange randn rand").split()
globals().update({name: getattr(_core, name) for name in _OPS})
cast = lambda a, dtype: _core.cast(a, _dtype_name(dtype))  # noqa: E731


def _method(fn):
    return lambda self, *args, **kwargs: fn(self, *args, **kwargs)


for _name in ("add sub mul div maximum minimum pow neg abs exp log sqrt rsqrt square tanh sigmoid "
              "silu gelu relu clamp matmul permute transpose narrow slice select expand unsqueeze "
              "squeeze flatten sum mean max amax logsumexp softmax log_softmax topk "
              "split").split():
    setattr(Tensor, _name, _method(getattr(_core, _name)))
# reshape / view take the shape as one sequence or as separate ints, as NumPy and torch do.
Tensor.reshape = lambda self, *shape: _core.reshape(
    self, list(shape[0]) if len(shape) == 1 and not isinstance(shape[0], int) else list(shape))
Tensor.view = lambda self, *shape: _core.view(
    self, list(shape[0]) if len(shape) == 1 and not isinstance(shape[0], int) else list(shape))
Tensor.T = property(lambda self: _core.transpose(self, -2, -1))


# --- DLPack --------------------------------------------------------------------------------------

def _dlpack(self, *, stream=None, max_version=None, dl_device=None, copy=None):
    """A DLPack capsule over the tensor's memory (a copy's with copy=True): the array API's
    protocol, which np.from_dlpack and torch.from_dlpack call."""
    kwargs = {k: v for k, v in (("stream", stream), ("max_version", max_version),
                                ("dl_device", dl_device)) if v is not None}
    return (self.clone() if copy else self)._dlpack_view().__dlpack__(**kwargs)


Tensor.__dlpack__ = _dlpack
Tensor.__dlpack_device__ = lambda self: (1, 0)  # (kDLCPU, 0): tensors live in host memory


def from_dlpack(obj):
    """A Tensor sharing the memory of a CPU DLPack producer (NumPy, PyTorch, JAX, ... arrays; any
    object with __dlpack__), kept alive by the Tensor. Row-major producers are shared without a
    copy, others are copied; dtypes f64 f32 bf16 f16 f8e4m3 f8e5m2 e8m0 i32 i64 u8 bool."""
    return Tensor._from_dlpack(obj)


# --- Models --------------------------------------------------------------------------------------

def _wrap_ids(fn, doc):
    def wrapped(self, ids, *args, **kwargs):
        return fn(self, _ids_arg(ids), *args, **kwargs)
    wrapped.__doc__ = doc
    return wrapped


def _loss(self, ids, labels=None):
    """HF's causal-LM loss of ids ([T] or [B, T]); labels default to ids (-100 is ignored)."""
    return Model._loss(self, _ids_arg(ids), None if labels is None else _ids_arg(labels))


def _generate(self, prompt, max_new_tokens=32, temperature=None, top_p=None, seed=0,
              stop_ids=None):
    """The new token ids after `prompt` (greedy unless temperature / top_p is given)."""
    return Model._generate(self, [int(i) for i in _np.asarray(prompt).reshape(-1)], max_new_tokens,
                           temperature, top_p, seed, stop_ids)


Model._forward, Model._loss, Model._generate = Model.forward, Model.loss, Model.generate
Model.forward = _wrap_ids(Model._forward, "ids [T] → logits [T, vocab]; [B, T] → [B, T, vocab].")
Model.__call__ = Model.forward
Model.loss = _loss
Model.generate = _generate
_save_pretrained = Model.save_pretrained
Model.save_pretrained = lambda self, path, tokenizer_dir="", max_shard_bytes=5 << 30: \
    _save_pretrained(self, str(path), str(tokenizer_dir), max_shard_bytes)
_tokenizer_from_file = Tokenizer.from_file
Tokenizer.from_file = staticmethod(lambda path: _tokenizer_from_file(str(path)))
Model.zero_grad = lambda self: [p.zero_grad() for p in self.parameters()] and None


# --- Training-loop pieces ------------------------------------------------------------------------

def load_config(path, overrides=()):
    """A training config with "key=value" overrides, checked as `hp train` checks it."""
    return Config.load(str(path), list(overrides))


def _named(params):
    return [(n, p) for n, p in (params.named_parameters() if hasattr(params, "named_parameters")
                                else params)]


def AdamW(named_parameters, weight_decay=0.01, betas=(0.9, 0.999), eps=1e-8):
    """AdamW over (name, tensor) pairs (or a Model); step(lr, grad_scale=1)."""
    return Optimizer.create(_named(named_parameters), "adamw", weight_decay, betas[0], betas[1],
                            eps)


def Muon(named_parameters, weight_decay=0.01, momentum=0.95, ns_steps=5):
    """Muon over (name, tensor) pairs of matrices (or a Model's, all >= 2-d); step(lr)."""
    return Optimizer.create(_named(named_parameters), "muon", weight_decay, momentum=momentum,
                            ns_steps=ns_steps)


def save_checkpoint(path, model, optimizer=None, step=0, loader=None, config=None, extra=None,
                    keep=0):
    """Saves a loop's state as `hp train` does: <path>/step-<step>/ (DCP, docs/ARCHITECTURE.md §4)
    and <path>/latest. It holds the model's parameters, the optimizer's state, the loader's position
    and the RNG state, `extra` (any JSON-serializable value), config.json, and with `config` its
    config.yaml and tokenizer (so `hp train --resume` continues it). keep > 0 keeps the newest
    `keep` checkpoints of `path`. One process only. Returns the step directory."""
    extra_json = "" if extra is None else _json.dumps(extra, allow_nan=False)
    return _core._save_checkpoint(str(path), model, optimizer, int(step), loader, config,
                                  extra_json, int(keep))


def load_checkpoint(path, model, optimizer=None, loader=None):
    """Loads a checkpoint (a step directory, or a run directory's latest) saved by save_checkpoint
    or `hp train` at any rank count into `model` (in place), `optimizer`, `loader` and the RNG.
    Returns {"step": N, "path": step_dir, "extra": the saved `extra` or None}."""
    step, step_dir, extra = _core._load_checkpoint(str(path), model, optimizer, loader)
    return {"step": step, "path": step_dir, "extra": _json.loads(extra) if extra else None}


__all__ = [n for n in globals() if not n.startswith("_")]
