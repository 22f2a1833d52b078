"""Writes nfc_conformance.txt: the part of the Unicode 15.0 NormalizationTest.txt
(Debian's unicode-data package) that concerns NFC, small enough to commit:
Parts 0 and 3 whole; of Part 1 (one line per character) every line whose
NFC or NFD differs from the character, except that only every 50th Hangul
syllable is kept (they compose by arithmetic); of Part 2 (canonical order)
every third line. normalize_test.go runs the
whole file as well when /usr/share/unicode has it.

    cd learner/tokenizer && python3 testdata/nfc_subset.py
"""
import bz2

src = "/usr/share/unicode/NormalizationTest.txt.bz2"
out = []
part = None
hangul = 0
order = 0
for line in bz2.open(src, "rt", encoding="utf-8"):
    line = line.split("#")[0].strip()
    if not line:
        continue
    if line.startswith("@Part"):
        part = line
        out.append(line)
        continue
    cols = line.split(";")[:5]
    if part == "@Part1":
        if cols[0] == cols[1] and cols[0] == cols[2]:
            continue
        if 0xAC00 <= int(cols[0], 16) <= 0xD7A3:
            hangul += 1
            if hangul % 50:
                continue
    if part == "@Part2":
        order += 1
        if order % 3:
            continue
    out.append(";".join(cols))
with open("testdata/nfc_conformance.txt", "w") as f:
    f.write("# Subset of Unicode 15.0 NormalizationTest.txt, columns c1;c2;c3;c4;c5 (see nfc_subset.py)\n")
    f.write("\n".join(out) + "\n")
print(len(out), "lines")
