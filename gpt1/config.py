"""Load params.yaml, pick the profile, apply overrides, validate against the one schema.

Light on imports on purpose: the Snakefile imports this module to validate the config.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from gpt1.errors import Gpt1Error

SCHEMA_PATH = Path(__file__).with_name("params.schema.yaml")
MIRROR_ENV = "GPT1_DATA_MIRROR"
DTYPE_MAX_VOCAB = {"uint16": 2**16, "uint32": 2**32}
N_SPECIAL_TOKENS = 4  # <unk> plus the start, delimiter and extract tokens of fine-tuning


class ConfigError(Gpt1Error):
    """A one-line message naming the key and what would be valid."""


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
    def data_mirror(self) -> Path | None:
        """The mirror folder: GPT1_DATA_MIRROR, else params.yaml's data_mirror, else None (the hub)."""
        value = os.environ.get(MIRROR_ENV) or self.root.get("data_mirror")
        return Path(value) if value else None

    def results(self, *parts: str) -> Path:
        return Path("results", self.profile, *parts)


def _schema() -> dict[str, Any]:
    return yaml.safe_load(SCHEMA_PATH.read_text())


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
        return f"{key}: {error.instance!r} has the wrong type, expected {error.validator_value}"
    return f"{key}: {error.message}"


def validate_schema(root: dict[str, Any]) -> None:
    """Check a whole params mapping against the schema; raise ConfigError on the first problem."""
    validator = jsonschema.Draft202012Validator(_schema())
    errors = sorted(validator.iter_errors(root), key=lambda e: (len(e.absolute_path), list(map(str, e.path))))
    if errors:
        best = jsonschema.exceptions.best_match(errors)
        # best_match prefers shallow errors; an unknown key deep down is still more useful than a generic oneOf.
        raise ConfigError(_describe(best))


def check_semantics(root: dict[str, Any]) -> None:
    """Rules JSON Schema cannot express. Raises ConfigError naming the key."""
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
        pretrain = prof["pretrain"]
        if pretrain["batch_size"] % pretrain["micro_batch_size"]:
            raise ConfigError(
                f"profiles.{name}.pretrain.batch_size: {pretrain['batch_size']} is not a multiple of "
                f"micro_batch_size={pretrain['micro_batch_size']}; gradient accumulation needs whole micro-batches"
            )
        bpe, dtype = prof["bpe"], prof["encode"]["dtype"]
        # Upper bound of the vocabulary: specials, each base character alone and with </w>, one token per merge.
        bound = N_SPECIAL_TOKENS + 2 * bpe["limit_alphabet"] + bpe["merges"]
        if bound > DTYPE_MAX_VOCAB[dtype]:
            raise ConfigError(
                f"profiles.{name}.bpe.merges: a vocabulary of up to {bound} tokens does not fit "
                f"encode.dtype={dtype} (max {DTYPE_MAX_VOCAB[dtype]}); lower merges or use dtype uint32"
            )


def parse_override(text: str) -> tuple[list[str], Any]:
    """'a.b.c=value' -> (['a','b','c'], yaml-parsed value)."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE, e.g. --set bpe.merges=1000")
    key, raw = text.split("=", 1)
    if not key:
        raise ConfigError(f"--set {text!r}: empty key, e.g. --set bpe.merges=1000")
    return key.split("."), yaml.safe_load(raw)


def apply_overrides(root: dict[str, Any], profile: str, overrides: list[str]) -> dict[str, Any]:
    """Overrides are relative to the selected profile ('bpe.merges=10'); unknown keys are caught by the schema."""
    root = copy.deepcopy(root)
    for text in overrides:
        path, value = parse_override(text)
        node = root["profiles"].get(profile)
        if node is None:
            break  # the missing profile is reported by check_semantics
        for part in path[:-1]:
            if not isinstance(node.get(part), dict):
                raise ConfigError(f"--set {text}: {part!r} is not a section of profiles.{profile}")
            node = node[part]
        node[path[-1]] = value
    return root


def read_params(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: params file not found; run from the repository root or pass --params")
    try:
        root = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML ({err})".replace("\n", " ")) from err
    if not isinstance(root, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return root


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
