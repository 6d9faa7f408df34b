"""The pinned mode (gpt1.training.numerics): the same bytes whatever instruction set the host offers and whatever
threads the job is given; outputs record the pinned settings, MLflow the machine; a stage says when its input was
computed otherwise."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest
from conftest import gpt1_command

from gpt1.pipeline.config import load_config
from gpt1.pipeline.errors import ConfigError
from gpt1.training import cpu_matmul, numerics
from gpt1.training.numerics import PINNED_ENV, Numerics, NumericsError

REPO = Path(__file__).resolve().parents[1]
PRODUCTS = f"{cpu_matmul.blas()} Haswell"
PINNED = Numerics("cpu", "avx2", 1, "2.13.0", PRODUCTS)

# The instruction sets this machine can pretend to be limited to: an AVX2 host, an AVX-512 host without bf16, and
# one with AVX-512 and bf16 (the capped libraries' variables, as the issue that asked for the pin measured them). A
# vendor's dispatch cannot be pretended on one host: tests/test_cpu_matmul.py checks the probe's hashes instead.
HOSTS = {
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "AVX2",
             "OPENBLAS_CORETYPE": "Zen"},
    "avx512": {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE", "MKL_CBWR": "AVX512",
               "OPENBLAS_CORETYPE": "SkylakeX"},
    "avx512_bf16": {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16", "MKL_CBWR": "AVX512",
                    "OPENBLAS_CORETYPE": "Cooperlake"},
}


def test_record_round_trip_and_description():
    assert Numerics.from_json(PINNED.to_json(), "x") == PINNED and PINNED.pinned
    assert PINNED.describe() == f"cpu pinned to avx2 with 1 thread, products by {PRODUCTS}, torch 2.13.0"
    assert Numerics.from_json({"device": "cpu", "isa": "avx2", "threads": 1, "torch": "2.13.0"}, "x").matmul is None
    host = Numerics("cpu", None, None, "2.13.0")
    assert not host.pinned and "unpinned" in host.describe()
    assert not Numerics("cuda", None, None, "2.13.0").pinned
    assert Numerics.from_json(None, "x") is None
    with pytest.raises(NumericsError, match=r"model.json: its numerics record .* lacks 'torch'"):
        Numerics.from_json({"device": "cpu", "isa": None, "threads": None}, "model.json")


def test_upstream_note_only_when_they_differ():
    assert numerics.upstream_note(PINNED, PINNED, "pretrain/gpt") is None
    other = Numerics("cpu", None, None, "2.13.0")
    line = numerics.upstream_note(PINNED, other, "pretrain/gpt")
    assert line.startswith("note: pretrain/gpt was made with cpu unpinned") and "\n" not in line
    assert "an older run that recorded no numerics" in numerics.upstream_note(PINNED, None, "pretrain/gpt")


def test_pinning_after_torch_loaded_is_refused(monkeypatch):
    import torch  # noqa: F401  (loaded, as in any test process)

    monkeypatch.delenv("ATEN_CPU_CAPABILITY")
    with pytest.raises(NumericsError, match="torch was imported before the kernels could be pinned"):
        numerics.pin_environment()


def test_pinned_process_in_effect_and_machine_tags():
    """This test process was pinned before torch loaded (conftest); with oneDNN off it is pinned in effect."""
    import torch

    before = torch.backends.mkldnn.enabled, torch.get_num_threads()
    try:
        numerics.apply(True, 1)
        assert numerics.in_effect("cpu") == Numerics("cpu", "avx2", 1, numerics.torch_version(), PRODUCTS)
        torch.backends.mkldnn.enabled = True
        assert not numerics.in_effect("cpu").pinned  # one pin missing: recorded as unpinned
        torch.backends.mkldnn.enabled = False
        cpu_matmul.disable()
        assert not numerics.in_effect("cpu").pinned  # products back on MKL: unpinned
    finally:
        cpu_matmul.enable()
        torch.backends.mkldnn.enabled, _ = before
        torch.set_num_threads(before[1])
    tags = numerics.machine_tags()
    assert tags["gpt1.machine.kernels"] == "AVX2" and tags["gpt1.machine.pinned_env"] == "true"
    assert tags["gpt1.machine.processor"] and "gpt1.machine.threads" in tags and "avx2" in tags["gpt1.machine.isa"]


@pytest.mark.parametrize(("override", "message"), [
    ("pretrain.precision=bf16", "profiles.smoke.pretrain.precision: bf16 with cpu.pinned: true has no AVX2 kernel"),
    ("finetune.precision=bf16", "profiles.smoke.finetune.precision: bf16 with cpu.pinned: true"),
    ("cpu.threads=null", "profiles.smoke.cpu.threads: null with cpu.pinned: true"),
])  # fmt: skip
def test_pinned_profile_refuses_what_it_cannot_pin(override, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        load_config(REPO / "params.yaml", "smoke", [override])
    load_config(REPO / "params.yaml", "smoke", [override, "cpu.pinned=false"])  # unpinned, it is a valid profile


# ----------------------------------------------------------------------------------------------------------------
# The bytes


def _digest(*paths: Path) -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in paths)).hexdigest()


def _pretrain_and_finetune(root: Path, env: dict[str, str], data, *settings: str) -> dict[str, str]:
    """The smoke profile's pre-training on the tiny ids, then one fine-tuning job from it (RTE, entailment), in
    `python -m gpt1` children under `env`: sha256 of the weights, and of the job's metrics and predictions."""
    sets = [arg for s in settings for arg in ("--set", s)]
    common = ["--params", str(REPO / "params.yaml"), "--profile", "smoke", *sets]
    # Relative folders: the outputs record where their inputs were, which must not differ between the cases.
    for args in (["pretrain", "--ids", str(data.ids), "--tokenizer", str(data.tokenizer), "--out", "pretrain"],
                 ["finetune", "--task", "rte", "--variant", "pretrained", "--seed", "0", "--pretrained",
                  "pretrain", "--tokenizer", str(data.tokenizer), "--out", "finetune"]):
        done = subprocess.run(gpt1_command(*args[:1], *common, *args[1:]), env=env, capture_output=True, text=True,
                              cwd=root)
        assert done.returncode == 0, done.stderr[-2000:]
    return {"weights": _digest(root / "pretrain" / "model.safetensors"),
            "finetune": _digest(root / "finetune" / "metrics.json", root / "finetune" / "predictions.jsonl")}


