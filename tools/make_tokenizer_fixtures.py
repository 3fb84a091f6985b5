#!/usr/bin/env python3
"""Trains small BPE tokenizers and records reference encodings for tests/io.

No Hub access is needed: each tokenizer is trained here with the Hugging Face `tokenizers` library
in the pipeline style of a real family, then saved as <name>.tokenizer.json next to
<name>.expected.json, which holds encode/decode results of the Python library for a corpus covering
Unicode scripts, whitespace runs, digits, contractions, emoji, ZWJ sequences and special tokens
inside text. Styles:
  gpt2         ByteLevel(use_regex) pre-tokenizer, "a b" merges
  llama3       Split(Llama-3 regex) + ByteLevel, ignore_merges, BOS template, single_word token
  qwen2        NFC + Split(Qwen2 regex) + ByteLevel, lstrip/rstrip special token
  deepseek_v3  Split(\p{N}{1,3}) + Split(CJK ranges) + Split(DeepSeek-V3 regex) + ByteLevel
  llama2       Metaspace(prepend_scheme first, no split) + BPE byte_fallback + unk, decoders
               Replace/ByteFallback/Fuse/Strip (Llama-2 / Mistral as converted today)
  mistral      the legacy form: Prepend("▁") + Replace(" ", "▁") normalizers, no pre-tokenizer
  misc         NFKC + Lowercase + Replace(Regex) normalizers, Whitespace + Digits + Punctuation
               pre-tokenizers, no decoder (tokens joined by spaces)
  kimi/        a tiktoken directory as Kimi-K2 publishes it (tiktoken.model + tokenizer_config.json,
               Kimi's built-in regex), expected ids from the `tiktoken` package

  python tools/make_tokenizer_fixtures.py   # writes tests/io/fixtures/tokenizers/
  python tools/make_tokenizer_fixtures.py --stress DIR [--count N]
      # records N random texts per committed tokenizer into DIR/<name>.expected.json (not
      # committed); run hp_test_io with HP_TOKENIZER_STRESS_DIR=DIR to compare against them.
"""
import argparse
import json
import os
import random

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from tokenizers import processors
from tokenizers import trainers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "io", "fixtures", "tokenizers")

GPT2 = None  # ByteLevel(use_regex=True) carries the GPT-2 regex itself
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
         r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

TRAIN_SENTENCES = [
    "The quick brown fox jumps over the lazy dog.", "I'm sure they've said it's fine, haven't they?",
    "We'll see what you'd do if you're THERE.", "Numbers like 12345, 3.14159 and 2024-06-01 matter.",
    "Café, naïve, résumé, Ångström, façade, jalapeño, über, Straße.",
    "Привет, мир! Как дела? Это тестовая строка на русском языке.",
    "مرحبا بالعالم. هذا نص تجريبي باللغة العربية.", "日本語のテキストです。中文测试句子。한국어 문장입니다.",
    "def main(x):\n    return x ** 2  # square\n", "Emoji: 👋🏽 😀 👨‍👩‍👧‍👦 ❤️ 🇫🇷 🎉",
    "   leading spaces and trailing   ", "tabs\tand\t\tnewlines\n\n\nand \r\n windows lines",
    "Hello world! Hello again, world. HELLO WORLD!!!", "e-mail: someone@example.com, url: https://x.org/a?b=c",
    "Ελληνικά γράμματα και ελληνικό κείμενο.", "עברית טקסט קצר", "हिन्दी पाठ का उदाहरण",
]
SPECIAL_TEXTS = {
    "gpt2": ["<|endoftext|>"],
    "llama3": ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
               "<|eot_id|>"],
    "qwen2": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
}

