#!/usr/bin/env python3
"""Writes the tokenizer golden fixtures from the Hugging Face `tokenizers`
library (the reference dspark's tokenizer must equal, id for id and byte for
byte when decoding).

  python3 tools/gen_tokenizer_golden.py TOKENIZERS_DIR OUT_DIR [--corpus FILE]
          [--oracle hf|js] [--names qwen3,llama3,gemma3,llama2]
  python3 tools/gen_tokenizer_golden.py --make-corpus tests/data/tok/corpus.txt

TOKENIZERS_DIR holds NAME/tokenizer.json for each name; the corpus defaults
to tests/data/tok/corpus.txt beside this script's repo. --oracle js uses the
JS port (@huggingface/tokenizers, found through NODE_PATH) instead of the
Python library, for development; the committed files come from `hf` and the
two must give byte-identical files. For each tokenizer NAME it writes
OUT_DIR/NAME.golden, plain text that C parses line by line:

  # comment lines
  L <ids>        one per corpus line (the file split on "\\n" only, the
                 newline not included; the text after the last "\\n" is
                 not a line), add_special_tokens=False
  D <i> <hex>    decode(ids of line i, skip_special_tokens=False), as hex
                 bytes, for the lines where it is not the line's own text
  K <i> <hex>    decode(..., skip_special_tokens=True) where it differs
                 from the decode without skipping
  S <i> <ids>    corpus line i (0-based) with add_special_tokens=True, for
                 the first 3 lines, the empty lines and the lines holding
                 "<|", "<s>", "</s>" or "<bos>"
  W <ids>        the first W_LINES lines (each with its "\\n") as one
                 string, add_special_tokens=False
  X <hex>        decode of the W ids, when it is not the W text

<ids> is a comma-separated list of decimal ids; an empty list or text leaves
the line as just its tag ("L", "S 7", "D 3", "W"). The output depends only on
the tokenizer files and the corpus (no versions or dates), so a regenerated
file must be byte-identical to the committed one.
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile

W_LINES = 150
NAMES = ("qwen3", "llama3", "gemma3", "llama2")
# llama2 (a second SentencePiece family, 32k vocab: many ids per line) covers
# only the first lines, to keep the fixtures small
LIMIT = {"llama2": 900}


def fmt(tag, ids):
    return tag + (" " + ",".join(str(i) for i in ids) if ids else "")


def hexs(s):
    b = s.encode("utf-8")
    return b.hex()


def s_line(i, s):
    return i < 3 or s == "" or "<|" in s or "<s>" in s or "</s>" in s or "<bos>" in s


def queries(text):
    lines = text.split("\n")[:-1]  # what follows the last "\n" is not a line
    wtext = "".join(l + "\n" for l in lines[:W_LINES])
    return lines, wtext


def results_hf(path, text):
    """What the golden needs, from the Python tokenizers library."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(path)
    lines, wtext = queries(text)
    r = {"L": [], "D": [], "K": [], "S": {}}
    for i, s in enumerate(lines):
        ids = tok.encode(s, add_special_tokens=False).ids
        r["L"].append(ids)
        r["D"].append(tok.decode(ids, skip_special_tokens=False))
        r["K"].append(tok.decode(ids, skip_special_tokens=True))
        if s_line(i, s):
            r["S"][i] = tok.encode(s, add_special_tokens=True).ids
    r["W"] = tok.encode(wtext, add_special_tokens=False).ids
    r["X"] = tok.decode(r["W"], skip_special_tokens=False)
    return r


JS = r"""
import fs from "node:fs";
import { createRequire } from "node:module";
const require = createRequire(process.env.NODE_PATH.split(":")[0] + "/");
const { Tokenizer } = require("@huggingface/tokenizers");
const [path, corpus, wlines] = process.argv.slice(2);
const tj = JSON.parse(fs.readFileSync(path, "utf8"));
// the Python library ignores tokenizer_config.json (no clean-up of spaces)
const tok = new Tokenizer(tj, { clean_up_tokenization_spaces: false });
const lines = fs.readFileSync(corpus, "utf8").split("\n"); lines.pop();
const dec = (ids, skip) => ids.length ? tok.decode(ids, { skip_special_tokens: skip }) : "";
const sLine = (i, s) => i < 3 || s === "" || s.includes("<|") || s.includes("<s>") || s.includes("</s>") || s.includes("<bos>");
const r = { L: [], D: [], K: [], S: {} };
lines.forEach((s, i) => {
  const ids = tok.encode(s, { add_special_tokens: false }).ids;
  r.L.push(ids); r.D.push(dec(ids, false)); r.K.push(dec(ids, true));
  if (sLine(i, s)) r.S[i] = tok.encode(s, { add_special_tokens: true }).ids;
});
const w = lines.slice(0, Number(wlines)).map((l) => l + "\n").join("");
r.W = tok.encode(w, { add_special_tokens: false }).ids;
r.X = dec(r.W, false);
process.stdout.write(JSON.stringify(r));
"""


