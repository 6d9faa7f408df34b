"""The GPT-1 BPE: train it with Hugging Face `tokenizers`, load the released one, encode text.

Three pre-tokenisers, chosen in params.yaml (`bpe.pretokenizer`):
- `spacy`, the paper's as transformers 4.x's slow `OpenAIGPTTokenizer` runs it: the text lowercased, then ftfy, the
  original punctuation/whitespace standardisation, spaCy's blank English tokenizer; the words then go through a bare
  BPE model with the `</w>` end-of-word suffix.
- `openai`, the paper's as OpenAI's own code runs it (finetune-transformer-lm's `TextEncoder`): ftfy,
  standardisation and spaCy on the cased text, then each token lowercased. spaCy's exceptions are case-sensitive,
  so the two part on abbreviations ("Mr." is `mr` `.` under `spacy`, `mr.` here). The released vocabulary loads
  with it by default (`load_released`): it is how the released model's text was written out.
- `fast`, all inside `tokenizers`: BERT normaliser (lowercase) and BERT pre-tokeniser, as transformers 5's
  `OpenAIGPTTokenizer` does it. Faster, but differs from the original on contractions, mojibake and decimals.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, trainers
from tokenizers.models import BPE

from gpt1.data.pool import bounded_imap, pool_size
from gpt1.data.textnorm import standardize
from gpt1.pipeline import layout
from gpt1.pipeline.errors import TokenizerError
from gpt1.pipeline.files import sha256_text, write_json

UNK = "<unk>"
SUFFIX = "</w>"
# Reserved after the BPE vocabulary, never produced from text: the fine-tuning input transformations use them.
FINETUNE_SPECIALS = ("_start_", "_delimiter_", "_classify_")
PRETOKENIZERS = ("spacy", "openai", "fast")


@cache
def _spacy_tokenizer():
    from spacy.lang.en import English  # blank English: rules only, no model download

    return English().tokenizer


def spacy_words(text: str) -> list[str]:
    """The paper's pre-tokenisation of text that holds no literal '<unk>': ftfy, standardisation, spaCy, lowercase."""
    import ftfy

    words = [token.text.lower() for token in _spacy_tokenizer()(standardize(ftfy.fix_text(text)))]
    # spaCy keeps the space after a newline in the token ("\n "); the original bpe() special-cases exactly that
    # word to the '\n</w>' token, so do the same here.
    return ["\n" if w == "\n " else w for w in words]


def openai_pieces(text: str) -> list[list[str]]:
    """The words of `text` as OpenAI's `TextEncoder.encode` makes them: spaCy on the cased text, each token
    lowercased (`spacy_words`); one piece (their code gives a literal '<unk>' no meaning)."""
    return [spacy_words(text)]


def spacy_pieces(text: str) -> list[list[str]]:
    """Words of the pieces between literal '<unk>' markers, as the reference pipeline (transformers 4.x's
    OpenAIGPTTokenizer) sees them: it lowercases character by character *before* ftfy (so ftfy repairs only
    lowercase-stable mojibake, and spaCy's case-sensitive exceptions see lowercase text), and it splits on
    the special token '<unk>', which becomes id 0 between the pieces."""
    lowered = "".join(c.lower() for c in text)  # per character: 'ΟΔΟΣ' -> 'οδοσ', not the final-sigma 'οδος'
    return [spacy_words(piece) for piece in lowered.split(UNK)]


# The pre-tokenisers that run spaCy: each text's pieces of words (the pieces meet at a literal '<unk>', id 0)
SPACY_PIECES = {"spacy": spacy_pieces, "openai": openai_pieces}


def _bare_bpe(vocab: dict[str, int] | None = None, merges: list[tuple[str, str]] | None = None) -> BPE:
    if vocab is None:
        return BPE(unk_token=UNK, end_of_word_suffix=SUFFIX, fuse_unk=False)
    return BPE(vocab=vocab, merges=merges or [], unk_token=UNK, end_of_word_suffix=SUFFIX, fuse_unk=False)


