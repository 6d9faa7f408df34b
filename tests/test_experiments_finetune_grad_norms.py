"""experiments/finetune_grad_norms.py: the norm its hook records is clip_grad_norm_'s, and the summary counts what a
clip would touch."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

from experiments import finetune_grad_norms


def test_the_hook_records_the_norm_clip_grad_norm_would_clip_before_every_step() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    norms: list[float] = []
    handle = register_optimizer_step_pre_hook(finetune_grad_norms.recording(norms))
    try:
        wanted = []
        for _ in range(3):
            model(torch.randn(5, 4)).pow(2).sum().backward()
            wanted.append(nn.utils.get_total_norm([p.grad for p in model.parameters()]).item())
            optimizer.step()
            optimizer.zero_grad()
    finally:
        handle.remove()
    assert norms == pytest.approx(wanted, rel=1e-6)


def test_the_summary_counts_updates_above_the_clip_overall_and_in_the_first_tenth() -> None:
    norms = [5.0] + [0.5] * 18 + [3.0]  # the first tenth: the first 2
    s = finetune_grad_norms.summary(norms, clip=1.0)
    assert (s["updates"], s["median"], s["max"], s["above"], s["above_first_tenth"]) == (20, 0.5, 5.0, 0.1, 0.5)
    assert s["p90"] == 3.0