def results_js(path, corpus_path):
    with tempfile.NamedTemporaryFile("w", suffix=".mjs", delete=False) as f:
        f.write(JS)
        script = f.name
    try:
        out = subprocess.run(["node", script, path, corpus_path, str(W_LINES)], check=True, capture_output=True).stdout
    finally:
        os.unlink(script)
    r = json.loads(out.decode("utf-8"))
    r["S"] = {int(k): v for k, v in r["S"].items()}
    return r


def golden(r, text):
    lines, wtext = queries(text)
    out = [
        "# dspark tokenizer golden v2 (ids and decodes from the Hugging Face tokenizers",
        "# library; regenerate with tools/gen_tokenizer_golden.py). L: each corpus line;",
        "# D/K i: its decode (without/with skip_special) where it differs from the text;",
        "# S i: line i with add_special_tokens=True; W: the first %d lines as one text;" % W_LINES,
        "# X: the decode of W where it differs.",
    ]
    for ids in r["L"]:
        out.append(fmt("L", ids))
    for i, s in enumerate(lines):
        if r["D"][i] != s:
            out.append(("D %d " % i + hexs(r["D"][i])).rstrip())
        if r["K"][i] != r["D"][i]:
            out.append(("K %d " % i + hexs(r["K"][i])).rstrip())
    for i in sorted(r["S"]):
        out.append(fmt("S %d" % i, r["S"][i]))
    out.append(fmt("W", r["W"]))
    if r["X"] != wtext:
        out.append("X " + hexs(r["X"]))
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------
# The corpus (tests/data/tok/corpus.txt): the first 257 hand-written lines,
# then generated ones. Regenerate with
#   python3 tools/gen_tokenizer_golden.py --make-corpus tests/data/tok/corpus.txt
# which keeps the hand-written head of the existing file and needs the Debian
# packages wamerican fortunes fortunes-de fortunes-ru fortunes-zh. The
# generator is deterministic (fixed seed); the committed corpus is the
# reference, this only documents how it was made.

HEAD_LINES = 257
FORTUNES = "/usr/share/games/fortunes"


def _fortune_lines(path, rng, k, maxlen=44):
    try:
        with open(path, encoding="utf-8", errors="strict") as f:
            raw = f.read()
    except (OSError, UnicodeDecodeError):
        return []
    lines = [l.rstrip("\n") for l in raw.split("\n")]
    lines = [l for l in lines if l.strip() and l != "%" and len(l) <= maxlen and "\n" not in l]
    rng.shuffle(lines)
    return lines[:k]


def _words(rng, k):
    try:
        with open("/usr/share/dict/american-english", encoding="utf-8") as f:
            ws = [w.strip() for w in f if w.strip()]
    except OSError:
        ws = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda".split()
    return [rng.choice(ws) for _ in range(k)]