def build_backend(pretokenizer: str, model: BPE) -> Tokenizer:
    """A `tokenizers.Tokenizer` around a BPE model; `fast` adds the BERT-style steps transformers 5 uses."""
    if pretokenizer not in PRETOKENIZERS:
        raise TokenizerError(f"bpe.pretokenizer: {pretokenizer!r} is not one of {', '.join(PRETOKENIZERS)}")
    backend = Tokenizer(model)
    backend.decoder = decoders.BPEDecoder(suffix=SUFFIX)
    if pretokenizer == "fast":
        backend.normalizer = normalizers.BertNormalizer(lowercase=True)
        backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        # transformers registers the unknown token as a special token: a literal '<unk>' in text is id 0.
        backend.add_special_tokens([UNK])
    return backend


@dataclass
class GPT1Tokenizer:
    """A BPE vocabulary, its pre-tokeniser, and the fine-tuning specials reserved after it."""

    backend: Tokenizer
    pretokenizer: str

    @property
    def base_vocab_size(self) -> int:
        """Tokens text can produce: the embedding rows pre-training needs."""
        return self.backend.get_vocab_size()

    @property
    def vocab_size(self) -> int:
        """With the fine-tuning specials."""
        return self.base_vocab_size + len(FINETUNE_SPECIALS)

    @property
    def specials(self) -> dict[str, int]:
        return {name: self.base_vocab_size + i for i, name in enumerate(FINETUNE_SPECIALS)}

    @property
    def n_merges(self) -> int:
        return len(json.loads(self.backend.to_str())["model"]["merges"])

    def fingerprint(self) -> str:
        """sha256 of everything that decides the ids: the BPE model and the pre-tokeniser."""
        return sha256_text(self.pretokenizer + "\n" + self.backend.to_str())

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        if self.pretokenizer == "fast":
            return [e.ids for e in self.backend.encode_batch(texts, add_special_tokens=False)]
        pieces = [SPACY_PIECES[self.pretokenizer](t) for t in texts]
        flat = [words for text_pieces in pieces for words in text_pieces if words]
        encoded = iter(self.backend.encode_batch(flat, is_pretokenized=True, add_special_tokens=False))
        unk = self.backend.token_to_id(UNK)
        result = []
        for text_pieces in pieces:
            ids: list[int] = []
            for index, words in enumerate(text_pieces):
                if index:
                    ids.append(unk)
                if words:
                    ids.extend(next(encoded).ids)
            result.append(ids)
        return result

    def encode(self, text: str) -> list[int]:
        return self.encode_batch([text])[0]

    def tokens(self, text: str) -> list[str]:
        return [self.backend.id_to_token(i) for i in self.encode(text)]

    def decode(self, ids: Iterable[int]) -> str:
        return self.backend.decode([i for i in ids if i < self.base_vocab_size])

    def paragraph_separator(self) -> list[int]:
        """Ids a newline adds between two paragraphs (spacy: the '\\n</w>' token; fast: none)."""
        a, b, both = self.encode("a"), self.encode("b"), self.encode("a\nb")
        return both[len(a) : len(both) - len(b)]

    def save(self, folder: str | Path) -> tuple[Path, Path]:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        return self.save_files(folder / layout.TOKENIZER_FILE, folder / layout.TOKENIZER_META)

    def save_files(self, tokenizer_file: Path, meta_file: Path) -> tuple[Path, Path]:
        self.backend.save(str(tokenizer_file))
        meta = {
            "pretokenizer": self.pretokenizer,
            "base_vocab_size": self.base_vocab_size,
            "merges": self.n_merges,
            "specials": self.specials,
            "sha256": self.fingerprint(),
        }
        write_json(meta_file, meta, sort_keys=False)
        return tokenizer_file, meta_file

    @classmethod
    def load(cls, folder: str | Path) -> GPT1Tokenizer:
        folder = Path(folder)
        for name in (layout.TOKENIZER_FILE, layout.TOKENIZER_META):
            if not (folder / name).is_file():
                raise TokenizerError(f"{folder / name}: missing; run the bpe stage (gpt1 bpe) first")
        meta = json.loads((folder / layout.TOKENIZER_META).read_text())
        tok = cls(Tokenizer.from_file(str(folder / layout.TOKENIZER_FILE)), meta["pretokenizer"])
        if tok.fingerprint() != meta["sha256"]:
            raise TokenizerError(f"{folder}: {layout.TOKENIZER_FILE} does not match the sha256 in "
                                 f"{layout.TOKENIZER_META}; re-run gpt1 bpe")
        return tok