# The processor flags a pretend host's unpinned kernels need (the pinned mode caps them at AVX2 whatever is asked)
NEEDS = {"avx2": {"avx2"}, "avx512": {"avx512f"}, "avx512_bf16": {"avx512f", "avx512_bf16"}}


# Each pretend host and each core count, not every pair (the pin sets both whatever is asked): CI time
CASES = [("avx2", 1), ("avx2", 2), ("avx512", 2), ("avx512_bf16", 1)]


def _can_pretend(host: str) -> bool:
    return NEEDS[host] <= numerics._cpuinfo()[1]


def _host_env(subprocess_env: dict[str, str], host: str, threads: int) -> dict[str, str]:
    """A child's environment on a pretend host: no pin inherited, the host's caps, and the cores a scheduler gives."""
    env = {k: v for k, v in subprocess_env.items() if k not in PINNED_ENV and k not in ("GPT1_WORKERS",
                                                                                       "MKL_NUM_THREADS")}
    return {**env, **HOSTS[host], "OMP_NUM_THREADS": str(threads)}


@pytest.mark.slow
def test_the_same_bytes_under_every_instruction_set_and_thread_count(tiny_data, subprocess_env, tmp_path):
    """The pinned smoke profile: pre-training and a fine-tuning job give the same bytes on an AVX2 host, an AVX-512
    host and an AVX-512 host with bf16 (as far as this machine can pretend to be each), given 1 or 2 cores (CASES);
    each output records the pinned settings, and none names the processor."""
    digests = {}
    for host, threads in CASES:
        root = tmp_path / f"{host}-{threads}"
        root.mkdir()
        digests[host, threads] = _pretrain_and_finetune(root, _host_env(subprocess_env, host, threads), tiny_data)
    first = next(iter(digests.values()))
    differing = {case: d for case, d in digests.items() if d != first}
    assert differing == {}, f"other bytes than {first} under {sorted(differing)}"
    record = json.loads((tmp_path / "avx2-1" / "pretrain" / "model.json").read_text())["numerics"]
    assert record == {"device": "cpu", "isa": "avx2", "threads": 1, "torch": numerics.torch_version(),
                      "matmul": PRODUCTS}
    metrics = json.loads((tmp_path / "avx2-1" / "finetune" / "metrics.json").read_text())
    assert metrics["numerics"] == record
    processor = numerics.machine_tags()["gpt1.machine.processor"]
    # The stages' outputs; not MLflow's store, which names the machine on purpose (its gpt1.machine tags) and, where
    # this test's stage made the worker's experiment, keeps the logged models' copies of gpt1's source under the
    # stage's folder (numerics.py's docstring names processors)
    outputs = [p for case in digests for stage in ("pretrain", "finetune")
               for p in (tmp_path / f"{case[0]}-{case[1]}" / stage).rglob("*") if p.is_file()]
    assert len(outputs) > 10 and not [p for p in outputs if processor.encode() in p.read_bytes()]