def make_corpus(head):
    rng = random.Random(20261129)
    out = []
    add = out.append
    fdir = FORTUNES
    # prose in several languages (fortune files), ANSI escapes kept in a few
    for name, k in (("cookie", 80), ("computers", 40), ("fortunes", 40), ("literature", 20), ("science", 20),
                    ("de/zitate", 70), ("de/sprichworte", 30), ("ru/2001.03", 40), ("ru/2001.04", 40),
                    ("ru/2001.05", 20), ("chinese", 50), ("tang300", 30), ("song100", 20)):
        for l in _fortune_lines(os.path.join(fdir, name), rng, k):
            if "\x1b" in l and rng.random() < 0.7:
                l = re.sub("\x1b\\[[0-9;]*m", "", l)
            add(l)
    # word salad with punctuation and casing
    for _ in range(160):
        ws = _words(rng, rng.randint(1, 5))
        ws = [w.upper() if rng.random() < 0.1 else w.capitalize() if rng.random() < 0.2 else w for w in ws]
        sep = rng.choice([" ", " ", " ", ", ", "  ", "-", "_", "/", " ... "])
        add(sep.join(ws) + rng.choice(["", ".", "!", "?", ";", ":", "...", "!?", " —", "'s", "'ll", "'VE"]))
    # very long words
    for _ in range(12):
        ws = _words(rng, rng.randint(6, 20))
        add("".join(ws) if rng.random() < 0.7 else "-".join(ws))
    for ch in ("a", "z", "é", "字", "🙂", "ab", "xyz", "0", "9", "_", "=", " ", "\t", "ê", "ß", "ж"):
        add(ch * rng.randint(20, 80))
    # repeated punctuation
    puncts = list("!?.,;:-_=+*#@$%^&~`|\\/<>()[]{}'\"") + ["…", "—", "–", "。", "、", "！", "？", "«", "»", "•"]
    for _ in range(90):
        p = rng.choice(puncts)
        q = rng.choice(puncts)
        kind = rng.randint(0, 4)
        if kind == 0:
            add(p * rng.randint(2, 24))
        elif kind == 1:
            add((p + q) * rng.randint(2, 15))
        elif kind == 2:
            add(" ".join(_words(rng, 3)) + p * rng.randint(2, 12) + " " + " ".join(_words(rng, 2)) + q * rng.randint(2, 6))
        elif kind == 3:
            add("".join(rng.choice(puncts) for _ in range(rng.randint(3, 30))))
        else:
            add(p * rng.randint(2, 8) + " " + q * rng.randint(2, 8) + " " + p + q + p)
    # scripts without fortune files: Hangul, Arabic, Devanagari, Hebrew, Thai, Greek, Japanese kana
    def syll(lo, hi, n):
        return "".join(chr(rng.randint(lo, hi)) for _ in range(n))
    deva_c = [chr(c) for c in range(0x0915, 0x0939)]
    deva_v = ["", "", "\u093e", "\u093f", "\u0940", "\u0941", "\u0947", "\u094b", "\u0902", "\u094d"]
    for _ in range(70):
        add(" ".join(syll(0xAC00, 0xD7A3, rng.randint(1, 5)) for _ in range(rng.randint(1, 4))) + rng.choice(["", ".", "?", "!"]))
    for _ in range(60):
        add(" ".join(syll(0x0621, 0x064A, rng.randint(2, 7)) for _ in range(rng.randint(1, 5))) + rng.choice(["", ".", "؟", "،"]))
    for _ in range(60):
        add(" ".join("".join(rng.choice(deva_c) + rng.choice(deva_v) for _ in range(rng.randint(1, 4)))
                     for _ in range(rng.randint(1, 5))) + rng.choice(["", "।", "?"]))
    for lo, hi in ((0x05D0, 0x05EA), (0x0E01, 0x0E30), (0x03B1, 0x03C9), (0x3041, 0x3096), (0x30A1, 0x30FA), (0x0430, 0x044F)):
        for _ in range(20):
            add(" ".join(syll(lo, hi, rng.randint(1, 5)) for _ in range(rng.randint(1, 4))))
    # mixed scripts
    pools = [lambda: rng.choice(_words(rng, 1)), lambda: syll(0x4E00, 0x9FFF, rng.randint(1, 3)),
             lambda: syll(0xAC00, 0xD7A3, 2), lambda: syll(0x0430, 0x044F, rng.randint(2, 6)),
             lambda: syll(0x0621, 0x064A, 3), lambda: syll(0x3041, 0x3096, 3), lambda: str(rng.randint(0, 99999)),
             lambda: rng.choice(["🙂", "👍🏽", "🇯🇵", "👩‍💻", "❤️", "🤖"]), lambda: syll(0x03B1, 0x03C9, 4)]
    for _ in range(150):
        sep = rng.choice([" ", "", " ", "-", ", "])
        add(sep.join(rng.choice(pools)() for _ in range(rng.randint(2, 6))))
    # special tokens inline (of all four families), partial ones, spacing around them
    specials = ["<think>", "</think>", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>",
                "<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<start_of_turn>",
                "<end_of_turn>", "<bos>", "<eos>", "<pad>", "<unk>", "<s>", "</s>", "<mask>", "<unused0>",
                "<start_of_image>", "<|fim_prefix|>", "<|reserved_special_token_5|>", "[INST]", "<0x41>", "<thin",
                "<|im_start", "think>", "<<think>>", "</s >"]
    for _ in range(170):
        parts = []
        for _ in range(rng.randint(1, 4)):
            r = rng.random()
            if r < 0.45:
                parts.append(rng.choice(specials))
            elif r < 0.8:
                parts.append(" ".join(_words(rng, rng.randint(1, 2))))
            else:
                parts.append(rng.choice(["\n", " ", "  ", "\t", "user", "assistant", "model", "你好", "🙂"]).replace("\n", "\\n"))
        add(rng.choice(["", " ", "", "  "]).join(parts))
    # leading/trailing whitespace, CR, tabs, odd spaces
    ws = [" ", "  ", "   ", "\t", " \t", "\r", "\u00a0", "\u3000", "\u2009", "\u200b", "\ufeff", "\u2028", "\u0085"]
    for _ in range(140):
        body = " ".join(_words(rng, rng.randint(0, 3)))
        add(rng.choice(ws) * rng.randint(1, 4) + body + (rng.choice(ws) * rng.randint(0, 3) if rng.random() < 0.5 else ""))
    for _ in range(20):
        add("")
    # numbers
    for _ in range(90):
        k = rng.randint(0, 6)
        if k == 0:
            add(str(rng.randint(0, 10 ** rng.randint(1, 25))))
        elif k == 1:
            add("%d.%0*d" % (rng.randint(0, 9999), rng.randint(1, 8), rng.randint(0, 99999999)))
        elif k == 2:
            add("%04d-%02d-%02d %02d:%02d:%02d" % (rng.randint(1900, 2100), rng.randint(1, 12), rng.randint(1, 28),
                                                  rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59)))
        elif k == 3:
            add("0x%x 0X%X %o %e" % (rng.randint(0, 2 ** 40), rng.randint(0, 2 ** 20), rng.randint(0, 9999), rng.random() * 10 ** rng.randint(-9, 9)))
        elif k == 4:
            add("+1 (%03d) %03d-%04d, ext. %d" % (rng.randint(0, 999), rng.randint(0, 999), rng.randint(0, 9999), rng.randint(1, 99)))
        elif k == 5:
            add(" ".join(str(rng.randint(-1000, 100000)) for _ in range(rng.randint(2, 6))))
        else:
            add("".join(rng.choice("0123456789١٢٣٤٥٦٧٨٩०१२३४५６７８９") for _ in range(rng.randint(3, 30))))
    # code
    idents = ["x", "y", "i", "n", "buf", "len", "self", "ctx", "tok_encode", "kv_cache", "MAX_LEN", "fooBar", "_tmp"]
    tmpl = ["def {a}({b}, {c}=None):", "    return {a}[{b}:{c}] + {d}", "for (int {a} = 0; {a} < {b}; {a}++) {{ {c} += {a}; }}",
            "if ({a} != NULL && {b}->{c} >= {d}) return -1;", "{{\"{a}\": [{d}, \"{b}\", null, true], \"{c}\": {{}}}}",
            "const {a} = await fetch(`/api/${{{b}}}?q=${{{c}}}`);", "    {a}: {b} = field(default_factory=list)  # {c}",
            "SELECT {a}, COUNT(*) FROM {b} WHERE {c} > {d} GROUP BY {a};", "#include <{a}.h>", "  <div class=\"{a}\">{b}</div>",
            "{a} := make(map[string]int, {d})", "fn {a}(&mut self, {b}: &[u8]) -> Result<(), {c}> {{", "\t\t{a} = re.compile(r'\\s+{b}\\d{{2,}}')",
            "$ {a} --{b}={d} | grep -v '{c}' > /dev/null 2>&1", "@@ -{d},7 +{d},8 @@ {a}"]
    for _ in range(150):
        add(rng.choice(tmpl).format(a=rng.choice(idents), b=rng.choice(idents), c=rng.choice(idents), d=rng.randint(0, 4096)))
    # emoji: ZWJ families, flags, skin tones, keycaps, tags
    emo = ["👨‍👩‍👧‍👦", "👩🏽‍🚀", "🏳️‍🌈", "🇺🇸", "🇩🇪", "🇨🇳", "👍🏻", "👍🏿", "1️⃣", "#️⃣", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "❤️‍🔥", "🧑‍🤝‍🧑", "😀", "😂", "🥲", "🫠", "🦄", "🚀", "✨", "☕", "⚡️"]
    for _ in range(100):
        add(rng.choice(["", " ", "x"]).join(rng.choice(emo) for _ in range(rng.randint(1, 4))) + rng.choice(["", " ok", "!", " 你好"]))
    # normalization: combining marks, decomposed Hangul, compatibility chars
    for _ in range(100):
        k = rng.randint(0, 3)
        if k == 0:
            add("".join(rng.choice("aeiouAEIOUnc") + rng.choice(["\u0301", "\u0300", "\u0308", "\u0303", "\u0327", "\u030a", "\u0323\u0302", "\u0302\u0323"]) for _ in range(rng.randint(1, 8))))
        elif k == 1:
            add("".join(chr(0x1100 + rng.randint(0, 18)) + chr(0x1161 + rng.randint(0, 20)) + (chr(0x11A8 + rng.randint(0, 26)) if rng.random() < 0.5 else "") for _ in range(rng.randint(1, 5))))
        elif k == 2:
            add("".join(rng.choice(["ﬁ", "ﬂ", "①", "Ⅻ", "㎏", "ｆｕｌｌ", "ＡＢＣ", "½", "ǆ", "Å", "Å", "Ω", "Ω", "ẛ̣", "ḍ̇", "ｶﾀｶﾅ", "℃", "™"]) for _ in range(rng.randint(1, 6))))
        else:
            add("".join(chr(rng.choice([0x00C5, 0x212B, 0x0041, 0x030A, 0x1E9B, 0x0323, 0x0044, 0x0307, 0x1E0C, 0x00E9, 0x0065, 0x0301, 0x0344, 0x0F73])) for _ in range(rng.randint(2, 10))))
    # control characters and invisible ones
    ctl = [chr(c) for c in list(range(1, 10)) + [11, 12, 13] + list(range(14, 32)) + [0x7F, 0x80, 0x9F, 0xAD, 0x200C, 0x200D, 0x200E, 0x2060, 0xFEFF, 0xFFFD]]
    for _ in range(60):
        add("".join(rng.choice(ctl) if rng.random() < 0.5 else rng.choice("ab c,") for _ in range(rng.randint(1, 12))))
    # rare characters: math alphanumerics, CJK extension B, private use, symbols, unassigned
    for _ in range(60):
        add("".join(chr(rng.choice([rng.randint(0x1D400, 0x1D7FF), rng.randint(0x20000, 0x2A6DF), rng.randint(0xE000, 0xF8FF),
                                    rng.randint(0x2190, 0x22FF), rng.randint(0x2500, 0x257F), rng.randint(0x1F300, 0x1F5FF),
                                    rng.randint(0x10000, 0x1007F), 0x0378, 0xE0001, rng.randint(0x0250, 0x02AF)]))
                    for _ in range(rng.randint(1, 8))))
    out = [l.replace("\n", " ") for l in out]
    for l in out:
        assert "\n" not in l
    return head + out


