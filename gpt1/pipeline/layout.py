"""The results tree: every file and folder of results/<profile>/, named once, and the stage that writes it.

Paths are POSIX strings relative to the profile's results folder (results/<profile>/). Folders are functions of
the fan-out values (task, variant, seed, model); file names are constants of the folder they are in. `OUTPUTS`
maps each stage (dvc.yaml's names) to the files it declares, so the Snakemake rules, dvc.yaml's `outs`, the stages
and the report's readers all say the same thing; tests/test_dag.py fails when dvc.yaml lists a file not here, or
misses one. To add an output file: name it here, add it to its stage in `OUTPUTS`, then to the rule and dvc.yaml.

A library: plain arguments, no params.yaml, no MLflow; imports nothing from the package.
"""

from __future__ import annotations

from collections.abc import Callable

# ---------------------------------------------------------------------------------------------------- folders

RESULTS = "results"  # relative to the repository root: one folder per profile


def profile_dir(profile: str) -> str:
    """results/<profile>: what every other path here is relative to."""
    return f"{RESULTS}/{profile}"


CORPUS = "corpus"  # fetch, clean
TOKENIZER = "tokenizer"  # bpe
IDS = "ids"  # encode
TABLES = "tables"  # report
FIGURES = "figures"  # report
LOGS = "logs"  # every Snakemake rule's log (not a DVC output)


def task_dir(task: str) -> str:
    """encode_task: one task's examples, encoded once."""
    return f"tasks/{task}"


def pretrain_dir(model: str) -> str:
    """pretrain: one pre-trained model (gpt, lstm)."""
    return f"pretrain/{model}"


def finetune_dir(task: str, variant: str, seed: int | str) -> str:
    """finetune, ablation_no_aux, ablation_lstm: one run (task x variant x seed)."""
    return f"finetune/{task}/{variant}/{seed}"


def zeroshot_dir(model: str) -> str:
    """zeroshot: the heuristics along one model's pre-training snapshots."""
    return f"analyses/zeroshot/{model}"


def layers_dir(task: str, seed: int | str) -> str:
    """layers: layers transferred, k = 0..n_layer, for one task and seed."""
    return f"analyses/layers/{task}/{seed}"


# ---------------------------------------------------------------------------------------------------- file names

# corpus/
RAW, RAW_MANIFEST = "raw.jsonl", "raw.manifest.json"  # fetch
SPLITS = ("train", "validation")
CORPUS_MANIFEST = "manifest.json"  # clean


def corpus_split(split: str) -> str:
    """clean: corpus/{train,validation}.jsonl."""
    return f"{split}.jsonl"


# tokenizer/
TOKENIZER_FILE, TOKENIZER_META = "tokenizer.json", "gpt1_tokenizer.json"


# ids/
# The dtypes token-id files are written in (encode.dtype), and how many distinct ids each holds.
IDS_DTYPE_VOCAB = {"uint16": 2**16, "uint32": 2**32}


def ids_bin(split: str) -> str:
    return f"{split}.bin"


def ids_header(split: str) -> str:
    return f"{split}.json"


# tasks/<task>/
ENCODED_JSON, EXAMPLES_FILE = "encoded.json", "examples.jsonl"

# pretrain/<model>/
MODEL_WEIGHTS, MODEL_JSON = "model.safetensors", "model.json"
HF_EXPORT_RECORD = "gpt1_export.json"  # beside a model `gpt1 export` wrote: where it came from
PRETRAIN_METRICS, PRETRAIN_CURVES = "metrics.json", "curves.csv"
SNAPSHOTS = "snapshots"  # a declared folder: one weights file per snapshot and its index
SNAPSHOT_INDEX = "index.json"
RESUME = "resume"  # resumable state while a run is unfinished; not a declared output

# finetune/<task>/<variant>/<seed>/, in the order the stage writes them
FINETUNE_METRICS, PREDICTIONS, FINETUNE_CURVES = "metrics.json", "predictions.jsonl", "curves.csv"
FINETUNE_FILES = (FINETUNE_METRICS, PREDICTIONS, FINETUNE_CURVES)