@pytest.mark.slow
def test_unpinned_the_host_decides_the_bytes(tiny_data, subprocess_env, tmp_path):
    """The control that gives the test above its teeth: with the pin off, the pretend hosts really compute other
    bytes (AVX2 against AVX-512 with bf16 kernels, where this processor has them; 1 against 2 threads), and a
    fine-tuning job pinned on top of such a model says so in one line."""
    off = "cpu.pinned=false"
    cases = {"avx2": ("avx2", 1), "threads": ("avx2", 2)}
    if _can_pretend("avx512_bf16"):  # unpinned, the kernels are the caps': an AVX2-only host cannot run AVX-512 ones
        cases["bf16"] = ("avx512_bf16", 1)
    runs = {}
    for case, (host, threads) in cases.items():
        (tmp_path / case).mkdir()
        runs[case] = _pretrain_and_finetune(tmp_path / case, _host_env(subprocess_env, host, threads), tiny_data, off)
    assert "bf16" not in runs or runs["avx2"]["weights"] != runs["bf16"]["weights"]
    assert runs["avx2"]["weights"] != runs["threads"]["weights"]
    record = json.loads((tmp_path / "avx2" / "pretrain" / "model.json").read_text())["numerics"]
    assert record == {"device": "cpu", "isa": None, "threads": None, "torch": numerics.torch_version(),
                      "matmul": None}
    done = subprocess.run(gpt1_command("finetune", "--params", str(REPO / "params.yaml"), "--profile", "smoke",
                                       "--task", "rte", "--variant", "pretrained", "--seed", "0", "--pretrained",
                                       str(tmp_path / "avx2" / "pretrain"), "--tokenizer", str(tiny_data.tokenizer),
                                       "--out", str(tmp_path / "pinned-on-unpinned")),
                          env={**subprocess_env, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    notes = [line for line in done.stdout.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "was made with cpu unpinned" in notes[0] and "pinned to avx2 with 1 thread" in notes[0]



def test_the_report_says_when_its_runs_mix_numerics():
    from types import SimpleNamespace

    from gpt1.report.inputs import Finetuned, mixed_numerics

    pinned, host = PINNED.describe(), Numerics("cpu", None, None, "2.13.0").describe()
    same = Finetuned({("rte", "pretrained"): {0: SimpleNamespace(numerics=pinned)},
                      ("rte", "scratch"): {0: SimpleNamespace(numerics=pinned)}})
    assert mixed_numerics(same) is None
    mixed = Finetuned({("rte", "pretrained"): {0: SimpleNamespace(numerics=pinned), 1: SimpleNamespace(numerics=host)},
                       ("rte", "scratch"): {0: SimpleNamespace(numerics=pinned)}})
    assert mixed_numerics(mixed) == f"note: the tables mix runs computed with {pinned} (2 runs); {host} (1 runs)"
