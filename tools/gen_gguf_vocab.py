#!/usr/bin/env python3
"""Writes vocab-only GGUF files with llama.cpp's own converter, the fixtures
of the GGUF tokenizer tests (tests/test_tok_gguf.c).

  python3 tools/gen_gguf_vocab.py [--mirror] CONVERTER OUT_DIR NAME:ARCH:TOKDIR[:VOCAB]...

CONVERTER is llama.cpp's convert_hf_to_gguf.py (its gguf-py and conversion/
beside it; it needs torch and transformers, llama.cpp itself is not built).
Each NAME:ARCH:TOKDIR is a tokenizer folder (tokenizer.json and
tokenizer_config.json, e.g. ~/.cache/dspark/tokenizers/qwen3) and the HF
architecture of its family (Qwen3ForCausalLM, LlamaForCausalLM); the
converter wants a config.json of a model, so a tiny one of that
architecture is written into a temp copy of the folder (VOCAB: its
vocab_size, as the real model's config.json has it; default 1 + the largest
id; ids the tokenizer lacks become the converter's [PADn] UNUSED tokens). Writes
OUT_DIR/NAME.gguf and OUT_DIR/NAME.log (the converter's output). Exits
non-zero if any conversion failed, after trying them all.

--mirror: for a machine without torch and transformers. The GGUF is
written with the converter's own gguf-py (GGUFWriter, SpecialVocab: the
merges, special ids, add_*_token and chat template come from the same
code), and only the converter's get_vocab_base (token list, token types;
it reads them through transformers' AutoTokenizer) is mirrored here from
tokenizer.json, and tokenizer.ggml.pre is taken from the table below
instead of the converter's hash of a test string's ids. Needs numpy and
pyyaml.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile


def tiny_config(arch, vocab_size):
    # the smallest shapes the converter's parameter code accepts; no
    # tensors are written (--vocab-only), only these hyperparameters
    c = {
        "architectures": [arch],
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "vocab_size": vocab_size,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    }
    c["model_type"] = {"Qwen3ForCausalLM": "qwen3", "Qwen2ForCausalLM": "qwen2"}.get(arch, "llama")
    return c


def vocab_size_of(tokdir):
    # 1 + the largest id of the vocab and the added tokens
    with open(os.path.join(tokdir, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    ids = list(tj["model"]["vocab"].values()) + [a["id"] for a in tj.get("added_tokens", [])]
    return max(ids) + 1


# what the converter's hash table (get_vocab_base_pre) names these
# tokenizers: Qwen3's ids hash as Qwen's ("qwen2"), Llama 3's as
# Meta-Llama-3-8B's ("llama-bpe")
PRE = {"qwen3": "qwen2", "qwen2": "qwen2", "llama3": "llama-bpe"}


def looks_special(tok):
    # the converter's does_token_look_special
    return (tok in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or (tok.startswith("<|") and tok.endswith("|>"))
            or (tok.startswith("<\uff5c") and tok.endswith("\uff5c>"))
            or (tok.startswith("<unused") and tok.endswith(">")))


def mirror(conv, d, name, arch, dst):
    # the converter's _set_vocab_gpt2, its AutoTokenizer reads done on the JSON
    sys.path.insert(1, os.path.join(os.path.dirname(conv), "gguf-py"))
    import gguf
    with open(os.path.join(d, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    with open(os.path.join(d, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    if tj["model"]["type"] != "BPE" or tj["model"].get("byte_fallback"):
        raise SystemExit(f"{name}: --mirror does byte-level BPE (gpt2) vocabs only")
    rev = {i: t for t, i in tj["model"]["vocab"].items()}
    added = {a["id"]: a for a in tj.get("added_tokens", [])}
    for i, a in added.items():
        rev[i] = a["content"]
    tokens, types = [], []
    for i in range(cfg["vocab_size"]):
        if i not in rev:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
            continue
        tok = rev[i]
        if i in added:
            # (the converter re-encodes a normalized=false token through
            # AutoTokenizer; an added token encodes to itself, so that is
            # the identity here)
            if added[i].get("special") or looks_special(tok):
                types.append(gguf.TokenType.CONTROL)
            else:
                tok = tok.replace("\u2581", " ")
                types.append(gguf.TokenType.USER_DEFINED)
        else:
            types.append(gguf.TokenType.NORMAL)
        tokens.append(tok)
    w = gguf.GGUFWriter(dst, {"Qwen3ForCausalLM": "qwen3", "Qwen2ForCausalLM": "qwen2"}.get(arch, "llama"))
    w.add_name(name)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(PRE[name])
    w.add_token_list(tokens)
    w.add_token_types(types)
    gguf.SpecialVocab(d, load_merges=True).add_to_gguf(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()


def main():
    args = sys.argv[1:]
    use_mirror = bool(args) and args[0] == "--mirror"
    if use_mirror:
        args = args[1:]
    if len(args) < 3:
        sys.exit(__doc__)
    conv, out = os.path.abspath(args[0]), os.path.abspath(args[1])
    os.makedirs(out, exist_ok=True)
    failed = []
    for spec in args[2:]:
        name, arch, tokdir, *vs = spec.split(":")
        with tempfile.TemporaryDirectory() as d:
            for f in ("tokenizer.json", "tokenizer_config.json"):
                shutil.copy(os.path.join(tokdir, f), d)
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(tiny_config(arch, int(vs[0]) if vs else vocab_size_of(tokdir)), f, indent=1)
            dst = os.path.join(out, name + ".gguf")
            if use_mirror:
                mirror(conv, d, name, arch, dst)
                rc = 0
            else:
                with open(os.path.join(out, name + ".log"), "w") as log:
                    rc = subprocess.call([sys.executable, conv, "--vocab-only", "--outfile", dst, d],
                                         stdout=log, stderr=subprocess.STDOUT)
            print(f"{name}: rc={rc}" + (f" {os.path.getsize(dst)} bytes" if rc == 0 else ""))
            if rc:
                failed.append(name)
    if failed:
        sys.exit("failed: " + ", ".join(failed))


if __name__ == "__main__":
    main()
