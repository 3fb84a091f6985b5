#!/usr/bin/env python3
"""Makes the MXFP8 conformance fixtures in tests/mx/fixtures/ (read by tests/mx/fixture_test.cpp).

The expected codes and scales follow docs/ARCHITECTURE.md §4 and are computed here independently of
the C++ code: scale exponents from their definitions with exact rational arithmetic
(fractions.Fraction), element casts by ml_dtypes (round to nearest even), saturation by clipping.
torchao's to_mx, when installed, is run on every case as a second reference; blocks where it differs
are classified, and any difference outside the known, documented ones makes this script fail.

Known torchao (0.18) differences from docs/ARCHITECTURE.md §4, by torchao's design, not bugs here:
  nonfinite   NaN/Inf in a block. §4: scale 0xFF and every code 0x7F. torchao floor: Inf gives
              a finite scale (amax exponent field 255) and Inf elements clamp to ±max; NaN gives
              scale 0xFF and NaN codes (the sign of a NaN code may be set). torchao rceil: Inf gives
              scale 0xFE and clamps; NaN gives 0xFF.
  min_scale   blocks whose scale is 2^-127 (byte 0), e.g. all-zero or denormal-only blocks:
              torchao floor divides by max(scale, 2^-126) and rceil multiplies by 1.0 instead of
              2^127, so nonzero tiny elements come out 2x (floor) or 2^127x (rceil) smaller.
  rceil_log2  rceil with an amax significand a few f32 ulps above 1.75 (e.g. 57344.004 for E4M3):
              torchao computes ceil(log2(amax / max)) in float32, where log2 rounds to an integer
              once the exponent is large, so its scale is one step too small and the largest
              element saturates. §4's exact rule (nothing saturates under rceil) gives one
              step more.

Usage: /work/venv/bin/python tools/make_mx_fixtures.py [--out tests/mx/fixtures]

File format (little-endian), tests/mx/fixtures/mx_conformance.bin:
  b"HPMXFX01", u32 num_cases, then per case:
    u32 name_len, name (utf-8), u8 dtype (0 f32, 1 bf16), u32 rows, u32 cols,
    input (rows*cols elements: f32, or bf16 bits as u16),
    u32 num_results, then per result:
      u8 axis (0 row-wise, 1 column-wise), u8 elem (0 e4m3, 1 e5m2), u8 mode (0 floor, 1 rceil),
      u8 torchao (0 agrees on every block, 1 differs only in documented blocks, 2 not run),
      u32 n_codes, codes (u8), u32 n_scales, scales (u8)
  Codes are [rows, cols]; scales [rows, ceil(cols/32)] row-wise, [ceil(rows/32), cols] column-wise.
"""
import argparse
import collections
import math
import os
import struct
import sys
from fractions import Fraction

import ml_dtypes
import numpy as np

FORMATS = {
    "e4m3": dict(code=0, np=ml_dtypes.float8_e4m3fn, emax=8, max=448.0),
    "e5m2": dict(code=1, np=ml_dtypes.float8_e5m2, emax=15, max=57344.0),
}
MODES = {"floor": 0, "rceil": 1}
BLOCK = 32


def scale_exponent(amax, fmt, mode):
    """Unbiased E8M0 exponent by definition, exactly. amax: finite float >= 0."""
    if amax == 0:
        return -127
    a = Fraction(amax)
    if mode == "floor":  # floor(log2 amax) - emax
        k = math.frexp(amax)[1] - 1
        while Fraction(2) ** k > a:
            k -= 1
        while Fraction(2) ** (k + 1) <= a:
            k += 1
        s = k - FORMATS[fmt]["emax"]
    else:  # smallest s with amax / 2^s <= max_normal, i.e. ceil(log2(amax / max_normal))
        m = Fraction(FORMATS[fmt]["max"])
        s = math.frexp(amax)[1] - 1 - FORMATS[fmt]["emax"]
        while a > m * Fraction(2) ** s:
            s += 1
        while a <= m * Fraction(2) ** (s - 1):
            s -= 1
    return max(-127, min(127, s))


