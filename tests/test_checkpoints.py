"""gpt1.modeling.checkpoints: configs to and from JSON, canonical safetensors bytes, verified loading, snapshots, and
the import graph around it (checkpoints and hf never import the pretrain stage)."""

from __future__ import annotations

import ast
import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import REPO
from safetensors.torch import load_file, save_file

from gpt1.modeling.checkpoints import (
    build_model,
    config_from_dict,
    iter_snapshots,
    load_pretrained,
    load_weights,
    model_config,
    read_weights,
    save_weights,
    unique_state,
    weights_metadata,
)
from gpt1.modeling.model import GPT, LSTMLM
from gpt1.pipeline.errors import Gpt1Error

MODEL = {"n_ctx": 8, "n_embd": 16, "n_layer": 1, "n_head": 2, "lstm_hidden": 24, "dropout": 0.1}
LIBRARY = ("modeling.checkpoints", "training.runtime", "training.resume")


def weights(path: Path) -> dict[str, torch.Tensor]:
    return load_file(str(path))


# ------------------------------------------------------------------------------------------------ configs, files


@pytest.mark.parametrize("kind", ["gpt", "lstm"])
def test_config_round_trips_through_json(kind: str) -> None:
    config = model_config(kind, MODEL, vocab_size=50)
    values = json.loads(json.dumps(dataclasses.asdict(config)))
    assert config_from_dict(kind, values, "model.json") == config
    assert isinstance(build_model(kind, config), GPT if kind == "gpt" else LSTMLM)


def test_config_errors_name_the_field() -> None:
    with pytest.raises(Gpt1Error, match="--model 'rnn': valid kinds are gpt, lstm"):
        model_config("rnn", MODEL, 50)
    with pytest.raises(Gpt1Error, match=r"model\.json: unknown GPTConfig field 'width'"):
        config_from_dict("gpt", {"width": 3}, "model.json")
    with pytest.raises(Gpt1Error, match=r"x\.safetensors: kind 'rnn' is not one of gpt, lstm"):
        config_from_dict("rnn", {}, "x.safetensors")


def test_weights_round_trip_without_the_tied_copy(tmp_path: Path) -> None:
    torch.manual_seed(0)
    config = model_config("gpt", MODEL, 50)
    model = build_model("gpt", config)
    assert "lm_head.weight" not in unique_state(model)  # tied to tokens_embed.weight: saved once
    meta = weights_metadata("gpt", config, "f" * 64, step=3, tokens=24)
    save_weights(model, tmp_path / "w.safetensors", meta)
    tensors, file_meta = read_weights(tmp_path / "w.safetensors")
    assert file_meta == meta
    other = build_model("gpt", config)
    load_weights(other, tensors, "w")
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), other.state_dict().values(),
                                                 strict=True))
    assert other.lm_head.weight is other.tokens_embed.weight
    with pytest.raises(Gpt1Error, match=r"w: weights do not match .*h\.0\.ln_1\.weight is missing"):
        load_weights(other, {k: v for k, v in tensors.items() if k != "h.0.ln_1.weight"}, "w")
    with pytest.raises(Gpt1Error, match=r"w: weights do not match .*unexpected tensor extra\.weight"):
        load_weights(other, {**tensors, "extra.weight": torch.zeros(1)}, "w")  # never dropped without a word


def test_a_lone_weights_file_is_read_by_its_own_metadata(tmp_path: Path) -> None:
    """A snapshot copied away from its run (no model.json near it): the file's metadata gives config and step."""
    torch.manual_seed(0)
    config = model_config("gpt", MODEL, 50)
    model = build_model("gpt", config)
    save_weights(model, tmp_path / "03.safetensors", weights_metadata("gpt", config, "f" * 64, step=7, tokens=56))
    loaded, meta = load_pretrained(tmp_path / "03.safetensors")
    assert (meta["kind"], meta["step"], meta["tokens"], meta["tokenizer_sha256"]) == ("gpt", 7, 56, "f" * 64)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), loaded.state_dict().values(),
                                                 strict=True))


def test_weights_header_is_canonical(tmp_path: Path) -> None:
    model = build_model("lstm", model_config("lstm", MODEL, 50))
    save_weights(model, tmp_path / "w.safetensors", {"z": "1", "a": "2"})
    data = (tmp_path / "w.safetensors").read_bytes()
    size = int.from_bytes(data[:8], "little")
    header = data[8 : 8 + size]
    assert size % 8 == 0 and header.rstrip(b" ") == json.dumps(json.loads(header), sort_keys=True,
                                                                separators=(",", ":")).encode()


def test_truncated_weights_are_named(tmp_path: Path) -> None:
    (tmp_path / "w.safetensors").write_bytes(b"\x10\x00")
    with pytest.raises(Gpt1Error, match=r"w\.safetensors: not a readable safetensors file"):
        read_weights(tmp_path / "w.safetensors")


# ------------------------------------------------------------------------------------------------ a finished run


@pytest.fixture
def finished_copy(trained_gpt: Path, tmp_path: Path) -> Path:
    """A writable copy of a finished run."""
    return Path(shutil.copytree(trained_gpt, tmp_path / "finished"))


