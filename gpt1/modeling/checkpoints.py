"""The checkpoint format: model configs to and from JSON, building a model, safetensors weights (canonical bytes,
metadata, verified loading), snapshots, and `load_pretrained` for every later stage.

A finished pre-training folder holds model.safetensors and model.json (kind, config, tokenizer_sha256, step,
tokens and the weights' size and sha256), and snapshots/NN.safetensors with snapshots/index.json. Every weights file
also carries kind, config, step and tokens in its own metadata, so a snapshot alone says what it is.

A library module: it knows no params.yaml key, no MLflow and no results path.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file
from safetensors.torch import save as safetensors_bytes
from torch import nn

from gpt1.modeling.model import GPT, LSTMLM, GPTConfig, LSTMConfig
from gpt1.pipeline import layout
from gpt1.pipeline.errors import CheckpointError
from gpt1.pipeline.files import first_difference, read_json, verify_file

MODEL_KINDS = ("gpt", "lstm")


# ----------------------------------------------------------------------------------------------------------------
# Model configs


def model_config(kind: str, model: dict[str, Any], vocab_size: int) -> GPTConfig | LSTMConfig:
    """The model's config from a `model` mapping (n_ctx, n_embd, n_layer, n_head, lstm_hidden, dropout); the
    vocabulary is the tokenizer's base vocabulary (fine-tuning adds its special tokens later with
    resize_token_embeddings)."""
    if kind not in MODEL_KINDS:
        raise CheckpointError(f"--model {kind!r}: valid kinds are {', '.join(MODEL_KINDS)}")
    p = model["dropout"]
    try:
        if kind == "gpt":
            return GPTConfig(vocab_size=vocab_size, n_ctx=model["n_ctx"], n_embd=model["n_embd"],
                             n_layer=model["n_layer"], n_head=model["n_head"],
                             embd_pdrop=p, attn_pdrop=p, resid_pdrop=p)
        return LSTMConfig(vocab_size=vocab_size, n_ctx=model["n_ctx"], n_embd=model["n_embd"],
                          hidden_size=model["lstm_hidden"], dropout=p)
    except ValueError as err:  # the config's own checks name the field
        raise CheckpointError(f"model: {err}") from err


def build_model(kind: str, config: GPTConfig | LSTMConfig) -> nn.Module:
    return GPT(config) if kind == "gpt" else LSTMLM(config)


def config_from_dict(kind: str, values: dict[str, Any], where: str) -> GPTConfig | LSTMConfig:
    """A model config from model.json / safetensors metadata; unknown or invalid fields are named."""
    cls = GPTConfig if kind == "gpt" else LSTMConfig if kind == "lstm" else None
    if cls is None:
        raise CheckpointError(f"{where}: kind {kind!r} is not one of {', '.join(MODEL_KINDS)}")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise CheckpointError(f"{where}: unknown {cls.__name__} field {unknown[0]!r}; "
                              f"valid: {', '.join(sorted(known))}")
    try:
        return cls(**values)
    except ValueError as err:
        raise CheckpointError(f"{where}: {err}") from err


# ----------------------------------------------------------------------------------------------------------------
# Weight files (safetensors)


def unique_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """state_dict without the copies of tied tensors (GPT's lm_head.weight is tokens_embed.weight): safetensors
    refuses shared storage, and loading re-ties them."""
    seen: set[tuple] = set()
    out = {}
    for key, tensor in model.state_dict().items():
        place = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if place in seen:
            continue
        seen.add(place)
        out[key] = tensor.detach().contiguous().cpu()
    return out


def weights_metadata(kind: str, config: GPTConfig | LSTMConfig, tokenizer_sha256: str, step: int,
                     tokens: int, numerics: dict[str, Any] | None = None) -> dict[str, str]:
    """Stored in every weights file, so a snapshot alone says what it is (and what it was computed with,
    gpt1.training.numerics)."""
    meta = {"kind": kind, "config": json.dumps(dataclasses.asdict(config)), "tokenizer_sha256": tokenizer_sha256,
            "step": str(step), "tokens": str(tokens)}
    if numerics is not None:
        meta["numerics"] = json.dumps(numerics, sort_keys=True)
    return meta


def canonical_safetensors(data: bytes) -> bytes:
    """The same file with its JSON header written in sorted key order. safetensors serialises the metadata from a
    hash map, so equal tensors gave different bytes (and DVC hashes) in every process; offsets are unchanged."""
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + size])
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the format pads the header with spaces to 8-byte alignment
    return len(text).to_bytes(8, "little") + text + data[8 + size :]


def save_weights(model: nn.Module, path: Path, metadata: dict[str, str] | None = None) -> None:
    Path(path).write_bytes(canonical_safetensors(safetensors_bytes(unique_state(model), metadata=metadata)))


def read_weights(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    try:
        tensors = load_file(str(path))
        with safe_open(str(path), "pt") as handle:
            metadata = handle.metadata() or {}
    except Exception as err:  # SafetensorError, OSError: a truncated or foreign file
        raise CheckpointError(f"{path}: not a readable safetensors file ({err}); it is truncated or corrupt") from err
    return tensors, metadata


def load_weights(model: nn.Module, tensors: dict[str, torch.Tensor], where: str) -> None:
    """Copy `tensors` into `model`, naming every missing, unexpected or mis-shaped tensor first."""
    expected = unique_state(model)
    problems = [f"{k} is missing (expected shape {tuple(v.shape)})" for k, v in expected.items() if k not in tensors]
    problems += [f"unexpected tensor {k}" for k in tensors if k not in expected]
    problems += [
        f"{k} has shape {tuple(v.shape)}, the config gives {tuple(expected[k].shape)}"
        for k, v in tensors.items() if k in expected and v.shape != expected[k].shape
    ]
    if problems:
        raise CheckpointError(f"{where}: weights do not match the model config: " + "; ".join(problems[:5]))
    # Tied copies were left out when saving; strict=False lets them be, and they stay tied to their source.
    model.load_state_dict({k: v.to(expected[k].dtype) for k, v in tensors.items()}, strict=False)


# ----------------------------------------------------------------------------------------------------------------
# Snapshots


def snapshot_name(index: int) -> str:
    return f"{index:02d}.safetensors"


def iter_snapshots(out_dir: str | Path) -> Iterator[tuple[dict[str, Any], Path]]:
    """(index entry, weights file) of each snapshot of a finished run, in order."""
    out = Path(out_dir)
    for entry in read_json(out / layout.SNAPSHOTS / layout.SNAPSHOT_INDEX):
        yield entry, out / layout.SNAPSHOTS / snapshot_name(entry["index"])


# ----------------------------------------------------------------------------------------------------------------
# Loading a pre-trained model


def _model_from_weights(path: Path, meta: dict[str, Any] | None,
                        record: tuple[dict[str, Any], Path] | None) -> tuple[nn.Module, dict[str, Any]]:
    """A model from a weights file, verified against `record` (its size and sha256, and the file that holds them);
    its config from the file's own metadata, else from `meta` (model.json)."""
    if record is not None:
        verify_file(path, record[0], "pretrain", record[1])
    tensors, file_meta = read_weights(path)
    if "config" in file_meta and "kind" in file_meta:
        kind, values = file_meta["kind"], json.loads(file_meta["config"])
        info = {"kind": kind, "config": values, "tokenizer_sha256": file_meta.get("tokenizer_sha256"),
                "step": int(file_meta.get("step", 0)), "tokens": int(file_meta.get("tokens", 0)),
                "numerics": json.loads(file_meta["numerics"]) if "numerics" in file_meta else None}
        if meta is not None and (meta.get("kind"), meta.get("config")) != (kind, values):
            diff = first_difference({"kind": meta.get("kind"), "config": meta.get("config")},
                                    {"kind": kind, "config": values})
            key, a, b = diff or ("config", "?", "?")
            raise CheckpointError(f"{path}: made with {key}={b!r}, but {layout.MODEL_JSON} beside it says {key}={a!r}")
    elif meta is not None:
        info = dict(meta)
    else:
        raise CheckpointError(f"{path}: no gpt1 metadata and no {layout.MODEL_JSON} beside it; cannot tell its config")
    model = build_model(info["kind"], config_from_dict(info["kind"], info["config"], str(path)))
    load_weights(model, tensors, str(path))
    return model.eval(), {**info, "source": str(path)}


def _weights_record(path: Path) -> tuple[dict[str, Any] | None, Path] | None:
    """Where a finished run recorded this weights file: model.json beside the model, or the snapshot index. None for
    a lone file (its own metadata is all there is)."""
    if path.name == layout.MODEL_WEIGHTS and (path.parent / layout.MODEL_JSON).is_file():
        return read_json(path.parent / layout.MODEL_JSON).get("weights"), path.parent / layout.MODEL_JSON
    index = path.parent / layout.SNAPSHOT_INDEX
    if path.parent.name == layout.SNAPSHOTS and index.is_file():
        entries = {snapshot_name(e["index"]): e for e in read_json(index)}
        return entries.get(path.name), index
    return None


def _sibling_meta(*candidates: Path) -> dict[str, Any] | None:
    for path in candidates:
        if path.is_file():
            return read_json(path)
    return None


def _load_hf_model(source: str | Path, path: Path) -> tuple[nn.Module, dict[str, Any]]:
    """A Hugging Face OpenAIGPT folder or hub id, converted to our GPT."""
    from gpt1.modeling.hf import load_hf  # transformers is slow to import; only this branch needs it

    try:
        model = load_hf(path if path.exists() else str(source))
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{source}: cannot load as a Hugging Face OpenAIGPT model ({err})") from err
    meta = {"kind": "gpt", "config": dataclasses.asdict(model.config), "tokenizer_sha256": None, "step": None,
            "tokens": None, "numerics": None, "source": str(source)}
    return model, meta


def load_pretrained(source: str | Path) -> tuple[nn.Module, dict[str, Any]]:
    """(model in eval mode, meta) from: a pretrain out_dir (model.safetensors + model.json), one weights file
    (a snapshot such as OUT/snapshots/03.safetensors), a Hugging Face directory (config.json), or a hub id.
    meta holds kind, config, tokenizer_sha256, step, tokens, numerics (gpt1.training.numerics' record) and source (None
    where unknown, e.g. for HF)."""
    path = Path(source)
    if path.is_dir() and (path / layout.MODEL_JSON).is_file():
        meta = read_json(path / layout.MODEL_JSON)
        return _model_from_weights(path / layout.MODEL_WEIGHTS, meta, (meta.get("weights"), path / layout.MODEL_JSON))
    if path.is_file() and path.suffix == ".safetensors":
        meta = _sibling_meta(path.parent / layout.MODEL_JSON, path.parent.parent / layout.MODEL_JSON)
        return _model_from_weights(path, meta, _weights_record(path))
    if path.exists() and not (path.is_dir() and (path / "config.json").is_file()):
        raise CheckpointError(f"{path}: not a pretrain folder ({layout.MODEL_JSON}), a .safetensors file or a "
                              f"Hugging Face folder (config.json)")
    if not path.exists() and is_local(str(source)):
        raise CheckpointError(f"{source}: no such file or folder; give a pretrain folder, a .safetensors snapshot, a "
                              f"Hugging Face folder or a hub id (org/name)")
    return _load_hf_model(source, path)


def is_local(source: str) -> bool:
    """A path rather than a hub id (`name` or `org/name`): there, or starting at /, . or ~, deeper than org/name, or
    with a weights or JSON file's suffix."""
    return (Path(source).exists() or source.startswith((".", "/", "~")) or source.count("/") > 1
            or source.endswith((".safetensors", ".json")))


__all__ = [
    "MODEL_KINDS",
    "CheckpointError",
    "build_model",
    "canonical_safetensors",
    "config_from_dict",
    "is_local",
    "iter_snapshots",
    "load_pretrained",
    "load_weights",
    "model_config",
    "read_weights",
    "save_weights",
    "snapshot_name",
    "unique_state",
    "weights_metadata",
]