def quantize_block(x, fmt, mode):
    """x: float64 values of one block (<= 32, zero padding implied). Returns (scale byte, codes)."""
    if not np.all(np.isfinite(x)):
        return 0xFF, np.full(len(x), 0x7F, np.uint8)
    s = scale_exponent(float(np.max(np.abs(x))) if len(x) else 0.0, fmt, mode)
    v = x * 2.0 ** (-s)  # exact in float64
    v32 = v.astype(np.float32)
    # ml_dtypes casts float64 through float32, so hand it float32: exact here except below 2^-126,
    # where both roundings give ±0 in either FP8 format.
    big = np.abs(v) >= 2.0**-126
    assert np.array_equal(v32[big].astype(np.float64), v[big])
    mx = np.float32(FORMATS[fmt]["max"])
    codes = np.clip(v32, -mx, mx).astype(FORMATS[fmt]["np"]).view(np.uint8)
    return s + 127, codes


def quantize(x, axis, fmt, mode):
    """x: float64 [rows, cols]. Returns (codes [rows, cols], scales) for the axis."""
    xt = x if axis == 0 else x.T
    rows, cols = xt.shape
    nb = -(-cols // BLOCK)
    codes = np.zeros(xt.shape, np.uint8)
    scales = np.zeros((rows, nb), np.uint8)
    for r in range(rows):
        for b in range(nb):
            sl = slice(b * BLOCK, min(cols, (b + 1) * BLOCK))
            scales[r, b], codes[r, sl] = quantize_block(xt[r, sl], fmt, mode)
    if axis == 1:
        codes, scales = codes.T, scales.T
    return np.ascontiguousarray(codes), np.ascontiguousarray(scales)


def torchao_quantize(x_stored, is_bf16, axis, fmt, mode):
    """Runs torchao's to_mx; returns (codes, scales) laid out like quantize(), or None."""
    try:
        import torch
        from torchao.prototype.mx_formats.config import ScaleCalculationMode
        from torchao.prototype.mx_formats.mx_tensor import to_mx
    except Exception:
        return None
    t = torch.from_numpy(x_stored.view(np.int16) if is_bf16 else x_stored)
    if is_bf16:
        t = t.view(torch.bfloat16)
    if axis == 1:
        t = t.T
    rows, cols = t.shape
    pad = (-cols) % BLOCK  # zero padding = the partial-block rule of docs/ARCHITECTURE.md §4
    t = torch.nn.functional.pad(t, (0, pad)).contiguous()
    elem = torch.float8_e4m3fn if fmt == "e4m3" else torch.float8_e5m2
    smode = ScaleCalculationMode.FLOOR if mode == "floor" else ScaleCalculationMode.RCEIL
    scale, data = to_mx(t, elem, BLOCK, smode)
    codes = data.view(torch.uint8).numpy()[:, :cols]
    scales = scale.view(torch.uint8).numpy().reshape(rows, -1)
    if axis == 1:
        codes, scales = codes.T, scales.T
    return np.ascontiguousarray(codes), np.ascontiguousarray(scales)


def classify(x, axis, fmt, mode, want, got, tally):
    """Compares per block; returns 0 (same everywhere) or 1 (only documented differences)."""
    xt, wc, ws, gc, gs = (a if axis == 0 else a.T for a in (x, want[0], want[1], got[0], got[1]))
    status = 0
    for r in range(xt.shape[0]):
        for b in range(ws.shape[1]):
            sl = slice(b * BLOCK, min(xt.shape[1], (b + 1) * BLOCK))
            if ws[r, b] == gs[r, b] and np.array_equal(wc[r, sl], gc[r, sl]):
                continue
            if not np.all(np.isfinite(xt[r, sl])):
                kind = "nonfinite"
            elif ws[r, b] == 0:
                kind = "min_scale"
            elif mode == "rceil" and gs[r, b] + 1 == ws[r, b] and near_above_175(xt[r, sl]):
                kind = "rceil_log2"
            else:
                sys.exit(f"unexpected torchao difference: axis {axis} {fmt} {mode} block {r},{b} "
                         f"x={xt[r, sl]} want scale {ws[r, b]} codes {wc[r, sl]} "
                         f"torchao scale {gs[r, b]} codes {gc[r, sl]}")
            tally[(fmt, mode, kind)] += 1
            status = 1
    return status


def near_above_175(x):
    """amax significand in (1.75, 1.75 * (1 + 2^-20)]: where float32 log2 rounds to an integer."""
    m = math.frexp(float(np.max(np.abs(x))))[0] * 2
    return 1.75 < m <= 1.75 * (1 + 2.0**-20)


def fp8_midpoints(fmt, lo, hi, n, rng):
    """n values exactly halfway between adjacent positive FP8 values in [lo, hi]."""
    vals = np.arange(256, dtype=np.uint8).view(FORMATS[fmt]["np"]).astype(np.float64)
    vals = np.unique(vals[np.isfinite(vals) & (vals >= 0)])
    mids = (vals[:-1] + vals[1:]) / 2
    mids = mids[(mids >= lo) & (mids <= hi)]
    return rng.choice(mids, n) * rng.choice([-1.0, 1.0], n)


def scenario_blocks(rng):
    """32-element blocks, each aimed at one rule; the special value sits at index 2 so that a
    6-element partial block still contains it."""
    out = []

    def block(special, fill):
        b = np.array(fill, np.float64)
        b[2] = special
        out.append(b)

    u = lambda k: rng.uniform(-1, 1, BLOCK) * 2.0**k
    for k in [0, 8, 15, -20, 60, -60]:  # amax at a power of two
        block(2.0**k * rng.choice([-1, 1]), u(k))
    for k in [8, 15, -3]:  # amax exactly 1.75 * 2^k
        block(1.75 * 2.0**k, u(k))
    for k in [8, 15, 0]:  # significand just above 1.75: in bf16 and 1 f32 ulp above
        block(1.7578125 * 2.0**k, u(k))
    for k in [8, 15, 40]:
        block(float(np.float32(1.75 + 2.0**-23)) * 2.0**k, u(k))
    # Element ties at scale 1 (both modes): E4M3 amax 256, E5M2 amax 32768.
    block(256.0, fp8_midpoints("e4m3", 2.0**-6, 240, BLOCK, rng))
    block(256.0, np.arange(1, 2 * BLOCK, 2)[:BLOCK] % 16 * 2.0**-10)  # E4M3 subnormal ties
    block(32768.0, fp8_midpoints("e5m2", 2.0**-14, 30000, BLOCK, rng))
    block(32768.0, np.arange(1, 2 * BLOCK, 2)[:BLOCK] % 8 * 2.0**-17)  # E5M2 subnormal ties
    # Saturation under floor (significand above 1.75), including a tie past the max.
    block(486.4, rng.uniform(440, 480, BLOCK))
    block(464.0, rng.uniform(-470, 470, BLOCK))
    block(61440.0, rng.uniform(56000, 62000, BLOCK))
    # Zeros.
    block(0.0, np.zeros(BLOCK))
    block(-0.0, -np.zeros(BLOCK))
    block(-0.0, np.where(rng.random(BLOCK) < 0.5, 0.0, -0.0))
    # Subnormal outputs.
    block(256.0, rng.uniform(-1, 1, BLOCK) * 2.0**-6)
    block(32768.0, rng.uniform(-1, 1, BLOCK) * 2.0**-14)
    # Denormal inputs (f32 subnormals; bf16 keeps some of them).
    block(1e-39, rng.integers(-2**20, 2**20, BLOCK) * 2.0**-149)
    block(2.0**-120, rng.integers(-2**20, 2**20, BLOCK) * 2.0**-149)
    block(1.0, rng.integers(-2**10, 2**10, BLOCK) * 2.0**-149)
    # NaN and Inf.
    block(np.nan, u(0))
    block(-np.nan, u(3))
    block(np.inf, u(0))
    block(-np.inf, u(-5))
    fill = u(1)
    fill[20] = np.nan
    block(np.inf, fill)
    # Low end of E8M0.
    block(2.0**-119, u(-119))
    block(2.0**-118, u(-118))
    block(1.9 * 2.0**-127, u(-127))
    block(2.0**-126, u(-126))
    # High end of E8M0.
    fmax = float(np.finfo(np.float32).max)
    block(fmax, u(127))
    block(-fmax, u(120))
    block(float(np.uint16(0x7F7F).view(ml_dtypes.bfloat16)), u(127))  # bf16 max
    return out


def scenario_matrix(rng, rows=40, cols=70):
    """[rows, cols]: each row holds blocks 32 + 32 + a partial 6 drawn from the scenarios, then
    random normals at spread scales."""
    blocks = scenario_blocks(rng)
    x = np.empty((rows, cols))
    i = 0
    for r in range(rows):
        for c0 in range(0, cols, BLOCK):
            n = min(BLOCK, cols - c0)
            if i < len(blocks):
                x[r, c0:c0 + n] = blocks[i][:n]
            else:
                x[r, c0:c0 + n] = rng.standard_normal(n) * 2.0 ** int(rng.integers(-60, 60))
            i += 1
    return x


def write_case(f, name, x32, is_bf16, tally):
    """x32: float32 [rows, cols]; bf16 input rounds it (RNE) first."""
    stored = x32.astype(ml_dtypes.bfloat16) if is_bf16 else x32
    x = stored.astype(np.float64)
    rows, cols = x.shape
    raw = stored.view(np.uint16) if is_bf16 else stored
    name_b = name.encode()
    f.write(struct.pack("<I", len(name_b)) + name_b)
    f.write(struct.pack("<BII", int(is_bf16), rows, cols))
    f.write(np.ascontiguousarray(raw).tobytes())
    f.write(struct.pack("<I", 2 * len(FORMATS) * len(MODES)))
    for axis in (0, 1):
        for fmt, finfo in FORMATS.items():
            for mode, mcode in MODES.items():
                codes, scales = quantize(x, axis, fmt, mode)
                ao = torchao_quantize(np.ascontiguousarray(raw), is_bf16, axis, fmt, mode)
                status = 2 if ao is None else classify(x, axis, fmt, mode, (codes, scales), ao, tally)
                f.write(struct.pack("<BBBB", axis, finfo["code"], mcode, status))
                f.write(struct.pack("<I", codes.size) + codes.tobytes())
                f.write(struct.pack("<I", scales.size) + scales.tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "mx",
                                                  "fixtures"))
    args = ap.parse_args()
    rng = np.random.default_rng(20260601)
    with np.errstate(over="ignore", invalid="ignore"):
        scen = scenario_matrix(rng).astype(np.float32)
        rand = (rng.standard_normal((48, 96)) *
                2.0 ** rng.integers(-40, 40, (48, 1))).astype(np.float32)
    cases = [("scenarios", scen), ("scenarios_t", np.ascontiguousarray(scen.T)),
             ("random", rand)]
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "mx_conformance.bin")
    tally = collections.Counter()
    with open(path, "wb") as f:
        f.write(b"HPMXFX01" + struct.pack("<I", 2 * len(cases)))
        for name, x32 in cases:
            for is_bf16 in (False, True):
                write_case(f, f"{name}_{'bf16' if is_bf16 else 'f32'}", x32, is_bf16, tally)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")
    print("torchao differences (blocks), all in documented categories:" if tally else
          "torchao agrees on every block (or is not installed)")
    for (fmt, mode, kind), n in sorted(tally.items()):
        print(f"  {fmt} {mode} {kind}: {n}")


if __name__ == "__main__":
    main()
