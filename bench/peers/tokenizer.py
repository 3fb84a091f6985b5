#!/usr/bin/env python3
"""Peer for bench_tokenizer: the `tokenizers` package's batch encoding (or tiktoken's, for a
tiktoken directory) of the same lines on one core.

usage: tokenizer.py <tokenizer.json | tiktoken dir> <corpus file>
Prints MB/s (UTF-8 bytes of the lines encoded per second, best of 3) on the last line.
"""
import json
import os
import sys
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # one core, as the hp figure
os.environ.setdefault("RAYON_RS_NUM_CPUS", "1")


def main():
    path, corpus = sys.argv[1], sys.argv[2]
    with open(corpus, encoding="utf-8") as f:
        lines = f.read().split("\n")
    nbytes = sum(len(l.encode()) for l in lines)
    if os.path.isdir(path):
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
        from make_tokenizer_fixtures import kimi_encoding
        enc = kimi_encoding(path)
        run = lambda: enc.encode_ordinary_batch(lines, num_threads=1)
    else:
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(path)
        run = lambda: tok.encode_batch(lines, add_special_tokens=False)
    run()
    best = min(_time(run) for _ in range(3))
    print(nbytes / best / 1e6)


def _time(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