# analyses/zeroshot/<model>/ and analyses/layers/<task>/<seed>/
ZEROSHOT_JSON, ZEROSHOT_CSV = "zeroshot.json", "zeroshot.csv"
HELDOUT_CSV = "heldout.csv"  # WikiText-2's loss per article at every point (zero-shot stage)
LAYERS_JSON, LAYERS_CSV = "layers.json", "layers.csv"

# tables/, figures/ and the DVC metrics file (report)
REPORT_TABLES = ("table2", "table3", "table4", "table5")
TABLE_FORMATS = ("md", "tex", "csv", "html")
REPORT_FIGURES = ("figure2_left", "figure2_right", "pretraining")
FIGURE_FORMATS = ("png", "svg")
SUMMARY = "summary.json"  # in tables/: every number
SAMPLES = "samples"  # in tables/: the page of what the GPT writes at a few of its pre-training snapshots
SAMPLES_FORMATS = ("md", "html")
METRICS = "metrics.json"  # in results/<profile>/ itself: the curated few numbers DVC's metrics show

DVC_COMMIT_FLAG = "dvc_commit.done"  # Snakemake's dvc_commit rule (not a DVC output)


def log(name: str) -> str:
    """A Snakemake rule's log: logs/<name>.log."""
    return f"{LOGS}/{name}.log"


def table(name: str, fmt: str) -> str:
    return f"{TABLES}/{name}.{fmt}"


def figure(name: str, fmt: str) -> str:
    return f"{FIGURES}/{name}.{fmt}"


# ---------------------------------------------------------------------------------------------------- stage -> outputs


def _in(folder: str, *names: str) -> list[str]:
    return [f"{folder}/{name}" for name in names]


def fetch_outputs() -> list[str]:
    return _in(CORPUS, RAW, RAW_MANIFEST)


def clean_outputs() -> list[str]:
    return _in(CORPUS, *(corpus_split(s) for s in SPLITS), CORPUS_MANIFEST)


def bpe_outputs() -> list[str]:
    return _in(TOKENIZER, TOKENIZER_FILE, TOKENIZER_META)


def encode_outputs() -> list[str]:
    return _in(IDS, *(name for s in SPLITS for name in (ids_bin(s), ids_header(s))))


def pretrain_outputs(model: str) -> list[str]:
    return _in(pretrain_dir(model), MODEL_WEIGHTS, MODEL_JSON, PRETRAIN_METRICS, PRETRAIN_CURVES, SNAPSHOTS)


def encode_task_outputs(task: str) -> list[str]:
    return _in(task_dir(task), ENCODED_JSON, EXAMPLES_FILE)


def finetune_outputs(task: str, variant: str, seed: int | str) -> list[str]:
    return _in(finetune_dir(task, variant, seed), *FINETUNE_FILES)


def zeroshot_outputs(model: str) -> list[str]:
    return _in(zeroshot_dir(model), ZEROSHOT_JSON, ZEROSHOT_CSV, HELDOUT_CSV)


def layers_outputs(task: str, seed: int | str) -> list[str]:
    return _in(layers_dir(task, seed), LAYERS_JSON, LAYERS_CSV)


def report_outputs() -> list[str]:
    """In the order the report writes them."""
    tables = [table(name, fmt) for name in REPORT_TABLES for fmt in TABLE_FORMATS]
    figures = [figure(name, fmt) for name in REPORT_FIGURES for fmt in FIGURE_FORMATS]
    samples = [table(SAMPLES, fmt) for fmt in SAMPLES_FORMATS]
    return [*tables, f"{TABLES}/{SUMMARY}", *samples, METRICS, *figures]


# Each stage of dvc.yaml (a rule of the same name in Snakemake) and the files it declares, given its fan-out values.
OUTPUTS: dict[str, Callable[..., list[str]]] = {
    "fetch": fetch_outputs,
    "clean": clean_outputs,
    "bpe": bpe_outputs,
    "encode": encode_outputs,
    "pretrain": pretrain_outputs,  # (model)
    "encode_task": encode_task_outputs,  # (task)
    "finetune": finetune_outputs,  # (task, variant, seed)
    "ablation_no_aux": lambda task, seed: finetune_outputs(task, "no_aux", seed),
    "ablation_lstm": lambda task, seed: finetune_outputs(task, "lstm", seed),
    "zeroshot": zeroshot_outputs,  # (model)
    "layers": layers_outputs,  # (task, seed)
    "report": report_outputs,
}
