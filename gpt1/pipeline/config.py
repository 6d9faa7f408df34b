"""Load params.yaml, pick the profile, apply overrides, validate against the one schema.

Light on imports on purpose: the Snakefile imports this module to validate the config.
"""

from __future__ import annotations

import copy
import math
import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from gpt1.pipeline import layout
from gpt1.pipeline.errors import ConfigError

SCHEMA_PATH = Path(__file__).with_name("params.schema.yaml")
MIRROR_ENV = "GPT1_DATA_MIRROR"
N_SPECIAL_TOKENS = 4  # <unk> plus the start, delimiter and extract tokens of fine-tuning


FLOAT_TAG = "tag:yaml.org,2002:float"
# YAML 1.2's floats (what DVC's ruamel.yaml reads): `1e-3` and `1.0e3` are floats; PyYAML follows YAML 1.1, which
# wants a dot and a signed exponent and reads both as strings. Also kept: YAML 1.1's `_` separators, `.inf`, `.nan`.
YAML12_FLOAT = re.compile(r"""^(?:
     [-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+
    |[-+]?\.[0-9][0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""", re.X)


class Yaml12Loader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2 floats, refusing a key given twice in one mapping (PyYAML keeps the last
    one without a word; DVC's ruamel.yaml refuses it too)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *base` may override keys on purpose
            key = self.construct_scalar(key_node)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"key {key!r} is given twice", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != FLOAT_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
Yaml12Loader.add_implicit_resolver(FLOAT_TAG, YAML12_FLOAT, list("-+0123456789."))


def load_yaml(text: str) -> Any:
    """YAML as params.yaml means it (1.2 floats); raises yaml.YAMLError."""
    return yaml.load(text, Loader=Yaml12Loader)  # a SafeLoader subclass: no arbitrary objects


def yaml12_floats(value: Any) -> Any:
    """`value` with every string a YAML 1.2 reader takes for a float turned into that float: for config another
    YAML 1.1 reader loaded (Snakemake's `configfile:` gives `lr: 1e-3` as the string '1e-3')."""
    if isinstance(value, dict):
        return {key: yaml12_floats(inner) for key, inner in value.items()}
    if isinstance(value, list):
        return [yaml12_floats(inner) for inner in value]
    if isinstance(value, str) and YAML12_FLOAT.match(value):
        return load_yaml(value)
    return value


# Figure 2 left: the tasks whose fine-tuning is run with 0..n_layer pre-trained blocks, and the report each curve is
# drawn from (the paper: MultiNLI and RACE dev accuracy). Read by the schema (above), the layers stage, its CLI
# argument and the Snakemake rule.
LAYER_TRANSFER_TASKS = {"mnli": "mnli_m", "race": "race"}

@dataclass(frozen=True)
class Config:
    """The validated params.yaml with one profile selected."""

    root: dict[str, Any]
    profile: str

    @property
    def p(self) -> dict[str, Any]:
        """Settings of the selected profile."""
        return self.root["profiles"][self.profile]

    def section(self, name: str) -> dict[str, Any]:
        return self.p[name]

    @property
    def experiment(self) -> str:
        """The MLflow experiment every stage logs into (params.yaml mlflow.experiment)."""
        return self.root["mlflow"]["experiment"]

    @property
    def synthetic(self) -> bool:
        """The project makes this profile's corpus and task data itself (smoke): no hub, no mirror."""
        return makes_its_own_data(self.p)

    @property
    def data_mirror(self) -> Path | None:
        """The mirror folder: GPT1_DATA_MIRROR, else params.yaml's data_mirror, else None (the hub)."""
        value = os.environ.get(MIRROR_ENV) or self.root.get("data_mirror")
        return Path(value) if value else None

    def results(self, *parts: str) -> Path:
        return Path(layout.profile_dir(self.profile), *parts)


@dataclass(frozen=True)
class FinetuneSettings:
    """What a fine-tuning job reads of the profile (`gpt1.training.finetuning`, for the finetune and layers stages): the
    finetune section, whether the task data is project-made (corpus.source synthetic), and the data mirror."""

    finetune: dict[str, Any]
    synthetic: bool
    mirror: Path | None


def makes_its_own_data(profile: dict[str, Any]) -> bool:
    """A profile (its settings mapping) whose corpus, and so task data, the project generates (corpus.source
    synthetic): the one place that rule is written (`Config.synthetic`, and workflow/rules/common.smk)."""
    return profile["corpus"]["source"] == "synthetic"


def pretrain_settings(cfg: Config, kind: str) -> dict[str, Any]:
    """The profile's pretrain section for one model kind: pretrain.by_model.<kind> laid over the shared keys."""
    return _pretrain_for(cfg.section("pretrain"), kind)


def _pretrain_for(section: dict[str, Any], kind: str | None) -> dict[str, Any]:
    """The pretrain section as model `kind` sees it (None: the keys shared by every kind)."""
    shared = {key: value for key, value in section.items() if key != "by_model"}
    return {**shared, **((section.get("by_model") or {}).get(kind, {}) if kind else {})}


def finetune_settings(cfg: Config) -> FinetuneSettings:
    return FinetuneSettings(cfg.section("finetune"), cfg.synthetic, cfg.data_mirror)


def _schema() -> dict[str, Any]:
    """params.schema.yaml, with the facts it takes from the code filled in (the layer-transfer tasks)."""
    schema = load_yaml(SCHEMA_PATH.read_text())
    schema["$defs"]["layer_task"]["enum"] = list(LAYER_TRANSFER_TASKS)
    return schema


def finetune_task_names() -> list[str]:
    """The tasks a fine-tuning job takes, as the schema lists them (tests/test_config.py holds them equal to
    gpt1/data/tasks.py's), so that the CLI's help names them without importing the task registry."""
    return _schema()["$defs"]["finetune_task"]["enum"]


def _key(path: Any) -> str:
    return ".".join(str(p) for p in path) or "<top level>"


def _describe(error: jsonschema.ValidationError) -> str:
    """Turn a jsonschema error into 'key: problem (valid: ...)'."""
    key = _key(error.absolute_path)
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        where = f"{key}." if error.absolute_path else ""
        return f"unknown key {where}{extra[0]}: valid keys here are {', '.join(allowed)}"
    if error.validator == "required":
        return f"{key}: {error.message}"
    if error.validator == "enum":
        return f"{key}: {error.instance!r} is not one of {', '.join(map(str, error.validator_value))}"
    if error.validator == "type":
        hint = ""
        if isinstance(error.instance, float) and error.instance.is_integer():
            hint = f" (write {int(error.instance)})"  # `merges: 1e3` reads as the float 1000.0
        return f"{key}: {error.instance!r} has the wrong type, expected {error.validator_value}{hint}"
    return f"{key}: {error.message}"


def _strict_integer(checker: Any, instance: Any) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


# JSON Schema counts 1000.0 as an integer, but range(1000.0) fails deep inside a stage: integers must be ints.
_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _strict_integer),
)


