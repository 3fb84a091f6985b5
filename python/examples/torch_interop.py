"""DLPack between hyperparallel and PyTorch: torch.from_dlpack(t) and hp.from_dlpack(torch_tensor)
share memory (each side sees the other's in-place writes), for f32, bf16, i64 and bool, and the f8
formats where this torch's DLPack has them. Not a CI test (CI installs no torch): run it with an
interpreter that has torch, pointing --site at the site-packages where hyperparallel is installed
(editable or not) when that is another environment:

    TORCH_ENV/bin/python python/examples/torch_interop.py --site build/py-venv/lib/python3.11/site-packages
"""
import argparse
import site
import sys


def check(hp, torch):
    for name, tdt in (("f32", torch.float32), ("bf16", torch.bfloat16), ("i64", torch.int64),
                      ("bool", torch.bool), ("f8e4m3", getattr(torch, "float8_e4m3fn", None))):
        t = hp.ones([2, 3], "f32").to(name)
        try:
            x = torch.from_dlpack(t)
        except (BufferError, RuntimeError, TypeError) as e:  # a dtype this torch's DLPack lacks
            print(f"  {name}: torch.from_dlpack refused ({e}); skipped")
            continue
        assert x.dtype == tdt and tuple(x.shape) == (2, 3), (name, x.dtype)
        t.fill_(0)  # torch sees hyperparallel's memory
        assert not x.to(torch.float32).any(), name
        y = torch.ones(3, 2, dtype=torch.float32).to(tdt)
        u = hp.from_dlpack(y)
        assert u.dtype_name == name and u.shape == (3, 2), (name, u.dtype_name)
        y.zero_()  # and hyperparallel sees torch's
        assert not u.to("f32").numpy().any(), name
        print(f"  {name}: shared both ways")
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    assert hp.from_dlpack(base.T).tolist() == base.T.tolist()  # strided: copied, same values
    grads = hp.from_dlpack(torch.randn(4, 4)).requires_grad_()
    hp.sum(hp.square(grads)).backward()
    assert torch.allclose(torch.from_dlpack(grads.grad), 2 * torch.from_dlpack(grads))
    print("ok")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--site", help="a site-packages directory holding hyperparallel")
    args = ap.parse_args()
    if args.site:
        site.addsitedir(args.site)  # after this environment's own packages; runs its .pth files
    import torch

    import hyperparallel as hp
    print(f"torch {torch.__version__}, hyperparallel {hp.__version__}")
    check(hp, torch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