TEST_TEXTS = [
    "", " ", "Hello world", "Hello, world! How are you?", "  two leading, two trailing  ",
    "a  b   c    d", "line1\nline2\n\nline4\n\n\n", "crlf\r\nline\r\n\r\n", "tab\there\t\t\tx",
    " \n \n  \t \n", "trailing newline \n", "I'm you're he's they've we'll she'd don't it's",
    "I'M YOU'RE HE'S THEY'VE WE'LL SHE'D DON'T IT'S", "It'S Ma'Am O'Neil's rock'n'roll",
    "'s 't 're 've 'm 'll 'd", "1 12 123 1234 12345 123456 1234567", "3.14159 2024-06-01 10:30pm",
    "x1y22z333w4444", "١٢٣٤ ٥٦ ⅫⅣ ½ ²³", "café naïve résumé Ångström façade über Straße",
    "e\u0301 a\u0308 combining marks", "Привет, мир! ПРИВЕТ мир", "مرحبا بالعالم ١٢٣",
    "日本語のテキスト。中文测试！한국어", "Ελληνικά και עברית και हिन्दी",
    "👋🏽 😀 👨‍👩‍👧‍👦 ❤️ 🇫🇷🇩🇪 🎉🎉🎉", "zero\u200bwidth\u200djoiner\u200c", "\u00a0nbsp\u3000ideographic\u2003em",
    "def f(x):\n    return x**2  # comment\n", "!!! ??? ...--- ***###", "a<b>c&d\"e'f",
    "mixed123abc456DEF", "  \n\nHello", "Hello<|endoftext|>world", "<|endoftext|>",
    "a <|endoftext|> b<|endoftext|><|endoftext|>c", "<|im_start|>user\nHi there!<|im_end|>\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    "x <tool> y<tool>z", "a [MASK] b [MASK]c", "<word> a<word> <word>b <word>",
    "\U0001F600\U0001F601 unicode \u2028 sep \u0085 nel", "ſtraße 'ſ 'S 'K",
    # NFC: jamo compose to syllables, the Angstrom sign is a singleton, marks reorder by class,
    # U+0958 is excluded from composition, a leading mark has no starter.
    "\u1100\u1161\u11a8 \uac00\u11a8 \u212b A\u030a \u0041\u0323\u0302 a\u0302\u0323",
    "\u0915\u093c \u0958 \u0301abc \u1e9b\u0323 \u00c5\u0301",
]


def training_corpus():
    rng = random.Random(1234)
    lines = []
    for _ in range(3000):
        k = rng.randint(1, 3)
        lines.append(" ".join(rng.choice(TRAIN_SENTENCES) for _ in range(k)))
    return lines


def build(name):
    if name in MORE_STYLES:
        return build_more(name)
    tok = Tokenizer(models.BPE())
    if name == "qwen2":
        tok.normalizer = normalizers.NFC()  # as in Qwen2's tokenizer.json
    if name == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    else:
        pattern = LLAMA3 if name == "llama3" else QWEN2
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False,
                                     trim_offsets=name == "llama3"),
        ])
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=SPECIAL_TEXTS[name],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(training_corpus(), trainer)
    if name == "llama3":
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A $B",
                                          special_tokens=[("<|begin_of_text|>", bos)]),
        ])
        tok.add_tokens([AddedToken("<word>", single_word=True, normalized=False)])
    elif name == "gpt2":
        tok.add_tokens([AddedToken("<tool>", normalized=True)])
    else:
        tok.add_special_tokens([AddedToken("[MASK]", lstrip=True, rstrip=True, normalized=False)])

    spec = json.loads(tok.to_str())
    if name == "gpt2":
        # Older tokenizer.json files store merges as "a b" strings; cover that format too.
        spec["model"]["merges"] = [" ".join(m) for m in spec["model"]["merges"]]
    if name == "llama3":
        spec["model"]["ignore_merges"] = True  # as in Meta's Llama-3 tokenizer.json
    return spec


DEEPSEEK_V3 = [
    r"\p{N}{1,3}",
    "[一-龥぀-ゟ゠-ヿ]+",
    r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|"
    r" ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
]
KIMI = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
MORE_STYLES = ("deepseek_v3", "llama2", "mistral", "misc")
SPECIAL_TEXTS.update({
    "deepseek_v3": ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"],
    "llama2": ["<unk>", "<s>", "</s>"],
    "mistral": ["<unk>", "<s>", "</s>"],
    "misc": ["[UNK]", "[CLS]", "[SEP]"],
})
KIMI_SPECIALS = ["[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>",
                 "<|start_header_id|>", "<|end_header_id|>", "[EOT]", "<|im_system|>", "<|im_middle|>"]


