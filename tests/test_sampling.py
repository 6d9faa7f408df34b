"""`gpt1 sample` and gpt1.evaluation.sampling: seeded text from our checkpoints, their snapshots and HF exports."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from gpt1.evaluation.sampling import SampleSettings, generate, next_token
from gpt1.modeling.checkpoints import load_pretrained
from gpt1.modeling.model import GPT, LSTMLM, GPTConfig, LSTMConfig
from gpt1.pipeline.errors import UsageError
from tests.conftest import PARAMS, TinyData, gpt1_command


def tiny_gpt(vocab: int = 50, n_ctx: int = 8) -> GPT:
    torch.manual_seed(0)
    return GPT.from_config(GPTConfig(vocab_size=vocab, n_ctx=n_ctx, n_embd=16, n_layer=1, n_head=2)).eval()


def test_the_same_seed_gives_the_same_tokens_and_another_seed_others() -> None:
    model = tiny_gpt()
    draw = [generate(model, [1, 2, 3], SampleSettings(length=20, seed=s), vocab=50) for s in (7, 7, 8)]
    assert draw[0] == draw[1] and draw[0] != draw[2] and len(draw[0]) == 20


def test_greedy_follows_the_argmax_and_top_k_one_is_greedy() -> None:
    model = tiny_gpt()
    greedy = generate(model, [4], SampleSettings(length=5, temperature=0), vocab=50)
    ids = [4]
    for _ in range(5):
        logits, _ = model(torch.tensor([ids]))
        ids.append(int(logits[0, -1].argmax()))
    assert greedy == ids[1:]
    assert generate(model, [4], SampleSettings(length=5, top_k=1, seed=3), vocab=50) == greedy


def test_top_k_draws_only_among_the_k_most_likely() -> None:
    logits = torch.tensor([5.0, 4.0, 3.0, -1.0, -2.0])
    drawn = {next_token(logits, SampleSettings(top_k=2, temperature=5.0), torch.Generator().manual_seed(s))
             for s in range(200)}
    assert drawn == {0, 1}


def test_tokens_beyond_the_vocabulary_are_never_drawn() -> None:
    model = tiny_gpt(vocab=50)
    with torch.no_grad():
        model.lm_head.weight[40:] = 10.0  # rows the text tokens never reach: the fine-tuning specials, say
    drawn = generate(model, [1, 2], SampleSettings(length=50, top_k=None, temperature=2.0), vocab=40)
    assert max(drawn) < 40


def test_the_window_slides_past_the_context_and_a_recurrent_model_has_none() -> None:
    assert len(generate(tiny_gpt(n_ctx=8), list(range(12)), SampleSettings(length=10), vocab=50)) == 10
    lstm = LSTMLM.from_config(LSTMConfig(vocab_size=50, n_embd=8, hidden_size=8, n_layer=1))
    assert len(generate(lstm, [1, 2], SampleSettings(length=4), vocab=50)) == 4


def test_bad_settings_and_an_empty_prompt_are_refused_in_one_line() -> None:
    for bad, said in (({"length": 0}, "--length 0: give at least 1 token"),
                      ({"temperature": -1.0}, "--temperature -1.0: give 0 (greedy) or more"),
                      ({"top_k": -2}, "--top-k -2: give 0 (no cut) or more")):
        with pytest.raises(UsageError) as refused:
            SampleSettings(**bad)
        assert str(refused.value) == said
    with pytest.raises(UsageError, match="no tokens"):
        generate(tiny_gpt(), [], SampleSettings(), vocab=50)


def sample(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(gpt1_command("sample", "--params", str(PARAMS), "--profile", "smoke", *args),
                          env=env, capture_output=True, text=True, timeout=300)


def test_cli_samples_a_checkpoint_a_snapshot_and_its_hf_export_alike(
    trained_gpt: Path, tiny_data: TinyData, subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    from gpt1.modeling.hf import save_hf_dir

    common = ("--tokenizer", str(tiny_data.tokenizer), "--prompt", "Once upon a time", "--length", "12")
    first = sample(subprocess_env, "--model", str(trained_gpt), *common, "--seed", "5")
    again = sample(subprocess_env, "--model", str(trained_gpt), *common, "--seed", "5")
    other = sample(subprocess_env, "--model", str(trained_gpt), *common, "--seed", "6")
    assert first.returncode == 0, first.stderr
    assert first.stdout == again.stdout != other.stdout and first.stdout.strip()

    snapshot = sorted((trained_gpt / "snapshots").glob("*.safetensors"))[-1]  # the last: the final weights
    from_snapshot = sample(subprocess_env, "--model", str(snapshot), *common, "--seed", "5")
    assert from_snapshot.returncode == 0, from_snapshot.stderr
    assert from_snapshot.stdout == first.stdout

    model, _ = load_pretrained(trained_gpt)
    save_hf_dir(model, tmp_path / "hf")
    exported = sample(subprocess_env, "--model", str(tmp_path / "hf"), *common, "--seed", "5")
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout == first.stdout  # the same weights, converted: the same text


def test_cli_refuses_a_missing_tokenizer_and_a_foreign_one_in_one_line(
    trained_gpt: Path, subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    from gpt1.data.synthetic.corpus import synthetic_corpus
    from gpt1.data.tokenizer import train

    missing = sample(subprocess_env, "--model", str(trained_gpt))
    assert missing.returncode != 0 and "--tokenizer is required" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1

    train([d["text"] for d in synthetic_corpus(5, seed=9)], "fast", merges=50, limit_alphabet=60).save(tmp_path / "t")
    foreign = sample(subprocess_env, "--model", str(trained_gpt), "--tokenizer", str(tmp_path / "t"))
    assert foreign.returncode != 0 and "not the tokenizer" in foreign.stderr
    assert len(foreign.stderr.strip().splitlines()) == 1


def test_sample_is_no_stage_code_input() -> None:
    from gpt1.pipeline.codedeps import stage_code

    for stage in ("pretrain", "finetune", "report"):
        files = stage_code(stage)
        assert "gpt1/cli/main.py" in files and "gpt1/cli/commands.py" not in files, stage
        # the library is the report's too (its page of samples), the command's module no stage's
        assert ("gpt1/evaluation/sampling.py" in files) == (stage == "report"), stage
