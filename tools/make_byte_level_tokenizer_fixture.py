#!/usr/bin/env python3
"""Records how the Hugging Face `tokenizers` library reads hp's byte-level tokenizer.json.

hp writes the byte-level vocabulary (ids 0..255 = bytes, 256 = <|endoftext|>) as a tokenizer.json
beside every checkpoint of a run on byte-level text (io/byte_level_tokenizer.h), so `hp ckpt
export-hf` gives a directory `tokenizers` and `hp generate` load. This script loads that file with
the real library and writes tests/io/fixtures/tokenizers/byte_level.expected.json: the ids of texts
covering ASCII, Latin-1, CJK, emoji and ZWJ sequences, whitespace runs and the separator inside
text, the decoded text of each, and the decoding of ids that are not valid UTF-8 on their own.
The C++ test (tests/io/tokenizer_test.cpp ByteLevelTokenizerJson) checks hp's loader against it.

  hp train CONFIG  # on byte-level text: RUN_DIR/step-*/tokenizer.json
  python tools/make_byte_level_tokenizer_fixture.py RUN_DIR/step-00000002/tokenizer.json
"""
import json
import os
import sys

from tokenizers import Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "io", "fixtures", "tokenizers", "byte_level.expected.json")

TEXTS = [
    "In the beginning God created the heaven and the earth.",
    "  leading and trailing spaces  \n\ttabs\r\n",
    "héllo wörld, ÿ ß ç",
    "日本語のテキスト",
    "emoji 🤖 and a family 👨‍👩‍👧",
    "digits 1234567890 and 'contractions' don't",
    "one<|endoftext|>two",
    "",
]
# Ids whose bytes are not valid UTF-8 on their own (a lone continuation byte, a truncated sequence,
# 0xFF): `tokenizers` decodes them lossily.
IDS = [[0x80], [0xE6, 0x97], [0x68, 0xFF, 0x69], [0xC3, 0xA9]]


def main():
    tok = Tokenizer.from_file(sys.argv[1])
    encode = []
    for text in TEXTS:
        ids = tok.encode(text).ids
        encode.append({"text": text, "ids": ids,
                       "decoded": tok.decode(ids, skip_special_tokens=False)})
    decode = [{"ids": ids, "decoded": tok.decode(ids)} for ids in IDS]
    def lines(entries):  # one entry a line
        return ",\n  ".join(json.dumps(e, ensure_ascii=False) for e in entries)

    with open(OUT, "w", encoding="utf-8") as f:
        f.write('{"encode": [\n  ' + lines(encode) + '\n],\n "decode": [\n  ' + lines(decode) +
                "\n]}\n")


if __name__ == "__main__":
    main()