def build_more(name):
    specials = SPECIAL_TEXTS[name]
    if name == "deepseek_v3":
        tok = Tokenizer(models.BPE())
        tok.normalizer = normalizers.Sequence([])
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(p), behavior="isolated", invert=False) for p in DEEPSEEK_V3] +
            [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    elif name in ("llama2", "mistral"):
        tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
        if name == "llama2":
            tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first",
                                                         split=False)
        else:
            tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                                   normalizers.Replace(" ", "▁")])
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                         decoders.Fuse(), decoders.Strip(" ", 1, 0)])
        alphabet = []
    else:  # misc
        tok = Tokenizer(models.BPE(unk_token="[UNK]"))
        tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase(),
                                               normalizers.Replace(Regex(r"\s{2,}"), " ")])
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.Punctuation(behavior="isolated")])
        alphabet = []
    if not alphabet:
        # Without a byte alphabet, keep only the 150 commonest characters (ties by code point: the
        # trainer's own limit_alphabet breaks ties in hash order, so the fixtures would differ from
        # run to run); the rest exercise byte_fallback and unk.
        counts = {}
        for line in training_corpus():
            for ch in line:
                counts[ch] = counts.get(ch, 0) + 1
        alphabet = sorted(counts, key=lambda ch: (-counts[ch], ch))[:150]
    limit = {"limit_alphabet": len(alphabet)} if name != "deepseek_v3" else {}
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=specials, initial_alphabet=alphabet,
                                  show_progress=False, **limit)
    tok.train_from_iterator(training_corpus(), trainer)
    bos = tok.token_to_id(specials[0] if name == "deepseek_v3" else specials[1])
    if name != "misc":
        tok.post_processor = processors.TemplateProcessing(
            single="%s $A" % tok.id_to_token(bos), special_tokens=[(tok.id_to_token(bos), bos)])
    else:
        tok.post_processor = processors.BertProcessing(("[SEP]", tok.token_to_id("[SEP]")),
                                                       ("[CLS]", tok.token_to_id("[CLS]")))
    spec = json.loads(tok.to_str())
    if name in ("llama2", "mistral"):
        # Llama-2's vocab holds the 256 byte tokens <0x00>..<0xFF> as ordinary entries.
        vocab = spec["model"]["vocab"]
        next_id = max(list(vocab.values()) + [a["id"] for a in spec["added_tokens"]]) + 1
        for b in range(256):
            if "<0x%02X>" % b not in vocab:
                vocab["<0x%02X>" % b] = next_id
                next_id += 1
        if name == "llama2":
            # Added after the byte tokens: `tokenizers` ignores the id an added token is saved with
            # and gives a new one the next free id, so the file must agree with that.
            tok = Tokenizer.from_str(json.dumps(spec))
            tok.add_tokens([AddedToken("<tool>", normalized=False, special=False)])
            spec = json.loads(tok.to_str())
    return spec


def build_kimi(out_dir):
    """A tiktoken directory: ranks from a tiny byte-level BPE under Kimi's regex."""
    import base64
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(KIMI), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = trainers.BpeTrainer(vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(training_corpus(), trainer)
    byte_of = {v: k for k, v in _bytes_to_unicode().items()}
    ranks = {bytes([b]): b for b in range(256)}
    for a, b in json.loads(tok.to_str())["model"]["merges"]:
        merged = bytes(byte_of[c] for c in a + b)
        ranks.setdefault(merged, len(ranks))
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tiktoken.model"), "w") as f:
        for t, r in sorted(ranks.items(), key=lambda kv: kv[1]):
            f.write("%s %d\n" % (base64.b64encode(t).decode(), r))
    n = len(ranks)
    decoder = {str(n + i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                            "single_word": False, "special": True} for i, s in enumerate(KIMI_SPECIALS)}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"added_tokens_decoder": decoder, "bos_token": "[BOS]", "eos_token": "[EOS]",
                   "tokenizer_class": "TikTokenTokenizer"}, f, indent=1)
    return kimi_encoding(out_dir)


