"""Writes splits.golden.json: the pieces each split pattern cuts texts.json
into, by the Python `regex` module (a backtracking engine with lookahead,
\\p{L}/\\p{N} and scoped (?i:...), as Oniguruma in Hugging Face tokenizers).
It checks the hand-written scanners in pretokenize.go independently of the
BPE reference.

    python3 -m pip show regex   # or: apt-get install python3-regex
    cd learner/tokenizer && python3 testdata/split_reference.py
"""
import json

import regex

PATTERNS = {
    "qwen2": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    "llama3": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    "gpt2": r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
}

with open("testdata/texts.json", encoding="utf-8") as f:
    texts = json.load(f)

out = {"patterns": PATTERNS, "splits": {}}
for name, pattern in PATTERNS.items():
    rx = regex.compile(pattern)
    cases = []
    for text in texts:
        pieces = rx.findall(text)
        # The patterns cover every character, so the pieces rebuild the text.
        assert "".join(pieces) == text, (name, text)
        cases.append({"text": text, "pieces": pieces})
    out["splits"][name] = cases

with open("testdata/splits.golden.json", "w", encoding="utf-8") as f:
    json.dump(out, f, ensure_ascii=False, indent=1)
    f.write("\n")
print("wrote", sum(len(c) for c in out["splits"].values()), "splits")