def read_merges(path: str | Path) -> list[tuple[str, str]]:
    """A merges file: '#version' header, then one 'a b' pair per line."""
    pairs = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line or line.startswith("#version"):
            continue
        parts = line.split(" ")
        if len(parts) != 2:
            raise TokenizerError(f"{path}:{number}: expected 'a b', got {line!r}")
        pairs.append((parts[0], parts[1]))
    return pairs


def load_released(source: str | Path, pretokenizer: str = "openai") -> GPT1Tokenizer:
    """The released GPT-1 vocabulary: a folder (encoder_bpe_40000.json + vocab_40000.bpe, or vocab.json +
    merges.txt) or a hub id such as openai-community/openai-gpt; by default with OpenAI's own pre-tokenisation,
    the one its model was trained on (`spacy` gives transformers 4.x's ids)."""
    folder = Path(source)
    pairs = [("encoder_bpe_40000.json", "vocab_40000.bpe"), ("vocab.json", "merges.txt")]
    if folder.is_dir():
        found = [(folder / v, folder / m) for v, m in pairs if (folder / v).is_file() and (folder / m).is_file()]
        if not found:
            raise TokenizerError(f"{folder}: no {' or '.join(f'{v} + {m}' for v, m in pairs)} found")
        vocab_file, merges_file = found[0]
    else:
        from huggingface_hub import hf_hub_download

        vocab_file = Path(hf_hub_download(str(source), "vocab.json"))
        merges_file = Path(hf_hub_download(str(source), "merges.txt"))
    vocab = json.loads(vocab_file.read_text(encoding="utf-8"))
    return GPT1Tokenizer(build_backend(pretokenizer, _bare_bpe(vocab, read_merges(merges_file))), pretokenizer)


def canonical_vocab(base: Iterable[str], learned: list[tuple[str, str]]) -> dict[str, int]:
    """Ids in an order fixed by content alone: <unk>, the base symbols sorted by code point, then the token of each
    merge in merge order. The trainer numbers its base alphabet in hash-map order, which changes from process to
    process; the merges themselves are deterministic."""
    vocab = {UNK: 0}
    for token in sorted(set(base) - {UNK}):
        vocab[token] = len(vocab)
    for a, b in learned:
        vocab.setdefault(a + b, len(vocab))
    return vocab


def _truncate_merges(backend: Tokenizer, merges: int, pretokenizer: str) -> Tokenizer:
    """Keep exactly the first `merges` merges, with the vocabulary numbered canonically (`canonical_vocab`)."""
    state = json.loads(backend.to_str())["model"]
    learned = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in state["merges"]]
    merged = {a + b for a, b in learned}
    base = [token for token in state["vocab"] if token not in merged]
    kept = learned[:merges]
    return build_backend(pretokenizer, _bare_bpe(canonical_vocab(base, kept), kept))


def word_counts(texts: Iterable[str], pretokenizer: str, words: Iterable[list[str]] | None = None) -> Counter:
    """How often each pre-tokenised word occurs: `words` (lists of spaCy words) or the words of `texts`."""
    if pretokenizer in SPACY_PIECES:
        pieces = words if words is not None else (w for t in texts for w in SPACY_PIECES[pretokenizer](t))
        return Counter(word for piece in pieces for word in piece)
    probe = build_backend("fast", _bare_bpe())
    return Counter(word for t in texts
                   for word, _ in probe.pre_tokenizer.pre_tokenize_str(probe.normalizer.normalize_str(t)))