def kimi_encoding(model_dir):
    """tiktoken.Encoding of a Kimi-style directory, built as tokenization_kimi.py builds it."""
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe
    ranks = load_tiktoken_bpe(os.path.join(model_dir, "tiktoken.model"))
    with open(os.path.join(model_dir, "tokenizer_config.json")) as f:
        names = {int(k): v["content"] for k, v in json.load(f)["added_tokens_decoder"].items()}
    n = len(ranks)
    specials = {names.get(i, "<|reserved_token_%d|>" % i): i for i in range(n, n + 256)}
    return tiktoken.Encoding(name="kimi", pat_str=KIMI, mergeable_ranks=ranks, special_tokens=specials)


def _bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def record_tiktoken(enc, texts=None):
    texts = TEST_TEXTS + ["[BOS]hi[EOS]", "<|im_user|>x<|im_end|><|reserved_token_700|>",
                          "中文。汉字abc ABC aBC Abc's 'S İstanbul"] \
        if texts is None else texts
    n_base = min(enc._special_tokens.values())
    cases = []
    for text in texts:
        ids = enc.encode(text, allowed_special="all")
        cases.append({"text": text, "ids": ids, "ids_no_special": ids,
                      "decoded": enc.decode(ids, errors="replace"),
                      "decoded_skip_special": enc.decode([i for i in ids if i < n_base], errors="replace")})
    rng = random.Random(7)
    decodes = []
    for length in (1, 1, 2, 3, 5, 8, 13):
        ids = [rng.randrange(enc.n_vocab) for _ in range(length)]
        for skip in (False, True):
            kept = [i for i in ids if not skip or i < n_base]
            decodes.append({"ids": ids, "skip_special_tokens": skip,
                            "text": enc.decode(kept, errors="replace")})
    return {"encode": cases, "decode": decodes}


STRESS_POOLS = [
    ["the", "Quick", "BROWN", "fox", "I", "x", "camelCase", "snake_case"],
    ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'LL", "'D", "'", "''"],
    ["0", "7", "42", "123", "2024", "1234567", "3.14", "1,000", "٣٤", "²", "Ⅻ", "½"],
    [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\u00a0", "\u3000", "\u2028", "\x85",
     "\x0b", "\x0c", "\x1c", "\u200b", "\u2003"],
    ["!", "?", "...", "--", "(", ")", "[", "]", "{", "}", "<", ">", "#", "@", "$", "%", "^", "&", "*",
     "\"", "`", "~", "|", "\\", "/", ";", ":", ",", "."],
    ["café", "naïve", "Ångström", "e\u0301", "a\u0308\u0301", "Straße", "ǅ", "ﬁ", "\u1100",
     "\u1161", "\u11a8", "\uac00", "\u212b", "\u0323", "\u0302", "\u0958", "\u093c", "\u0f73"],
    ["日本語", "中文", "한국어", "テスト", "Привет", "МИР", "مرحبا", "١٢٣", "हिन्दी", "Ελληνικά", "עברית", "ไทย"],
    ["👋", "👋🏽", "👨‍👩‍👧‍👦", "❤️", "🇫🇷", "🎉", "\U0001F600", "☃", "\u200d", "\ufe0f"],
]


def random_text(rng, specials):
    parts = []
    for _ in range(rng.randint(0, 25)):
        r = rng.random()
        if r < 0.05:
            parts.append(rng.choice(specials))
        elif r < 0.12:
            cp = rng.randrange(0x20, 0x30000)
            parts.append(chr(cp) if not 0xD800 <= cp < 0xE000 else "x")
        elif r < 0.14:
            parts.append(chr(rng.randrange(0, 0x20)))
        else:
            parts.append(rng.choice(rng.choice(STRESS_POOLS)))
    return "".join(parts)


ALL = ("gpt2", "llama3", "qwen2") + MORE_STYLES


def stress(out_dir, count):
    os.makedirs(out_dir, exist_ok=True)
    enc = kimi_encoding(os.path.join(OUT, "kimi"))
    rng = random.Random("kimi")
    texts = [random_text(rng, KIMI_SPECIALS) for _ in range(count)]
    with open(os.path.join(out_dir, "kimi.expected.json"), "w", encoding="utf-8") as f:
        json.dump(record_tiktoken(enc, texts), f, ensure_ascii=False)
    for name in ALL:
        tok = Tokenizer.from_file(os.path.join(OUT, name + ".tokenizer.json"))
        specials = [t.content for t in tok.get_added_tokens_decoder().values()]
        rng = random.Random(name)
        texts = [random_text(rng, specials) for _ in range(count)]
        with open(os.path.join(out_dir, name + ".expected.json"), "w", encoding="utf-8") as f:
            json.dump(record(tok, texts), f, ensure_ascii=False)


