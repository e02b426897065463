#!/usr/bin/env python3
"""Trains the byte-level BPE tokenizer (Qwen2/Qwen3 pipeline) on the corpus.

    python3 tools/train/tokenizer.py CORPUS_DIR OUT_DIR [--learned 6016] [--sample-mb 40]

Pipeline (the structure of Qwen3's tokenizer.json): NFC normalizer; the
Qwen2 Split regex (Isolated) then ByteLevel (no prefix space, no regex);
ByteLevel decoder and post-processor; BPE over the 256-symbol byte alphabet
with --learned tokens in all (alphabet included), trained on the first
--sample-mb of train.txt files (deterministic). Added after the learned
vocabulary, in this order: <|endoftext|>, <|im_start|>, <|im_end|> (special),
<think>, </think> (not special, as in Qwen3), <|mask|> (special; the drafters'
fill token). The model's vocab_size is rounded up to a multiple of 128 above
that, leaving unused padding rows as Qwen3 has.

Writes OUT_DIR/tokenizer.json and OUT_DIR/tokenizer_config.json (with a
ChatML chat template, eos <|im_end|>, pad <|endoftext|>). With transformers
installed it checks that AutoTokenizer loads the folder, encodes like the
tokenizers library and renders the template like common.render_chat.
--smoke writes a byte-level stand-in instead (for tests without `tokenizers`)."""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402

QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = [(C.EOT, True), (C.IM_START, True), (C.IM_END, True), (C.THINK, False), (C.END_THINK, False),
           (C.MASK, True)]


def padded_vocab(n):
    return (n + 127) // 128 * 128


def tokenizer_config(added):
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {str(i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                                          "single_word": False, "special": sp} for s, i, sp in added},
        "additional_special_tokens": [C.IM_START, C.IM_END],
        "bos_token": None,
        "chat_template": C.CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": C.IM_END,
        "errors": "replace",
        "mask_token": C.MASK,
        "model_max_length": 2048,
        "pad_token": C.EOT,
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }


def smoke(out):
    os.makedirs(out, exist_ok=True)
    cfg = tokenizer_config([(s, 256 + i, sp) for i, (s, sp) in enumerate(SPECIAL)])
    cfg["smoke"] = True
    cfg["smoke_specials"] = [s for s, _ in SPECIAL]
    json.dump(cfg, open(os.path.join(out, "tokenizer_config.json"), "w"), indent=2)
    print(f"smoke tokenizer: {256 + len(SPECIAL)} ids")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("out")
    ap.add_argument("--learned", type=int, default=6016)
    ap.add_argument("--sample-mb", type=float, default=40.0)
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args()
    if a.smoke:
        return smoke(a.out)
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, \
        processors, trainers

    docs = C.read_docs(os.path.join(a.corpus, "train.txt"))
    sample, n = [], 0
    for d in docs:
        sample.append(d)
        n += len(d.encode())
        if n >= a.sample_mb * 1e6:
            break
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tr = trainers.BpeTrainer(vocab_size=a.learned, min_frequency=2, show_progress=False, special_tokens=[],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(sample, trainer=tr, length=len(sample))
    n_learned = tok.get_vocab_size(with_added_tokens=True)
    for s, sp in SPECIAL:
        at = AddedToken(s, special=sp, normalized=False, lstrip=False, rstrip=False, single_word=False)
        if sp:
            tok.add_special_tokens([at])
        else:
            tok.add_tokens([at])
    os.makedirs(a.out, exist_ok=True)
    tj = os.path.join(a.out, "tokenizer.json")
    tok.save(tj)
    # Mirror Qwen3's tokenizer.json fields for the byte-level parts exactly.
    j = json.load(open(tj, encoding="utf-8"))
    j["decoder"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    j["post_processor"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                           "use_regex": False}
    with open(tj, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False, indent=1)
    tok = Tokenizer.from_file(tj)
    added = [(s, tok.token_to_id(s), sp) for s, sp in SPECIAL]
    total = tok.get_vocab_size(with_added_tokens=True)
    assert [i for _, i, _ in added] == list(range(n_learned, n_learned + len(SPECIAL))), added
    cfg = tokenizer_config(added)
    json.dump(cfg, open(os.path.join(a.out, "tokenizer_config.json"), "w"), indent=2, ensure_ascii=False)

    # bytes per token on held-out text, and round trips
    held = C.read_docs(os.path.join(a.corpus, "heldout.txt"))
    enc = tok.encode_batch(held, add_special_tokens=False)
    nt = sum(len(e.ids) for e in enc)
    nb = sum(len(d.encode()) for d in held)
    bad = sum(tok.decode(e.ids, skip_special_tokens=False) != d for e, d in zip(enc, held))
    info = {"learned": n_learned, "with_added": total, "vocab_size": padded_vocab(total),
            "ids": {s: i for s, i, _ in added}, "heldout_bytes_per_token": round(nb / max(1, nt), 4),
            "heldout_roundtrip_failures": bad}
    print("tokenizer:", json.dumps(info))
    # NFC normalization may change a few files; anything more is a bug
    assert bad <= max(1, len(held) // 20), f"decode(encode(text)) != text for {bad} held-out files"

    try:
        from transformers import AutoTokenizer  # noqa: F401
    except ImportError:
        return
    try:
        hf_check(a, tok, held)
    except Exception as e:  # report, but keep the tokenizer
        import traceback
        traceback.print_exc()
        print(f"tokenizer: WARNING: transformers check failed: {e!r}")


def hf_check(a, tok, held):
    from transformers import AutoTokenizer
    at = AutoTokenizer.from_pretrained(a.out)
    for d in held[:20]:
        assert at(d, add_special_tokens=True)["input_ids"] == tok.encode(d, add_special_tokens=True).ids
    msgs = [{"role": "system", "content": C.SYSTEM}, {"role": "user", "content": "def f(x):\n    \"\"\"Doc.\"\"\""},
            {"role": "assistant", "content": "```python\nreturn x\n```"}]
    for m, gp in ((msgs, False), (msgs[1:2], True)):
        r = at.apply_chat_template(m, tokenize=False, add_generation_prompt=gp)
        assert r == C.render_chat(m, gp), (r, C.render_chat(m, gp))
    r = at.apply_chat_template(msgs[1:2], tokenize=True, add_generation_prompt=True)
    if isinstance(r, dict) or hasattr(r, "keys"):
        r = r["input_ids"]
    assert list(r) == tok.encode(C.render_chat(msgs[1:2], True), add_special_tokens=False).ids
    assert at.eos_token_id == tok.token_to_id(C.IM_END) and at.pad_token_id == tok.token_to_id(C.EOT)
    print("tokenizer: transformers AutoTokenizer agrees (encode, chat template, eos/pad)")


if __name__ == "__main__":
    main()
