"""BPE training time and encode speed on the 99 Gutenberg novels, `spacy` vs `fast`, interleaved A B A B.

    GPT1_DATA_MIRROR=../shared/data .venv/bin/python -m bench.tokenizer [--repeats 2] [--workers 2]

Also prints how often each pre-tokeniser agrees with its reference on the committed sample (tests/fixtures/bpe).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from bench.common import MIRROR, REPO, machine, median, novels_jsonl
from gpt1.data.ids import encode_split
from gpt1.data.tokenizer import load_released, read_merges, train_on_corpus

REFERENCE = REPO.parent / "shared" / "reference" / "openai-gpt1-bpe"
BPE = {"merges": 8000, "limit_alphabet": 400, "min_frequency": 2}  # the default profile's settings


def agreement() -> dict[str, str]:
    from transformers import OpenAIGPTTokenizer

    cases = json.loads((REPO / "tests/fixtures/bpe/reference_spacy.json").read_text())["cases"]
    spacy, fast = load_released(REFERENCE, "spacy"), load_released(REFERENCE, "fast")
    vocab = json.loads((REFERENCE / "encoder_bpe_40000.json").read_text())
    t5 = OpenAIGPTTokenizer(vocab=vocab, merges=read_merges(REFERENCE / "vocab_40000.bpe"))
    n = len(cases)

    def agree(ours, theirs) -> str:
        return f"{sum(ours(c['text']) == theirs(c) for c in cases)}/{n}"

    return {
        "spacy vs original (transformers 4 slow, ftfy + spaCy)": agree(spacy.encode, lambda c: c["ids"]),
        "fast vs transformers 5": agree(fast.encode, lambda c: t5(c["text"], add_special_tokens=False)["input_ids"]),
        "fast vs original": agree(fast.encode, lambda c: c["ids"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-tok-"))
    corpus = novels_jsonl(work / "train.jsonl")
    chars = sum(len(json.loads(line)["text"]) for line in corpus.read_text().splitlines())
    times: dict[str, dict[str, list[float]]] = {m: {"train": [], "encode": []} for m in ("spacy", "fast")}
    tokens: dict[str, int] = {}
    for _ in range(args.repeats):
        for mode in ("spacy", "fast"):  # interleaved: the machine's speed drifts over minutes
            start = time.perf_counter()
            tok = train_on_corpus(corpus, {**BPE, "pretokenizer": mode}, 100_000, args.workers)
            times[mode]["train"].append(time.perf_counter() - start)
            tok.save(work / mode)
            start = time.perf_counter()
            header = encode_split(work / mode, corpus, work / f"{mode}.bin", work / f"{mode}.json", "uint16",
                                  100_000, args.workers)
            times[mode]["encode"].append(time.perf_counter() - start)
            tokens[mode] = header["tokens"]
    print(f"\nMachine: {machine()}; corpus: {MIRROR}/books/gutenberg, 99 novels, {chars:,} characters after cleaning; "
          f"{args.workers} workers, {args.repeats} interleaved repeats, medians\n")
    print("| pre-tokeniser | BPE training (8,000 merges) | encode | tokens | encode tokens/s |")
    print("| --- | --- | --- | --- | --- |")
    for mode in ("spacy", "fast"):
        train_s, encode_s = median(times[mode]["train"]), median(times[mode]["encode"])
        print(f"| {mode} | {train_s:.1f} s | {encode_s:.1f} s | {tokens[mode]:,} | {tokens[mode] / encode_s:,.0f} |")
    print(f"\nfast/spacy speed-up: training {median(times['spacy']['train']) / median(times['fast']['train']):.1f}x, "
          f"encoding {median(times['spacy']['encode']) / median(times['fast']['encode']):.1f}x")
    if REFERENCE.is_dir():
        print("\n| agreement on tests/fixtures/bpe/sample.json | ids equal |\n| --- | --- |")
        for name, value in agreement().items():
            print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
