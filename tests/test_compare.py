"""`gpt1 compare`: two results trees cell by cell, on the smoke profile, with a change that moves results beyond noise
and one that does not; the verdict logic (Holm, seeds) on its own."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pandas as pd
import pytest

from gpt1.report.compare import Comparison, _seed_test, compare_trees, holm, render, verdicts
from tests.conftest import TinyData, gpt1_command, tiny_config

TASK = "sst2"
SEEDS = (0, 1, 2)
# A job that learns the smoke SST-2's planted sentiment words (~95% on its 64 validation sentences): every training
# example, 30 epochs at lr 2e-3
JOB = ["finetune.max_train_examples=400", "finetune.max_eval_examples=96", "finetune.epochs=30", "finetune.lr=2.0e-3"]


def results_tree(root: Path, model: Path, tokenizer: Path, *overrides: str) -> Path:
    """finetune/sst2/pretrained/<seed>/ for SEEDS, as the pipeline lays it out."""
    from gpt1.stages.finetune import finetune_stage

    for seed in SEEDS:
        finetune_stage(tiny_config(*JOB, *overrides), TASK, "pretrained", seed, model, tokenizer,
                       root / "finetune" / TASK / "pretrained" / str(seed))
    return root


def small_gpt(tiny_data: TinyData, out: Path) -> Path:
    """A 2-layer, 32-wide GPT on 64-token windows (whole smoke SST-2 sentences), saved as `gpt1 pretrain` saves."""
    import torch

    from gpt1.data.tokenizer import GPT1Tokenizer
    from gpt1.modeling.model import GPT, GPTConfig
    from tests.test_finetune import save_pretrained

    tok = GPT1Tokenizer.load(tiny_data.tokenizer)
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tok.base_vocab_size, n_ctx=64, n_embd=32, n_layer=2, n_head=2))
    return save_pretrained(model, "gpt", tok, out)


@pytest.fixture(scope="module")
def trees(tiny_data: TinyData, tmp_path_factory: pytest.TempPathFactory, new_store) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("compare")
    model, tok = small_gpt(tiny_data, root / "gpt"), tiny_data.tokenizer
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", new_store(root))
        return {
            "base": results_tree(root / "base", model, tok),
            # no learning at all: the classifier stays where it was initialised
            "frozen": results_tree(root / "frozen", model, tok, "finetune.lr=1.0e-12"),
            # half the learning rate: other weights, a few other predictions (2 of 64 on seed 0), the same accuracy
            "nudged": results_tree(root / "nudged", model, tok, "finetune.lr=1.0e-3"),
            # a setting of another stage: nothing the job computes changes
            "same": results_tree(root / "same", model, tok, "zeroshot.seed=7"),
        }


def only_cell(comparison) -> pd.Series:
    assert len(comparison.cells) == 1
    return comparison.cells.iloc[0]


def test_a_change_that_moves_results_is_changed_beyond_noise(trees: dict[str, Path]) -> None:
    found = compare_trees(trees["frozen"], trees["base"])
    cell = only_cell(found)
    assert cell["verdict"] == "changed", cell.to_dict()
    assert cell["seeds"] == 3 and cell["examples"] == 64 and cell["B - A"] > 0  # smoke SST-2: 64, each scored 3 times
    assert "recipe.lr" in set(found.settings["setting"])


def test_a_change_within_noise_is_not_called_a_change(trees: dict[str, Path]) -> None:
    found = compare_trees(trees["base"], trees["nudged"])
    cell = only_cell(found)
    assert cell["verdict"] == "within noise", cell.to_dict()
    assert list(found.settings["setting"]) == ["recipe.lr"]
    assert list(found.settings["A"]) == ["0.002"] and list(found.settings["B"]) == ["0.001"]
    assert not cell["same predictions"] and cell["p paired"] > 0.05


def test_the_same_computation_is_the_same_bytes(trees: dict[str, Path]) -> None:
    found = compare_trees(trees["base"], trees["same"])
    assert only_cell(found)["verdict"] == "same predictions" and found.settings.empty
    written = sorted(p.relative_to(trees["base"]) for p in trees["base"].rglob("predictions.jsonl"))
    assert written and written == sorted(p.relative_to(trees["same"]) for p in trees["same"].rglob("predictions.jsonl"))
    assert all((trees["base"] / p).read_bytes() == (trees["same"] / p).read_bytes() for p in written)


def test_cli_writes_the_tables_and_refuses_a_tree_without_results(
    trees: dict[str, Path], subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    # From a folder with no params.yaml: the command needs none, it reads the records
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run(gpt1_command("compare", str(trees["frozen"]), str(trees["base"]), "--out", str(tmp_path)),
                          env=subprocess_env, capture_output=True, text=True, timeout=300, cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    assert "1 cells: 1 changed" in done.stdout and "| recipe.lr" in done.stdout
    assert {p.name for p in tmp_path.iterdir()} == {"compare.md", "compare.html", "compare.tex", "cells.csv",
                                                    "settings.csv", "elsewhere"}
    assert "<table" in (tmp_path / "compare.html").read_text()

    empty = subprocess.run(gpt1_command("compare", str(tmp_path), str(trees["base"])), env=subprocess_env,
                           capture_output=True, text=True, timeout=300)
    assert empty.returncode != 0 and "no fine-tuning results" in empty.stderr
    assert len(empty.stderr.strip().splitlines()) == 1


def test_predictions_not_those_their_metrics_record_are_refused(trees: dict[str, Path], tmp_path: Path) -> None:
    """Predictions are checked against the size and sha256 in the metrics.json beside them before any test uses them."""
    import shutil

    from gpt1.pipeline.errors import ReportError

    tree = Path(shutil.copytree(trees["base"], tmp_path / "tampered"))
    predictions = tree / "finetune" / TASK / "pretrained" / "1" / "predictions.jsonl"
    lines = predictions.read_text().splitlines(keepends=True)
    predictions.write_text("".join(lines[:-1]))  # one prediction lost
    with pytest.raises(ReportError, match=r"1/predictions\.jsonl: \d+ bytes, but .*metrics\.json records \d+"):
        compare_trees(trees["base"], tree)
    predictions.write_text("".join(lines).replace('"label": 1', '"label": 0', 1))  # same size, other bytes
    with pytest.raises(ReportError, match=r"predictions\.jsonl: sha256 differs"):
        compare_trees(trees["base"], tree)


def test_holm_adjusts_step_down_and_stays_monotone() -> None:
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5]) == [0.5]


@pytest.mark.parametrize(("a", "b", "p"), [([70.0, 71.0], [70.5, 71.5], 0.5), ([1.0, 2.0, 3.0], [2.0, 3.0, 4.0], 0.25),
                                          ([1.0, 2.0], [1.0, 2.0], 1.0), ([1.0], [2.0], None)])
def test_seeds_that_all_differ_alike_are_no_proof_beyond_what_their_number_allows(a, b, p) -> None:
    """Equal differences leave the t-test undefined (it used to say p = 0, 'changed' on two seeds): the sign-flip
    test's 2 / 2**n instead."""
    assert _seed_test(a, b) == (None if p is None else pytest.approx(p))