def validate_schema(root: dict[str, Any]) -> None:
    """Check a whole params mapping against the schema; raise ConfigError on the first problem."""
    validator = _Validator(_schema())
    errors = sorted(validator.iter_errors(root), key=lambda e: (len(e.absolute_path), list(map(str, e.path))))
    if errors:
        best = jsonschema.exceptions.best_match(errors)
        # best_match prefers shallow errors; an unknown key deep down is still more useful than a generic oneOf.
        raise ConfigError(_describe(best))


def _non_finite(value: Any, path: str) -> str | None:
    """The dotted key of the first NaN or infinity in `value` (JSON Schema's bounds let NaN through)."""
    if isinstance(value, float) and not math.isfinite(value):
        return path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, inner in items:
        found = _non_finite(inner, f"{path}.{key}" if path else str(key))
        if found:
            return found
    return None


def check_semantics(root: dict[str, Any]) -> None:
    """Rules JSON Schema cannot express. Raises ConfigError naming the key."""
    bad = _non_finite(root, "")
    if bad:
        raise ConfigError(f"{bad}: not a finite number; give a real value (.nan and .inf are not settings)")
    if root["profile"] not in root["profiles"]:
        raise ConfigError(f"profile: {root['profile']!r} is not defined; valid: {', '.join(root['profiles'])}")
    if root["ablation_tasks"] and "lstm" not in root["pretrain_models"]:
        raise ConfigError("ablation_tasks: the LSTM ablation needs lstm in pretrain_models; add it or empty the list")
    for task, ref in root["zeroshot_reference"].items():
        if ref["sota"] <= ref["random"]:
            raise ConfigError(f"zeroshot_reference.{task}.sota: {ref['sota']} must exceed random={ref['random']}")
    for name, prof in root["profiles"].items():
        model = prof["model"]
        if model["n_embd"] % model["n_head"]:
            raise ConfigError(
                f"profiles.{name}.model.n_embd: {model['n_embd']} is not divisible by n_head={model['n_head']}; "
                f"choose n_embd a multiple of n_head"
            )
        for kind in (None, *(prof["pretrain"].get("by_model") or {})):
            _check_batches(prof["pretrain"], kind, f"profiles.{name}.pretrain")
        _check_pinned(prof, name)
        snapshots = prof["pretrain"]["snapshots"]
        for index in prof["samples"]["snapshots"]:
            if not -snapshots <= index < snapshots:
                raise ConfigError(f"profiles.{name}.samples.snapshots: {index} is no snapshot of pretrain.snapshots="
                                  f"{snapshots}; give indices from {-snapshots} to {snapshots - 1} (-1: the last)")
        bpe, dtype = prof["bpe"], prof["encode"]["dtype"]
        # Upper bound of the vocabulary: specials, each base character alone and with </w>, one token per merge.
        bound = N_SPECIAL_TOKENS + 2 * bpe["limit_alphabet"] + bpe["merges"]
        if bound > layout.IDS_DTYPE_VOCAB[dtype]:
            raise ConfigError(
                f"profiles.{name}.bpe.merges: a vocabulary of up to {bound} tokens does not fit "
                f"encode.dtype={dtype} (max {layout.IDS_DTYPE_VOCAB[dtype]}); lower merges or use dtype uint32"
            )


