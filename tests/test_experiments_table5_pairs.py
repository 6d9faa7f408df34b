"""experiments/table5_pairs.py: the Avg test between any two of Table 5's rows, the report's own test where the
report has it (full against an ablation)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_report import cells, config, write_everything, write_table5_predictions

from experiments import table5_pairs
from gpt1.pipeline.plan import Plan
from gpt1.report.stage import render_report


def test_every_two_rows_get_the_reports_average_test(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results, out = tmp_path / "results", tmp_path / "out"
    cfg = config(seeds=[0])
    write_everything(results, cfg)
    write_table5_predictions(results, {"pretrained": 0.8, "scratch": 0.7, "lstm": 0.6})
    render_report(cfg, results, out)
    tests = {(a, b): t for a, b, t in table5_pairs.pair_tests(results, Plan.from_params(cfg.root))}
    assert len(tests) == 6  # 4 rows, every two
    full_lstm = tests[("Transformer w/ aux LM (full)", "LSTM w/ aux LM")]
    reported = cells(out, "table5")[("full vs lstm", "avg")]
    assert f"{full_lstm.difference:.4f}" == reported["value_exact"]
    assert f"{full_lstm.p_value:.4f}" == reported["p_value"]
    assert tests[("Transformer w/o pre-training", "LSTM w/ aux LM")].difference > 0  # 70% right against 60%
    assert tests[("Transformer w/ aux LM (full)", "Transformer w/o aux LM")] is None  # no_aux has no predictions
    table5_pairs.main([str(results), "--profile", "smoke"])
    printed = capsys.readouterr().out
    assert "| Transformer w/ aux LM (full) | Transformer w/o aux LM | not tested: a column has nothing to pair |" \
        in printed
    assert f"| Transformer w/ aux LM (full) | LSTM w/ aux LM | {full_lstm.difference:+.2f} |" in printed