def kept_alphabet(counts: Counter, limit: int) -> list[str]:
    """The `limit` most frequent characters, ties broken by code point (the trainer breaks them in hash order)."""
    chars: Counter = Counter()
    for word, n in counts.items():
        for c in word:
            chars[c] += n
    return sorted(sorted(chars, key=lambda c: (-chars[c], c))[:limit])


def _repeated(counts: Counter) -> Iterator[list[str]]:
    for word in sorted(counts):
        yield [word] * counts[word]


def train(
    texts: Iterable[str],
    pretokenizer: str,
    merges: int,
    limit_alphabet: int,
    min_frequency: int = 2,
    words: Iterable[list[str]] | None = None,
) -> GPT1Tokenizer:
    """Learn `merges` BPE merges from `texts` (or, for the spaCy ones, from already pre-tokenised `words` lists).

    The same corpus gives the same merges and ids in every process. The trainer numbers the end-of-word forms of
    the characters ('a</w>') in hash-map order and breaks ties between equally frequent pairs by those numbers, so
    the merges themselves could change from run to run. Here the alphabet is chosen beforehand (ties by code point)
    and the end-of-word forms are registered first, in sorted order: every id, hence every tie, is fixed."""
    counts = word_counts(texts, pretokenizer, words)
    alphabet = kept_alphabet(counts, limit_alphabet)
    enders = {word[-1] for word in counts}
    backend = build_backend(pretokenizer, _bare_bpe())
    trainer = trainers.BpeTrainer(
        vocab_size=1 + 2 * limit_alphabet + merges,  # an upper bound; merges are cut to the exact count below
        min_frequency=min_frequency,
        special_tokens=[UNK, *(c + SUFFIX for c in alphabet if c in enders)],
        initial_alphabet=alphabet,
        limit_alphabet=len(alphabet),
        end_of_word_suffix=SUFFIX,
        show_progress=False,
    )
    backend.train_from_iterator(_repeated(counts), trainer=trainer)
    return GPT1Tokenizer(_truncate_merges(backend, merges, pretokenizer), pretokenizer)


def paragraph_chunks(text: str, chunk_chars: int) -> list[str]:
    """Split at newlines into pieces of about `chunk_chars` (a longer paragraph stays whole), so that
    encoding the pieces and joining them with `paragraph_separator()` gives the ids of the whole text."""
    chunks, current, size = [], [], 0
    for paragraph in text.split("\n"):
        if current and size + len(paragraph) > chunk_chars:
            chunks.append("\n".join(current))
            current, size = [], 0
        current.append(paragraph)
        size += len(paragraph) + 1
    if current:
        chunks.append("\n".join(current))
    return [c for c in chunks if c.strip()]


def _corpus_chunks(corpus_jsonl: Path, chunk_chars: int) -> Iterator[str]:
    from gpt1.pipeline.files import read_jsonl

    for doc in read_jsonl(corpus_jsonl):
        yield from paragraph_chunks(doc["text"], chunk_chars)


def train_on_corpus(corpus_jsonl: Path, bpe: dict, chunk_chars: int, workers: int) -> GPT1Tokenizer:
    """The bpe stage: learn the merges from the training split (spaCy pre-tokenisation spread over `workers`)."""
    from tqdm import tqdm

    chunks = tqdm(_corpus_chunks(corpus_jsonl, chunk_chars), desc="bpe: pre-tokenise", unit="chunk")
    workers = pool_size(corpus_jsonl, workers)
    mode = bpe["pretokenizer"]
    if mode in SPACY_PIECES:
        words = (w for pieces in bounded_imap(SPACY_PIECES[mode], chunks, workers) for w in pieces)
        return train([], mode, bpe["merges"], bpe["limit_alphabet"], bpe["min_frequency"], words=words)
    return train(chunks, "fast", bpe["merges"], bpe["limit_alphabet"], bpe["min_frequency"])
