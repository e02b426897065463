#!/usr/bin/env python3
"""Writes the tokenizer golden fixtures from the Hugging Face `tokenizers`
library (the reference dspark's tokenizer must equal, id for id).

  python3 tools/gen_tokenizer_golden.py TOKENIZERS_DIR OUT_DIR [--corpus FILE]

TOKENIZERS_DIR holds qwen3/ and llama3/ (each with tokenizer.json); the
corpus defaults to tests/data/tok/corpus.txt beside this script's repo.
For each tokenizer NAME it writes OUT_DIR/NAME.golden, plain text that C
parses line by line:

  # comment lines
  L <ids>        one per corpus line (the file split on "\\n" only, the
                 newline not included; the text after the last "\\n" is
                 not a line), add_special_tokens=False
  S <i> <ids>    corpus line i (0-based) with add_special_tokens=True, for
                 the first 3 lines, the empty lines and the lines holding "<|"
  W <ids>        the whole corpus file as one string, add_special_tokens=False

<ids> is a comma-separated list of decimal ids; an empty list leaves the
line as just its tag ("L", "S 7", "W"). The output depends only on the
tokenizer files and the corpus (no versions or dates), so a regenerated
file must be byte-identical to the committed one.
"""
import argparse
import os
import sys


def fmt(tag, ids):
    return tag + (" " + ",".join(str(i) for i in ids) if ids else "")


def golden(tok, text):
    lines = text.split("\n")[:-1]  # what follows the last "\n" is not a line
    enc = lambda s, special: tok.encode(s, add_special_tokens=special).ids
    out = [
        "# dspark tokenizer golden v1 (ids from the Hugging Face tokenizers library;",
        "# regenerate with tools/gen_tokenizer_golden.py). L: each corpus line;",
        "# S i: line i with add_special_tokens=True; W: the whole corpus.",
    ]
    for s in lines:
        out.append(fmt("L", enc(s, False)))
    for i, s in enumerate(lines):
        if i < 3 or s == "" or "<|" in s:
            out.append(fmt("S %d" % i, enc(s, True)))
    out.append(fmt("W", enc(text, False)))
    return "\n".join(out) + "\n"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tokenizers_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--corpus", default=os.path.join(here, "..", "tests", "data", "tok", "corpus.txt"))
    a = ap.parse_args()
    from tokenizers import Tokenizer, __version__

    with open(a.corpus, encoding="utf-8", newline="") as f:
        text = f.read()
    os.makedirs(a.out_dir, exist_ok=True)
    for name in ("qwen3", "llama3"):
        tok = Tokenizer.from_file(os.path.join(a.tokenizers_dir, name, "tokenizer.json"))
        path = os.path.join(a.out_dir, name + ".golden")
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write(golden(tok, text))
        print("wrote %s (tokenizers %s)" % (path, __version__), file=sys.stderr)


if __name__ == "__main__":
    main()