def _check_pinned(prof: dict[str, Any], name: str) -> None:
    """A pinned profile computes in fp32: bf16 matrix products have no AVX2 kernel (about 60x slower than fp32 under
    the pin; BENCHMARKS.md "Pinned kernels"). auto is fp32 on a CPU."""
    if not prof["cpu"]["pinned"]:
        return
    if prof["cpu"]["threads"] is None:
        raise ConfigError(f"profiles.{name}.cpu.threads: null with cpu.pinned: true; give the threads every model "
                          f"job computes with (the bytes depend on it), e.g. 1")
    for section in ("pretrain", "finetune"):
        if prof[section]["precision"] == "bf16":
            raise ConfigError(
                f"profiles.{name}.{section}.precision: bf16 with cpu.pinned: true has no AVX2 kernel (about 60x "
                f"slower than fp32); use auto (fp32 on a CPU, bf16 on CUDA) or fp32, or set cpu.pinned: false"
            )


def _check_batches(section: dict[str, Any], kind: str | None, where: str) -> None:
    pretrain = _pretrain_for(section, kind)
    if pretrain["batch_size"] % pretrain["micro_batch_size"]:
        key = f"{where}.by_model.{kind}" if kind else where
        raise ConfigError(
            f"{key}.batch_size: {pretrain['batch_size']} is not a multiple of "
            f"micro_batch_size={pretrain['micro_batch_size']}; gradient accumulation needs whole micro-batches"
        )


def parse_override(text: str) -> tuple[list[str], Any]:
    """'a.b.c=value' -> (['a','b','c'], yaml-parsed value)."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE, e.g. --set bpe.merges=1000")
    key, raw = text.split("=", 1)
    if not key or "" in key.split("."):
        raise ConfigError(f"--set {text!r}: empty key, e.g. --set bpe.merges=1000")
    try:
        return key.split("."), load_yaml(raw)
    except yaml.YAMLError as err:
        problem = getattr(err, "problem", None) or "not valid YAML"
        raise ConfigError(f"--set {text!r}: the value is not valid YAML ({problem}); quote it, "
                          f"e.g. --set 'corpus.files=[\"books/*.txt\"]'") from err


def _whole_hint(path: Sequence[str], depth: int, value: Any, node: dict[str, Any]) -> str:
    """For a key that holds no section yet (unset or null): how to give it whole, e.g. 'by_model={gpt: {lr: 0.001}}'
    (the value as YAML, quoted for the shell)."""
    if node.get(path[depth]) is not None:
        return ""  # a value, not an unset section: the key is no section at all
    nested = value
    for key in reversed(path[depth + 1:]):
        nested = {key: nested}
    given = yaml.safe_dump(nested, default_flow_style=True, width=1 << 16).strip()
    return f"; a setting unset here is given whole: --set {shlex.quote('.'.join(path[: depth + 1]) + '=' + given)}"


def apply_overrides(root: dict[str, Any], profile: str, overrides: list[str]) -> dict[str, Any]:
    """Overrides are relative to the selected profile ('bpe.merges=10'); unknown keys are caught by the schema."""
    root = copy.deepcopy(root)
    for text in overrides:
        path, value = parse_override(text)
        profiles = root.get("profiles")
        node = profiles.get(profile) if isinstance(profiles, dict) else None
        if not isinstance(node, dict):
            break  # the missing profile is reported by check_semantics
        for depth, part in enumerate(path[:-1]):
            if not isinstance(node.get(part), dict):
                raise ConfigError(f"--set {text}: {part!r} is not a section of profiles.{profile}"
                                  + _whole_hint(path, depth, value, node))
            node = node[part]
        node[path[-1]] = value
    return root


def read_params(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path}: a folder, not a params file; pass --params FILE")
    if not path.is_file():
        raise ConfigError(f"{path}: params file not found; run from the repository root or pass --params")
    try:
        root = load_yaml(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML ({_yaml_problem(err)})") from err
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text (byte {err.start}); save it as UTF-8") from err
    except OSError as err:
        raise ConfigError(f"{path}: cannot be read ({err.strerror}); check its permissions") from err
    if not isinstance(root, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return root


def _yaml_problem(err: yaml.YAMLError) -> str:
    """'problem at line L, column C' from PyYAML's multi-line message."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}" if mark else problem


def validate(root: dict[str, Any]) -> None:
    validate_schema(root)
    check_semantics(root)


def load_config(
    params: str | Path = "params.yaml", profile: str | None = None, overrides: list[str] | None = None
) -> Config:
    """Read, select the profile (argument, else params' `profile`), override, validate."""
    root = read_params(params)
    if profile is not None:
        root["profile"] = profile
    chosen = root.get("profile")
    root = apply_overrides(root, str(chosen), overrides or [])
    validate(root)
    return Config(root=root, profile=root["profile"])