def write_corpus(path):
    with open(path, encoding="utf-8", newline="") as f:
        head = f.read().split("\n")[:HEAD_LINES]
    lines = make_corpus(head)
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %s: %d lines" % (path, len(lines)), file=sys.stderr)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tokenizers_dir", nargs="?")
    ap.add_argument("out_dir", nargs="?")
    ap.add_argument("--corpus", default=os.path.join(here, "..", "tests", "data", "tok", "corpus.txt"))
    ap.add_argument("--oracle", choices=("hf", "js"), default="hf")
    ap.add_argument("--names", default=",".join(NAMES))
    ap.add_argument("--make-corpus", metavar="FILE")
    a = ap.parse_args()
    if a.make_corpus:
        write_corpus(a.make_corpus)
        return
    if not a.tokenizers_dir or not a.out_dir:
        ap.error("TOKENIZERS_DIR and OUT_DIR are required")
    with open(a.corpus, encoding="utf-8", newline="") as f:
        text = f.read()
    os.makedirs(a.out_dir, exist_ok=True)
    if a.oracle == "hf":
        from tokenizers import __version__ as ver
    else:
        ver = "js"
    for name in a.names.split(","):
        path = os.path.join(a.tokenizers_dir, name, "tokenizer.json")
        sub = text
        if name in LIMIT:
            sub = "".join(l + "\n" for l in text.split("\n")[: LIMIT[name]])
        with tempfile.NamedTemporaryFile("w", encoding="utf-8", newline="", suffix=".txt", delete=False) as f:
            f.write(sub)
            subpath = f.name
        try:
            r = results_hf(path, sub) if a.oracle == "hf" else results_js(path, subpath)
        finally:
            os.unlink(subpath)
        out = os.path.join(a.out_dir, name + ".golden")
        with open(out, "w", encoding="utf-8", newline="\n") as f:
            f.write(golden(r, sub))
        print("wrote %s (%s %s)" % (out, a.oracle, ver), file=sys.stderr)


if __name__ == "__main__":
    main()