def record(tok, texts=TEST_TEXTS):
    cases = []
    for text in texts:
        ids = tok.encode(text, add_special_tokens=True).ids
        cases.append({
            "text": text,
            "ids": ids,
            "ids_no_special": tok.encode(text, add_special_tokens=False).ids,
            "decoded": tok.decode(ids, skip_special_tokens=False),
            "decoded_skip_special": tok.decode(ids, skip_special_tokens=True),
        })
    # Decoding arbitrary id runs: single bytes of multi-byte characters give U+FFFD.
    rng = random.Random(7)
    decodes = []
    n = tok.get_vocab_size(with_added_tokens=True)
    for length in (1, 1, 2, 3, 5, 8, 13):
        ids = [rng.randrange(n) for _ in range(length)]
        for skip in (False, True):
            decodes.append({"ids": ids, "skip_special_tokens": skip,
                            "text": tok.decode(ids, skip_special_tokens=skip)})
    e_acute = [tok.token_to_id(t) for t in tok.encode("é", add_special_tokens=False).tokens]
    half = e_acute[:1] if len(e_acute) > 1 else [tok.token_to_id("Ã")]
    if None not in half:
        decodes.append({"ids": half, "skip_special_tokens": False, "text": tok.decode(half)})
    return {"encode": cases, "decode": decodes}


def record_pre_tokenizers():
    """pretokenizers.jsonl: each pre-tokenizer's pieces of one text, as pre_tokenize_str gives them
    (the Split behaviours, invert, Digits, Metaspace with split, Punctuation, ...)."""
    text = "Hello,  world!! 123abc 4.5 \u2581x  \tend?"
    cases = []
    for b in ["removed", "isolated", "merged_with_previous", "merged_with_next", "contiguous"]:
        for inv in (False, True):
            cases.append(pre_tokenizers.Split(Regex(r"\s+|[!,]"), behavior=b, invert=inv))
    cases += [pre_tokenizers.Split(" ", behavior="merged_with_next"),
              pre_tokenizers.Digits(individual_digits=False), pre_tokenizers.Digits(individual_digits=True),
              pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True),
              pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="never", split=True),
              pre_tokenizers.Punctuation(behavior="contiguous"), pre_tokenizers.WhitespaceSplit(),
              pre_tokenizers.BertPreTokenizer(), pre_tokenizers.Whitespace()]
    with open(os.path.join(OUT, "pretokenizers.jsonl"), "w", encoding="utf-8") as f:
        for c in cases:
            f.write(json.dumps({"spec": json.loads(c.__getstate__()), "text": text,
                                "pieces": [p for p, _ in c.pre_tokenize_str(text)]},
                               ensure_ascii=False) + "\n")


def main():
    os.makedirs(OUT, exist_ok=True)
    record_pre_tokenizers()
    enc = build_kimi(os.path.join(OUT, "kimi"))
    with open(os.path.join(OUT, "kimi.expected.json"), "w", encoding="utf-8") as f:
        json.dump(record_tiktoken(enc), f, ensure_ascii=False, indent=0)
    for name in ALL:
        spec = build(name)
        path = os.path.join(OUT, name + ".tokenizer.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(spec, f, ensure_ascii=False, separators=(",", ":"))
        tok = Tokenizer.from_file(path)  # record what the saved file does
        with open(os.path.join(OUT, name + ".expected.json"), "w", encoding="utf-8") as f:
            json.dump(record(tok), f, ensure_ascii=False, indent=0)
        print(name, "vocab", tok.get_vocab_size(), "->", path)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--stress", help="directory for random-text reference encodings")
    ap.add_argument("--count", type=int, default=2000)
    args = ap.parse_args()
    stress(args.stress, args.count) if args.stress else main()
