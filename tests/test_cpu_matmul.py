"""The pinned mode's matrix products (gpt1.training.cpu_matmul): torch's results (to rounding), every product of a
training step routed (none left to MKL, whose kernels depend on the vendor), the others refused by name, and the probe's
hashes of the pinned mode as committed: a kernel whose choice depends on the host fails here, by name, on any host.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from gpt1.modeling.model import GPT, LSTMLM, GPTConfig, LSTMConfig
from gpt1.training import cpu_matmul
from gpt1.training.cpu_matmul import PinnedKernelError

REPO = Path(__file__).resolve().parents[1]
PROBE = REPO / "tools" / "numerics_probe.py"
FIXTURE = REPO / "tests" / "fixtures" / "numerics_probe.json"
# The aten ops through which torch computes a matrix product on the CPU (MKL, or ATen's own attention/LSTM kernels)
PRODUCT_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear", "aten::lstm",
               "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::scaled_dot_product_attention",
               "aten::_scaled_dot_product_attention_math", "aten::mv", "aten::addmv", "aten::dot"}


def double(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.float64, requires_grad=True)


@pytest.mark.parametrize(("left", "right"), [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 6, 3, 4), (2, 6, 4, 5)),
                                             ((4,), (4, 5)), ((3, 4), (4,))])
def test_products_and_their_gradients_are_torchs(left, right):
    a, b = double(*left), double(*right)
    routed, reference = cpu_matmul.matmul(a, b), torch.matmul(a.detach(), b.detach())
    grad = torch.randn_like(reference)
    got = torch.autograd.grad(routed, (a, b), grad)
    a2, b2 = a.detach().requires_grad_(), b.detach().requires_grad_()
    want = torch.autograd.grad(torch.matmul(a2, b2), (a2, b2), grad)
    torch.testing.assert_close(routed, reference)
    for g_got, g_want in zip(got, want, strict=True):
        torch.testing.assert_close(g_got, g_want)


def test_attention_and_lstm_are_torchs():
    q, k, v = (torch.randn(2, 3, 7, 8, dtype=torch.float64) for _ in range(3))
    mask = torch.rand(7, 7) > 0.3
    mask[:, 0] = True
    for kwargs in ({"is_causal": True}, {"attn_mask": mask}, {"attn_mask": torch.randn(7, 7, dtype=torch.float64)}):
        torch.testing.assert_close(cpu_matmul.attention(q, k, v, **kwargs),
                                   F.scaled_dot_product_attention(q, k, v, **kwargs))
    lstm = torch.nn.LSTM(5, 6, num_layers=2, batch_first=True).double()
    xs = torch.randn(3, 4, 5, dtype=torch.float64)
    cpu_matmul.disable()
    try:
        want = lstm(xs)
    finally:
        cpu_matmul.enable()
    got = lstm(xs)  # the test process is pinned (conftest): through the mode
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])


def _product_ops(step) -> set[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        step()
    return {event.key for event in prof.key_averages()} & PRODUCT_OPS


def test_no_product_of_a_training_step_reaches_torchs_kernels():
    """The GPT's and the LSTM's updates and a task head's, forward and backward: every product through OpenBLAS. The
    control: with the mode off the same steps do call torch's kernels, so the profiler sees what it should."""
    torch.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=64, n_ctx=16, n_embd=32, n_layer=1, n_head=2))
    lstm = LSTMLM(LSTMConfig(vocab_size=64, n_ctx=16, n_embd=16, hidden_size=32))
    head = torch.nn.Linear(32, 3)
    data = torch.randint(0, 64, (2, 17))

    def step() -> None:
        for model in (gpt, lstm):
            model.train()
            _, loss = model(data[:, :-1], data[:, 1:])
            loss.backward()
        F.cross_entropy(head(gpt.transformer(data[:, :-1])[:, -1]), torch.tensor([0, 2])).backward()

    assert cpu_matmul.enabled() and _product_ops(step) == set()
    cpu_matmul.disable()
    try:
        assert {"aten::mm", "aten::lstm"} <= _product_ops(step)
    finally:
        cpu_matmul.enable()