def test_the_seed_test_is_the_paired_t_test_where_the_differences_vary() -> None:
    from scipy import stats

    a, b = [70.0, 72.0, 71.0], [73.0, 74.0, 75.5]
    assert _seed_test(a, b) == pytest.approx(stats.ttest_rel(b, a).pvalue)


def test_a_cell_changes_only_when_every_test_it_has_agrees() -> None:
    cells = pd.DataFrame([
        {"p paired": 0.001, "p seeds": 0.40, "same predictions": False},  # the seeds' spread explains it
        {"p paired": 0.001, "p seeds": 0.001, "same predictions": False},
        {"p paired": 0.001, "p seeds": None, "same predictions": False},  # one seed: the paired test alone
        {"p paired": 1.0, "p seeds": 1.0, "same predictions": True},
    ])  # fmt: skip
    assert list(verdicts(cells, 0.05)["verdict"]) == ["within noise", "changed", "changed", "same predictions"]


def test_the_tables_render_through_pandas_with_a_changed_verdict_in_bold() -> None:
    cells = verdicts(pd.DataFrame([
        {"task": "sst2", "variant": "pretrained", "report": "sst2", "metric": "accuracy", "seeds": 3, "A": 50.0,
         "B": 90.0, "B - A": 40.0, "p paired": 0.001, "examples": 192, "p seeds": 0.01, "same predictions": False},
        {"task": "rte", "variant": "lstm", "report": "rte", "metric": "accuracy", "seeds": 1, "A": 50.0, "B": 51.0,
         "B - A": 1.0, "p paired": 0.6, "examples": 40, "p seeds": None, "same predictions": False},
        {"task": "cola", "variant": "no_aux", "report": "", "metric": "", "verdict": "only in A"},
    ]), 0.05)  # fmt: skip
    settings = pd.DataFrame([{"setting": "recipe.lr", "A": "0.002", "B": "0.001", "where": "sst2/pretrained"}])
    files = render(Comparison(cells, settings, (120.5, 110.25), 0.05), "results/a_b", "rev:HEAD")
    md = files["compare.md"]
    assert "**3 cells: 1 changed, 1 only in A, 1 within noise (Holm-adjusted, alpha 0.05)**" in md
    assert ("| sst2   | pretrained | sst2     | accuracy |       3 | 50.0 | 90.0 |   +40.0 |        192 | **changed**  "
            "|             0.002 |             0.01 |") in md  # texts left, numbers right
    assert "| cola   | no_aux     |" in md and "Validation perplexity of the GPT: A 120.50, B 110.25." in md
    tex = files["compare.tex"]
    assert r"\begin{tabular}{llllrrrrrlrr}" in tex and r"\toprule" in tex and r"\bottomrule" in tex
    assert r"accuracy & 3 & 50.0 & 90.0 & +40.0 & 192 & \textbf{changed} & 0.002 & 0.01" in tex
    assert r"A: results/a\_b \\" in tex and r"recipe.lr & 0.002 & 0.001 & sst2/pretrained \\" in tex
    page = files["compare.html"]
    assert page.startswith("<!DOCTYPE html>") and '<meta charset="utf-8">' in page
    assert 'col9 significant" >changed</td>' in page and page.count("significant\" >") == 1
    assert "<td class=\"data row0 col0\" >recipe.lr</td>" in page
    no_setting = render(Comparison(cells, settings.iloc[:0], (None, None), 0.05), "a", "b")
    assert "(no setting differs in the records)" in no_setting["compare.md"]
    assert "perplexity" not in no_setting["compare.md"]
    assert "<table id=\"T_settings\">" not in no_setting["compare.html"]


