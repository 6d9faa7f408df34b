"""Make tests/fixtures/bpe/reference_spacy.json: reference GPT-1 BPE tokens and ids.

The reference is the slow ``OpenAIGPTTokenizer`` of transformers 4.x with ftfy and spaCy
installed, which is the original GPT-1 pipeline (ftfy.fix_text, text_standardize, spaCy's
blank English tokenizer, lowercase, BPE with ``</w>``). transformers 5 removed that class,
so this script must run in a throwaway environment, NOT in the project venv:

    uv venv /tmp/refenv -p 3.11
    uv pip install -p /tmp/refenv/bin/python "transformers<5" ftfy spacy
    /tmp/refenv/bin/python tools/make_bpe_reference.py \
        --reference-dir /work/shared/reference/openai-gpt1-bpe \
        --out tests/fixtures/bpe/reference_spacy.json
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from importlib.metadata import version
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SAMPLE = REPO_ROOT / "tests" / "fixtures" / "bpe" / "sample.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference-dir", required=True, type=Path,
                        help="folder with encoder_bpe_40000.json (vocab) and vocab_40000.bpe (merges)")
    parser.add_argument("--out", required=True, type=Path, help="where to write the reference JSON")
    parser.add_argument("--sample", type=Path, default=DEFAULT_SAMPLE,
                        help="JSON list of sample strings (default: %(default)s)")
    args = parser.parse_args()

    import transformers

    if int(transformers.__version__.split(".")[0]) >= 5:
        sys.exit(f"need transformers<5 (slow OpenAIGPTTokenizer), found {transformers.__version__}")
    from spacy.tokenizer import Tokenizer as SpacyTokenizer
    from transformers import OpenAIGPTTokenizer

    tok = OpenAIGPTTokenizer(
        vocab_file=str(args.reference_dir / "encoder_bpe_40000.json"),
        merges_file=str(args.reference_dir / "vocab_40000.bpe"),
    )
    # Make sure the ftfy + spaCy path was taken, not the BERT BasicTokenizer fallback.
    if tok.fix_text is None or not isinstance(tok.nlp, SpacyTokenizer):
        sys.exit("OpenAIGPTTokenizer fell back to BasicTokenizer: install ftfy and spacy")
    assert len(tok.encoder) == 40478 and len(tok.bpe_ranks) == 40000

    texts = json.loads(args.sample.read_text(encoding="utf-8"))
    assert isinstance(texts, list) and all(isinstance(t, str) for t in texts)

    cases = []
    for text in texts:
        tokens = tok.tokenize(text)
        ids = tok.convert_tokens_to_ids(tokens)
        cases.append({"text": text, "tokens": tokens, "ids": ids})

    made_with = {
        "python": platform.python_version(),
        "transformers": transformers.__version__,
        "ftfy": version("ftfy"),
        "spacy": version("spacy"),
        "tokenizer": "transformers.OpenAIGPTTokenizer (slow) with ftfy.fix_text + spacy.lang.en.English().tokenizer",
        "calls": "tok.tokenize(text); tok.convert_tokens_to_ids(tokens)",
        "vocab": "encoder_bpe_40000.json",
        "merges": "vocab_40000.bpe",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"made_with": made_with, "cases": cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {args.out}")


if __name__ == "__main__":
    main()