def test_a_product_without_a_pinned_kernel_is_refused_by_name():
    with pytest.raises(PinnedKernelError, match="einsum: a matrix product the pinned CPU mode has no"):
        torch.einsum("ij,jk->ik", torch.randn(2, 3), torch.randn(3, 4))
    with pytest.raises(PinnedKernelError, match=r"torch\.bfloat16 by torch\.bfloat16 has no pinned kernel"):
        torch.randn(2, 3, dtype=torch.bfloat16) @ torch.randn(3, 4, dtype=torch.bfloat16)
    packed = torch.nn.utils.rnn.pack_padded_sequence(torch.randn(2, 3, 4), [3, 2], batch_first=True)
    with pytest.raises(PinnedKernelError, match="packed sequence"):
        torch.nn.LSTM(4, 4, batch_first=True)(packed)


def _probe_module():
    spec = importlib.util.spec_from_file_location("numerics_probe", PROBE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_pinned_mode_computes_the_committed_bits_on_this_host(tmp_path, capsys):
    """tests/fixtures/numerics_probe.json: `tools/numerics_probe.py --mode pinned` on an AMD EPYC (Zen 3, AVX2);
    the same bits on the AMD EPYC of ../shared/reference/numerics-probe and on the GPU machine's Intel Xeon but for
    the three operations that run torch.sqrt, which no stage runs (its `known_differences`; BENCHMARKS.md). A kernel
    chosen by the host fails here with the operation's name. Then the check itself: one hash changed is refused by
    name, unless listed for the vendor."""
    fixture = json.loads(FIXTURE.read_text())
    import numpy

    if (fixture["torch"].split("+")[0], fixture["numpy"]) != (torch.__version__.split("+")[0], numpy.__version__):
        pytest.skip(f"the fixture is torch {fixture['torch']} with numpy {fixture['numpy']}; this is torch "
                    f"{torch.__version__} with numpy {numpy.__version__} (constraints.txt pins the fixture's)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("_GPT1_PROBE")}
    done = subprocess.run([sys.executable, str(PROBE), "--mode", "pinned"], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    here, probe = json.loads(done.stdout), _probe_module()
    assert probe.check(here, FIXTURE) == 0, capsys.readouterr().err
    tampered = tmp_path / "tampered.json"
    wrong = {**here["hashes"], "gpt_3_updates": "0" * 16}  # this host's bits, one changed: the same on every vendor
    tampered.write_text(json.dumps({**fixture, "hashes": wrong, "known_differences": {}}))
    assert probe.check(here, tampered) == 1
    said = capsys.readouterr().err
    assert f"on {here['host']} " in said and "1 of" in said and said.rstrip().endswith("gpt_3_updates")
    # A difference the fixture lists for this host's vendor is said, not failed; any other still fails
    known = {here["vendor"]: {"ops": ["gpt_3_updates"], "why": "measured"}}
    tampered.write_text(json.dumps({**fixture, "hashes": wrong, "known_differences": known}))
    assert probe.check(here, tampered) == 0
    assert "1 operations differ as the fixture says they do" in capsys.readouterr().err
    tampered.write_text(json.dumps({**fixture, "hashes": {**wrong, "lstm_3_updates": "0" * 16},
                                    "known_differences": known}))
    assert probe.check(here, tampered) == 1
    assert capsys.readouterr().err.rstrip().endswith("differ from " + str(tampered) + " (made on "
                                                     f"{fixture['host']}): lstm_3_updates")


def test_the_lstms_gradients_are_torchs():
    """The LSTM layer's own backward (gates step by step, each weight's gradient in one product) against torch's,
    in float64: two layers, a given initial state, a loss on the outputs and on the last state."""
    torch.manual_seed(1)
    lstm = torch.nn.LSTM(5, 6, num_layers=2, batch_first=True).double()
    xs = torch.randn(3, 7, 5, dtype=torch.float64, requires_grad=True)
    state = tuple(torch.randn(2, 3, 6, dtype=torch.float64, requires_grad=True) for _ in range(2))

    def grads() -> list[torch.Tensor]:
        out, (h, c) = lstm(xs, state)
        loss = out.pow(2).sum() + 0.3 * h.sum() + 0.2 * c.pow(2).sum()
        return [out.detach(), *torch.autograd.grad(loss, [xs, *state, *lstm.parameters()])]

    cpu_matmul.disable()
    try:
        want = grads()
    finally:
        cpu_matmul.enable()
    for got, expected in zip(grads(), want, strict=True):
        torch.testing.assert_close(got, expected)
