#!/usr/bin/env python3
"""Builds the training corpus: Python source shipped with the running
interpreter (its standard library) and with the installed packages whose
licence is permissive.

    python3 tools/train/corpus.py OUTDIR [--cap-mb 100] [--heldout-pct 1]

Rules (all deterministic for one machine image):
  * candidate files: every *.py under the standard library (sysconfig
    "stdlib", skipping its site-/dist-packages and __pycache__ folders) and
    every *.py listed in the RECORD of an installed distribution whose licence
    metadata names a permissive licence (MIT, BSD, Apache, PSF, ISC, ...);
    files of other distributions, or of none, are left out;
  * dropped: files over 200 KB or under 64 bytes, files that are not UTF-8,
    files holding NUL or the record separator \\x1e, files holding one of the
    tokenizer's special-token strings (they would be read as control tokens);
  * duplicates (same sha256 of the content) are kept once, first by path;
  * the standard library comes first, then package files in the order of
    their content hash (a fixed pseudo-random order, so that the cap keeps a
    spread of packages rather than the alphabetically first ones), until the
    total reaches the cap;
  * held out: the files whose content hash, as an integer, is 0 modulo
    100 / heldout-pct (about heldout-pct percent);
  * output order: by (source, path).

Writes OUTDIR/train.txt and OUTDIR/heldout.txt (the files' texts joined with
the separator \\x1e) and OUTDIR/manifest.json (counts, bytes, the sha256 of
the sorted list of "path sha256" lines, the Python version, the contributing
packages with versions and licences, and the packages left out).
"""
import argparse
import hashlib
import json
import os
import re
import sys
import sysconfig
from importlib import metadata

SEP = "\x1e"
MAX_BYTES = 200 * 1024
MIN_BYTES = 64
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<|mask|>")
PERMISSIVE = [
    ("Apache", r"apache"), ("MIT", r"\bmit\b|expat"), ("BSD", r"\bbsd\b|bsd-|bsd license"),
    ("PSF", r"\bpsf\b|python software foundation|psf-2"), ("ISC", r"\bisc\b"),
    ("Unlicense", r"unlicense"), ("Zlib", r"\bzlib\b"), ("CC0", r"\bcc0\b"),
    ("HPND", r"\bhpnd\b"), ("Public Domain", r"public domain"),
]
VENDORED = {"_vendor", "vendor", "_vendored", "vendored", "extern", "_extern", "third_party", "_third_party"}
COPYLEFT = r"\bgpl|lgpl|agpl|general public|mozilla|\bmpl\b|eclipse|\bepl\b|\bcddl\b|proprietary|commercial"


def licence_of(dist):
    """(short licence string, permissive?) from a distribution's metadata."""
    md = dist.metadata
    texts = []
    for key in ("License-Expression", "License"):
        v = md.get(key)
        if v and v.strip() and v.strip().upper() != "UNKNOWN":
            texts.append(v.strip())
    for c in md.get_all("Classifier") or []:
        if c.startswith("License ::"):
            texts.append(c.split("::")[-1].strip())
    if not texts:
        return "unknown", False
    short = texts[0].splitlines()[0][:80]
    if len(texts[0]) > 200 and len(texts) > 1:  # a pasted licence text: use the classifier
        short = texts[-1][:80]
    joined = " | ".join(t[:2000] for t in texts).lower()
    if re.search(COPYLEFT, joined):
        return short, False
    ok = any(re.search(rx, joined) for _, rx in PERMISSIVE)
    return short, ok


def read_ok(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not (MIN_BYTES <= st.st_size <= MAX_BYTES):
        return None
    try:
        with open(path, "rb") as f:
            raw = f.read()
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if "\x00" in text or SEP in text or any(s in text for s in SPECIALS):
        return None
    return text


def stdlib_files():
    root = os.path.realpath(sysconfig.get_paths()["stdlib"])
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in ("site-packages", "dist-packages", "__pycache__"))
        for f in sorted(files):
            if f.endswith(".py"):
                p = os.path.join(d, f)
                out.append(("stdlib/" + os.path.relpath(p, root), p, None))
    return root, out


