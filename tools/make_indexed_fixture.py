#!/usr/bin/env python3
"""Writes the indexed-dataset fixtures of tests/data (Megatron-LM's .bin/.idx layout).

  python3 tools/make_indexed_fixture.py                # writes tests/data/fixtures/indexed/
  python3 tools/make_indexed_fixture.py --check PREFIX # reads PREFIX.bin/.idx (hp-written), prints

Written from the format description alone, independently of the C++ writer, with the standard
library only (no numpy, no Megatron). The layout, as _IndexWriter.write and _IndexReader in
NVIDIA/Megatron-LM megatron/core/datasets/indexed_dataset.py write and read it:

  .idx  magic b"MMIDIDX\\x00\\x00" | version <Q = 1 | dtype code <B | sequence count <Q
        | document count <Q (boundaries: documents + 1) | lengths <i4 [S] | pointers <i8 [S]
        (byte offsets, cumulative from 0) | document indices <i8 [D] (0, then the sequence count
        after each document)
  .bin  every sequence's elements back to back, in the dtype (little-endian)

dtype codes: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16.

Fixtures (tests/data/indexed_test.cpp reads manifest.json for the documents):
  u16.*, i32.*   documents given as lists of sequences (an empty document, multi-sequence documents,
                 the dtype's extreme ids)
  corpus.*       what `hp data prepare corpus.txt --doc-separator '\\n\\n'` must write byte for byte:
                 byte-level ids (id = byte value) of each non-empty piece of corpus.txt between
                 "\\n\\n" separators, each followed by the separator id 256, one sequence per
                 document, uint16 (Megatron's dtype for a vocabulary below 65500)
  corpus.jsonl   the same documents as JSONL lines {"id": i, "text": ...} (raw UTF-8, one CRLF
                 line end), with a blank line and an empty text (which hp drops), so a jsonl
                 prepare writes the same corpus.* files
"""
import argparse
import json
import os
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "fixtures", "indexed")

MAGIC = b"MMIDIDX\x00\x00"
CODES = {"uint8": 1, "int8": 2, "int16": 3, "int32": 4, "int64": 5, "float64": 6, "float32": 7,
         "uint16": 8}
FORMATS = {1: "B", 2: "b", 3: "h", 4: "i", 5: "q", 6: "d", 7: "f", 8: "H"}

BYTE_SEPARATOR = 256

CORPUS = ("In the beginning God created the heaven and the earth.\n\n"
          "And the earth was without form, and void.\n\n\n\n"
          "Caf\u00e9 \u00fcber \u65e5\u672c \U0001F600 \t tabs\n\n"
          "\n\n"
          "The last document has no separator after it.")


def write(prefix, dtype, documents):
    """documents: a list of documents, each a list of sequences, each a list of ids."""
    code = CODES[dtype]
    fmt = FORMATS[code]
    size = struct.calcsize("<" + fmt)
    lengths, pointers, doc_index = [], [], [0]
    at = 0
    with open(prefix + ".bin", "wb") as f:
        for doc in documents:
            for seq in doc:
                f.write(struct.pack("<%d%s" % (len(seq), fmt), *seq))
                lengths.append(len(seq))
                pointers.append(at)
                at += len(seq) * size
            doc_index.append(len(lengths))
    with open(prefix + ".idx", "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", code))
        f.write(struct.pack("<Q", len(lengths)))
        f.write(struct.pack("<Q", len(doc_index)))
        f.write(struct.pack("<%di" % len(lengths), *lengths))
        f.write(struct.pack("<%dq" % len(pointers), *pointers))
        f.write(struct.pack("<%dq" % len(doc_index), *doc_index))


def read(prefix):
    idx = open(prefix + ".idx", "rb").read()
    assert idx[:9] == MAGIC, "bad magic"
    version, code, seqs, docs = struct.unpack_from("<QBQQ", idx, 9)
    assert version == 1, version
    off = 34
    lengths = struct.unpack_from("<%di" % seqs, idx, off)
    pointers = struct.unpack_from("<%dq" % seqs, idx, off + 4 * seqs)
    doc_index = struct.unpack_from("<%dq" % docs, idx, off + 12 * seqs)
    assert len(idx) == off + 12 * seqs + 8 * docs, "index size"
    fmt = FORMATS[code]
    size = struct.calcsize("<" + fmt)
    data = open(prefix + ".bin", "rb").read()
    sequences = [list(struct.unpack_from("<%d%s" % (n, fmt), data, p))
                 for n, p in zip(lengths, pointers)]
    assert sum(lengths) * size == len(data), "bin size"
    return code, sequences, list(doc_index)


def corpus_documents():
    docs = [piece for piece in CORPUS.split("\n\n") if piece]
    return [[list(d.encode("utf-8")) + [BYTE_SEPARATOR]] for d in docs], docs


def make():
    os.makedirs(OUT, exist_ok=True)
    sets = {
        "u16": ("uint16", [[[1, 2, 3, 256]], [], [[65535, 0], [7]], [[42]], [[], [9, 8]]]),
        "i32": ("int32", [[[100000, 2147483647, 0]], [[5], [6, 7]], []]),
    }
    for name, (dtype, docs) in sets.items():
        write(os.path.join(OUT, name), dtype, docs)
    corpus_docs, texts = corpus_documents()
    with open(os.path.join(OUT, "corpus.txt"), "wb") as f:
        f.write(CORPUS.encode("utf-8"))
    write(os.path.join(OUT, "corpus"), "uint16", corpus_docs)
    with open(os.path.join(OUT, "corpus.jsonl"), "w", encoding="utf-8") as f:
        for i, text in enumerate(texts):
            # Raw UTF-8 (not \u escapes), and one Windows line ending.
            f.write(json.dumps({"id": i, "text": text}, ensure_ascii=False) +
                    ("\r\n" if i == 3 else "\n"))
            if i == 1:
                f.write("\n")
                f.write(json.dumps({"text": "", "note": "empty: dropped"}) + "\n")
    manifest = {name: {"dtype_code": CODES[dtype], "documents": docs}
                for name, (dtype, docs) in sets.items()}
    manifest["corpus"] = {"dtype_code": CODES["uint16"], "documents": corpus_docs}
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    for name in list(sets) + ["corpus"]:
        code, seqs, doc_index = read(os.path.join(OUT, name))
        print("%s: dtype %d, %d sequences, document indices %s" % (name, code, len(seqs),
                                                                     doc_index))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", metavar="PREFIX", help="read PREFIX.bin/.idx and print it")
    args = ap.parse_args()
    if args.check:
        code, seqs, doc_index = read(args.check)
        print("dtype code %d, %d sequences, %d documents, %d tokens" %
              (code, len(seqs), len(doc_index) - 1, sum(len(s) for s in seqs)))
        print("first sequence:", seqs[0][:16] if seqs else None)
    else:
        make()


if __name__ == "__main__":
    main()