def test_a_revision_is_read_through_the_dvc_of_this_python_and_its_error_named(tmp_path: Path, monkeypatch) -> None:
    """`.venv/bin/python -m gpt1 compare rev:...` with nothing activated: no `dvc` on PATH (once, 'dvc: No such file
    or directory; check the path'); DVC's own ERROR line is what the message quotes, not its support banner."""
    import shutil

    from gpt1.cli.commands import materialize
    from gpt1.pipeline.errors import Gpt1Error

    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "git").symlink_to(shutil.which("git"))  # git alone on PATH: as a shell with nothing activated
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.chdir(tmp_path)  # no git, no DVC repository here
    with pytest.raises(Gpt1Error, match=r"^rev:nope: cannot read results/default of that revision from DVC \(ERROR: "):
        materialize("rev:nope", "results/default", tmp_path)
    assert materialize("results/a", "results/default", tmp_path) == Path("results/a")


def test_table5s_average_is_compared_where_both_trees_hold_its_eight_columns(tmp_path: Path) -> None:
    """A row per variant for Table 5's Avg: A and B the report's own Avg cells, B - A tested on the predictions of
    all 8 columns at once (here the same metrics records, but B's predictions right 60% of the time, A's 80%)."""
    from test_report import cells, config, write_everything, write_table5_predictions

    from gpt1.report.compare import AVERAGE_TASK
    from gpt1.report.stage import render_report

    cfg = config(seeds=[0])
    for name, right in (("a", 0.8), ("b", 0.6)):
        write_everything(tmp_path / name, cfg)
        write_table5_predictions(tmp_path / name, {"pretrained": right})
    render_report(cfg, tmp_path / "a", tmp_path / "report")
    table = compare_trees(tmp_path / "a", tmp_path / "b").cells.set_index(["task", "variant"])
    full = table.loc[(AVERAGE_TASK, "pretrained")]
    reported = cells(tmp_path / "report", "table5")[("ours: Transformer w/ aux LM (full)", "avg")]
    assert full["A"] == full["B"] == pytest.approx(float(reported["value_exact"]), abs=1e-3)
    assert full["examples"] == 30 * 9 and full["p paired"] < 0.01 and full["verdict"] == "changed"
    assert table.loc[(AVERAGE_TASK, "lstm"), "verdict"] == "untested (no predictions)"  # no predictions written
    assert len(table.loc[AVERAGE_TASK]) == 4  # a row for each of Table 5's 4 rows


def heldout_tree(root: Path, nll: list[float], tokens: list[int]) -> Path:
    """analyses/zeroshot/gpt/heldout.csv of two points (the first is not compared), sealed as the stage seals it."""
    from tests.test_report import HELDOUT_FIELDS, write_csv

    rows = [{"model": "gpt", "step": step, "tokens": 8 * step, "article": i, "scored_tokens": n, "words": n // 2,
             "nll": value * (3 if step == 1 else 1)}
            for step in (1, 50) for i, (n, value) in enumerate(zip(tokens, nll, strict=True))]
    write_csv(root / "analyses" / "zeroshot" / "gpt" / "heldout.csv", list(HELDOUT_FIELDS), rows, "zeroshot.json")
    return root


def test_the_gpts_held_out_perplexity_is_compared_paired_by_article(tmp_path: Path) -> None:
    from gpt1.report.compare import heldout_comparison

    tokens = [100, 400, 250, 900]
    hard = [4.0, 5.0, 4.5, 6.0]  # the articles differ far more than the two runs do
    a = heldout_tree(tmp_path / "a", [n * h for n, h in zip(tokens, hard, strict=True)], tokens)
    b = heldout_tree(tmp_path / "b", [n * (h - 0.1) for n, h in zip(tokens, hard, strict=True)], tokens)
    line = heldout_comparison(a, b)
    assert line.startswith("Held-out perplexity of the GPT (WikiText-2): A ")
    assert "B - A -0.1000 nats a token, SE 0.0000 paired by article, p 0.001." in line
    other = heldout_tree(tmp_path / "c", [n * 4.0 for n in [120, 380, 250, 900]], [120, 380, 250, 900])
    assert "no paired test" in heldout_comparison(a, other) and "per WikiText-2 word" in heldout_comparison(a, other)
    assert heldout_comparison(a, tmp_path / "none") is None
    cells = pd.DataFrame([{"task": "sst2", "verdict": "within noise"}])
    md = render(Comparison(cells, pd.DataFrame(), (None, None), 0.05, line), "a", "b")["compare.md"]
    assert line in md