def package_files(stdlib_root):
    """(rel name, abs path, dist key) of the *.py files in RECORDs of the
    installed distributions, and the per-distribution licence table."""
    seen_dists, table, out = set(), {}, []
    dists = sorted(metadata.distributions(), key=lambda d: ((d.metadata.get("Name") or "").lower(), d.version or ""))
    for dist in dists:
        name = (dist.metadata.get("Name") or "").strip()
        if not name or name.lower() in seen_dists:
            continue
        seen_dists.add(name.lower())
        lic, ok = licence_of(dist)
        key = f"{name}=={dist.version}"
        files = [f for f in (dist.files or []) if str(f).endswith(".py")]
        table[key] = {"name": name, "version": dist.version, "licence": lic, "permissive": ok, "py_files": len(files)}
        if not ok or not files:
            continue
        for f in files:
            parts = set(str(f).replace("\\", "/").split("/"))
            if parts & VENDORED:  # vendored third-party code carries other licences
                continue
            p = os.path.realpath(str(dist.locate_file(f)))
            if p.startswith(stdlib_root + os.sep) and "-packages" not in p:
                continue
            out.append((f"pkg/{name}/{f}", p, key))
    return table, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--cap-mb", type=float, default=100.0)
    ap.add_argument("--heldout-pct", type=float, default=1.0)
    a = ap.parse_args()
    cap = int(a.cap_mb * 1e6)
    mod = max(1, int(round(100 / a.heldout_pct)))
    os.makedirs(a.outdir, exist_ok=True)

    root, std = stdlib_files()
    table, pkg = package_files(root)
    seen, chosen, total = set(), [], 0
    used = {}

    def take(entries):
        nonlocal total
        for rel, p, key in entries:
            if total >= cap:
                return
            text = read_ok(p)
            if text is None:
                continue
            h = hashlib.sha256(text.encode("utf-8")).hexdigest()
            if h in seen:
                continue
            seen.add(h)
            chosen.append((rel, h, text))
            total += len(text.encode("utf-8"))
            if key:
                used[key] = used.get(key, 0) + 1

    take(std)
    n_std = len(chosen)
    # package files: read each once for its hash, then take them in hash order
    cand = []
    seen_paths = set()
    for rel, p, key in pkg:
        if p in seen_paths:
            continue
        seen_paths.add(p)
        text = read_ok(p)
        if text is None:
            continue
        cand.append((hashlib.sha256(text.encode("utf-8")).hexdigest(), rel, p, key))
    cand.sort()
    take([(rel, p, key) for _, rel, p, key in cand])

    chosen.sort(key=lambda x: x[0])
    held = [c for c in chosen if int(c[1], 16) % mod == 0]
    train = [c for c in chosen if int(c[1], 16) % mod != 0]
    for fn, part in (("train.txt", train), ("heldout.txt", held)):
        with open(os.path.join(a.outdir, fn), "w", encoding="utf-8", newline="") as f:
            f.write(SEP.join(t for _, _, t in part))
    listing = "\n".join(f"{rel} {h}" for rel, h, _ in chosen)
    contrib = {k: dict(table[k], files=used[k]) for k in sorted(used)}
    manifest = {
        "python": sys.version.split()[0],
        "implementation": sys.implementation.name,
        "separator": "\\x1e",
        "files": len(chosen), "bytes": total,
        "stdlib_files": n_std,
        "train_files": len(train), "train_bytes": sum(len(t.encode()) for _, _, t in train),
        "heldout_files": len(held), "heldout_bytes": sum(len(t.encode()) for _, _, t in held),
        "cap_bytes": cap, "heldout_rule": f"int(sha256, 16) % {mod} == 0",
        "file_list_sha256": hashlib.sha256(listing.encode()).hexdigest(),
        "stdlib_licence": "Python Software Foundation License (PSF-2.0)",
        "packages": contrib,
        "packages_left_out": {k: v["licence"] for k, v in sorted(table.items())
                              if not v["permissive"] and v["py_files"]},
    }
    with open(os.path.join(a.outdir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    with open(os.path.join(a.outdir, "files.txt"), "w") as f:
        f.write(listing + "\n")
    print(f"corpus: {len(chosen)} files ({n_std} stdlib, {len(contrib)} packages), {total/1e6:.1f} MB; "
          f"train {len(train)} heldout {len(held)}; list sha256 {manifest['file_list_sha256'][:16]}")


if __name__ == "__main__":
    main()