def test_load_pretrained_from_folder_and_snapshot(trained_gpt: Path, tmp_path: Path) -> None:
    model, meta = load_pretrained(trained_gpt)
    assert isinstance(model, GPT) and meta["step"] == 12 and not model.training
    first, snap_meta = load_pretrained(trained_gpt / "snapshots" / "00.safetensors")
    assert snap_meta["step"] == 1 and snap_meta["tokens"] == 64
    saved = weights(trained_gpt / "snapshots" / "00.safetensors")
    assert torch.equal(first.h[0].attn.c_attn.weight, saved["h.0.attn.c_attn.weight"])
    assert first.lm_head.weight is first.tokens_embed.weight  # re-tied after loading
    # A file without our metadata, whose shapes disagree with the model.json beside it: the tensor is named.
    bad = tmp_path / "run"
    (bad / "snapshots").mkdir(parents=True)
    shutil.copy(trained_gpt / "model.json", bad / "model.json")
    tensors = dict(saved, **{"h.0.mlp.c_fc.weight": torch.zeros(3, 16)})
    save_file(tensors, str(bad / "snapshots" / "00.safetensors"))
    with pytest.raises(Gpt1Error, match=r"h\.0\.mlp\.c_fc\.weight has shape \(3, 16\), the config gives \(64, 16\)"):
        load_pretrained(bad / "snapshots" / "00.safetensors")
    with pytest.raises(Gpt1Error, match="not a pretrain folder"):
        load_pretrained(tmp_path)


def test_snapshots_are_listed_in_order(trained_gpt: Path) -> None:
    listed = list(iter_snapshots(trained_gpt))
    assert [entry["step"] for entry, _ in listed] == [1, 3, 12]
    assert [path.name for _, path in listed] == ["00.safetensors", "01.safetensors", "02.safetensors"]


def test_weights_with_a_flipped_bit_are_refused(finished_copy: Path) -> None:
    for weights_file in (finished_copy / "model.safetensors", finished_copy / "snapshots" / "01.safetensors"):
        data = bytearray(weights_file.read_bytes())
        data[-5] ^= 0x10  # inside the last tensor: still a readable safetensors file
        weights_file.write_bytes(bytes(data))
        with pytest.raises(Gpt1Error, match=r"sha256 differs from the one .* records.*gpt1 pretrain"):
            load_pretrained(weights_file if "snapshots" in str(weights_file) else finished_copy)


def test_model_json_that_disagrees_with_the_weights_is_named(finished_copy: Path) -> None:
    meta = json.loads((finished_copy / "model.json").read_text())
    meta["config"]["n_embd"] = 32
    (finished_copy / "model.json").write_text(json.dumps(meta))
    with pytest.raises(Gpt1Error, match=r"made with config\.n_embd=16, but model\.json beside it says "
                                        r"config\.n_embd=32"):
        load_pretrained(finished_copy / "snapshots" / "00.safetensors")


def test_weights_files_are_the_same_bytes_in_every_process(tmp_path: Path) -> None:
    """safetensors writes its metadata from a hash map; save_weights writes a canonical header."""
    code = ("import sys, torch; from gpt1.modeling.model import GPT, GPTConfig; "
            "from gpt1.modeling.checkpoints import save_weights; "
            "torch.manual_seed(0); save_weights(GPT(GPTConfig(vocab_size=50, n_ctx=8, n_embd=16, n_layer=1, "
            "n_head=2)), sys.argv[1], {'kind': 'gpt', 'step': '3', 'tokens': '9', 'config': '{}', 'z': 'a'})")
    files = [tmp_path / f"{i}.safetensors" for i in range(3)]
    for path in files:
        subprocess.run([sys.executable, "-c", code, str(path)], check=True)
    assert len({p.read_bytes() for p in files}) == 1
    assert load_file(str(files[0]))["tokens_embed.weight"].shape == (50, 16)


# ------------------------------------------------------------------------------------------------ import graph


def imports(module: str) -> set[str]:
    """Every module `module` (`modeling.checkpoints`: the path below gpt1/) imports, at the top or inside a function,
    as written (gpt1.pipeline.files, mlflow, ...); `from gpt1.pipeline import files` gives gpt1.pipeline and
    gpt1.pipeline.files."""
    tree = ast.parse((REPO / "gpt1").joinpath(*module.split(".")).with_suffix(".py").read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return found


def gpt1_imports(module: str) -> set[str]:
    """The package's modules and folders `module` names in an import: `pipeline`, `files`, ..."""
    return {part for name in imports(module) if name.startswith("gpt1.") for part in name.split(".")[1:]}


def test_library_modules_import_no_stage_no_mlflow_and_no_config() -> None:
    stages = {"stages", "pretrain", "finetune", "zeroshot", "layers", "report", "tracking", "config", "cli"}
    for module in LIBRARY:
        assert gpt1_imports(module).isdisjoint(stages), module
        assert not any(name.split(".")[0] == "mlflow" for name in imports(module)), module
    assert gpt1_imports("modeling.checkpoints").isdisjoint({"resume", "runtime"})  # the lowest of the three
    assert not {"stages", "pretrain"} & gpt1_imports("modeling.hf")


def test_importing_hf_or_checkpoints_loads_no_stage() -> None:
    code = ("import sys, gpt1.modeling.checkpoints; assert 'gpt1.modeling.hf' not in sys.modules; "
            "import gpt1.modeling.hf, gpt1.training.resume, gpt1.training.runtime; "
            "stages = {'gpt1.stages.pretrain', 'gpt1.stages.finetune', 'gpt1.stages.zeroshot', "
            "'gpt1.pipeline.tracking'}; "
            "print(sorted(stages & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
