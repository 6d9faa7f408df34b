"""Which CPU kernels give the same bits on two hosts: one hash per operation the pipeline computes, for comparing
machines, and the check that the pinned mode still computes the committed bits.

    .venv/bin/python tools/numerics_probe.py --mode pinned > host.json      # the pinned mode (gpt1.training.numerics)
    .venv/bin/python tools/numerics_probe.py --mode pinned-mkl > host.json  # the pinned mode before 2026-11-27
    .venv/bin/python tools/numerics_probe.py --mode none > host.json        # the host's own kernels
    .venv/bin/python tools/numerics_probe.py --mode pinned --check tests/fixtures/numerics_probe.json

Grown from ../shared/reference/numerics-probe/probe.py (an AMD host's hashes lie beside it): its operations keep their
names and seeded inputs, so its files compare key by key with this script's output for the same settings. Added:
every operation of a training step that it lacked (cross-entropy, softmax, sigmoid, AdamW, embedding, MSE, gather,
sampling), whole updates of the project's own GPT, LSTM and a task head, and `openblas_*`: the pinned mode's products
on numpy alone (numpy's generator, no torch), which compare across torch versions too. Each operation's hash is the
first 16 hex digits of the sha256 of its result's bytes; an operation the mode refuses hashes to "refused".

The environment must be set before torch loads, so the script sets it and re-executes itself. `--check` exits 1 and
names the host's processor and every operation whose hash differs from the file's, but those the file's
`known_differences` lists for the host's vendor (written by hand from a measurement, with its reason: kept when the
file is written again).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # gpt1, without installing the package (the GPU machine runs it from a copy)

from gpt1.training.numerics import PINNED_ENV, processor, vendor  # noqa: E402  (imports no torch)

MODES = {  # name: (environment, products through gpt1.training.cpu_matmul)
    "pinned": (PINNED_ENV, True),
    "pinned-mkl": ({**PINNED_ENV, "MKL_CBWR": "AVX2"}, False),
    "none": ({}, False),
}
CHILD = "_GPT1_PROBE_CHILD"


def digest(value: Any) -> str:
    import numpy as np
    import torch

    if isinstance(value, torch.Tensor):
        value = value.detach().contiguous().float().numpy()
    return hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()[:16]


def reference_ops(g: Any) -> dict[str, Any]:
    """The shared probe's operations, in its order and on its inputs (the same generator draws)."""
    import torch
    import torch.nn.functional as F

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g)

    out: dict[str, Any] = {}
    for name, (m, k, n) in {"gemm_512x768x3072": (512, 768, 3072), "gemm_odd_33x257x65": (33, 257, 65),
                            "gemm_lm_head_128x256x8400": (128, 256, 8400),
                            "gemm_tall_4096x256x256": (4096, 256, 256)}.items():
        out[name] = r(m, k) @ r(k, n)
    out["bmm_4x16_128x64x128"] = torch.matmul(r(4, 16, 128, 64), r(4, 16, 64, 128))
    for name, (m, k, n) in {"numpy_gemm_512x768x3072": (512, 768, 3072), "numpy_gemm_odd_33x257x65": (33, 257, 65),
                            "numpy_gemm_lm_head_128x256x8400": (128, 256, 8400)}.items():
        out[name] = r(m, k).numpy() @ r(k, n).numpy()
    x, w, b = r(256, 512).requires_grad_(), r(1024, 512).requires_grad_(), r(1024).requires_grad_()
    y = F.linear(x, w, b)
    y.backward(r(256, 1024))
    out.update(linear_fwd=y, linear_dx=x.grad, linear_dw=w.grad, linear_db=b.grad)
    x = r(512, 768).requires_grad_()
    ln = F.layer_norm(x, (768,), r(768), r(768))
    ln.backward(r(512, 768))
    out.update(layer_norm_fwd=ln, layer_norm_bwd=x.grad)
    x = r(256, 8400).requires_grad_()
    ls = F.log_softmax(x, -1)
    ls.backward(r(256, 8400))
    out.update(log_softmax_fwd=ls, log_softmax_bwd=x.grad)
    x = r(512, 3072).requires_grad_()
    ge = F.gelu(x, approximate="tanh")
    ge.backward(r(512, 3072))
    out.update(gelu_tanh_fwd=ge, gelu_tanh_bwd=x.grad)
    v = r(1_000_003)
    out.update(sum_1e6=v.sum(), exp_tanh_1e6=torch.tanh(v).exp())
    emb = r(8400, 256).requires_grad_()
    idx = torch.randint(0, 8400, (4096,), generator=g)
    F.embedding(idx, emb).backward(r(4096, 256))
    out["embedding_bwd"] = emb.grad
    q, kk, vv = (r(4, 4, 128, 64).requires_grad_() for _ in range(3))
    a = F.scaled_dot_product_attention(q, kk, vv, is_causal=True)
    a.backward(r(4, 4, 128, 64))
    out.update(sdpa_causal_fwd=a, sdpa_causal_dq=q.grad)
    torch.manual_seed(1)
    out["dropout_mask"] = F.dropout(torch.ones(512, 768), 0.1, training=True)
    torch.manual_seed(2)
    lstm = torch.nn.LSTM(256, 512, batch_first=True)
    ys, _ = lstm(r(8, 64, 256))
    ys.sum().backward()
    out.update(lstm_fwd=ys, lstm_dw_hh=lstm.weight_hh_l0.grad)
    out["tiny_transformer_10_adamw_steps"] = refusable(tiny_transformer, g)
    return out


def refusable(op: Callable[[Any], Any], g: Any) -> Any:
    """The operation's result, or None where the pinned mode refuses one of its products."""
    from gpt1.training.cpu_matmul import PinnedKernelError

    try:
        return op(g)
    except PinnedKernelError:
        return None


def tiny_transformer(g: Any) -> Any:
    """torch's own encoder layer (multi-head attention in one fused call, which the pinned mode refuses)."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(3)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 256, dropout=0.1, batch_first=True, norm_first=False)
    net = torch.nn.Sequential(torch.nn.Embedding(500, 64), layer, torch.nn.Linear(64, 500))
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.01)
    data = torch.randint(0, 500, (16, 33), generator=g)
    for _ in range(10):
        loss = F.cross_entropy(net(data[:, :-1]).reshape(-1, 500), data[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return torch.cat([p.flatten() for p in net.parameters()])


def pipeline_ops(g: Any) -> dict[str, Any]:
    """The training and scoring operations of the pipeline that the shared probe lacks."""
    import torch
    import torch.nn.functional as F

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g)

    out: dict[str, Any] = {}
    logits, targets = r(512, 8400).requires_grad_(), torch.randint(0, 8400, (512,), generator=g)
    targets[::7] = -100  # padding positions, as the LM and task losses mask them
    loss = F.cross_entropy(logits, targets, ignore_index=-100)
    loss.backward()
    out.update(cross_entropy_fwd=loss, cross_entropy_bwd=logits.grad)
    x = r(4, 4, 128, 128).masked_fill(torch.ones(128, 128, dtype=torch.bool).triu(1), float("-inf"))
    x.requires_grad_()
    sm = torch.softmax(x, -1)
    sm.backward(r(4, 4, 128, 128))
    out.update(causal_softmax_fwd=sm, causal_softmax_bwd=x.grad)
    x = r(8, 4 * 512).requires_grad_()
    gates = torch.sigmoid(x[:, :1024]) * torch.tanh(x[:, 1024:])
    gates.backward(r(8, 1024))
    out.update(sigmoid_tanh_fwd=gates, sigmoid_tanh_bwd=x.grad)
    pred, gold = r(1000).requires_grad_(), r(1000)
    mse = F.mse_loss(pred, gold)
    mse.backward()
    out.update(mse_fwd=mse, mse_bwd=pred.grad)
    emb, idx = r(8400, 256), torch.randint(0, 8400, (8, 128), generator=g)
    out["embedding_fwd"] = F.embedding(idx, emb)
    lp = F.log_softmax(r(4, 96, 8400), -1)
    out["gather_logprobs"] = lp.gather(-1, torch.randint(0, 8400, (4, 96, 1), generator=g)).squeeze(-1).sum(-1)
    out["logsumexp"] = torch.logsumexp(r(64, 8400), -1)
    probs = torch.softmax(r(4, 8400) / 0.8, -1)
    torch.manual_seed(4)
    out["multinomial_top_k"] = torch.multinomial(probs.topk(40, -1).values, 1).float()
    torch.manual_seed(5)
    out["dropout_mask_3d"] = F.dropout(torch.ones(8, 128, 256), 0.1, training=True)
    params = [r(1024, 256).requires_grad_(), r(1024).requires_grad_()]
    opt = pipeline_adamw(params, lr=6.25e-5)
    for _ in range(3):
        for p in params:
            p.grad = r(*p.shape)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
    out["adamw_3_steps_clipped"] = torch.cat([p.detach().flatten() for p in params])
    return out


def model_ops(g: Any) -> dict[str, Any]:
    """Whole updates of the project's models at small shapes (dropout on): what a stage computes, end to end."""
    import torch
    import torch.nn.functional as F

    from gpt1.modeling.model import GPT, LSTMLM, GPTConfig, LSTMConfig

    def updates(model: torch.nn.Module, loss_of: Callable[[], torch.Tensor], steps: int = 3) -> torch.Tensor:
        opt = pipeline_adamw(list(model.parameters()), lr=2.5e-4)
        for _ in range(steps):
            loss = loss_of()
            opt.zero_grad()
            loss.backward()
            opt.step()
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    out: dict[str, Any] = {}
    data = torch.randint(0, 512, (4, 65), generator=g)
    torch.manual_seed(6)
    gpt = GPT(GPTConfig(vocab_size=512, n_ctx=64, n_embd=64, n_layer=2, n_head=2))
    out["gpt_3_updates"] = updates(gpt, lambda: gpt(data[:, :-1], data[:, 1:])[1])
    torch.manual_seed(7)
    lstm = LSTMLM(LSTMConfig(vocab_size=512, n_ctx=64, n_embd=64, hidden_size=128))
    out["lstm_3_updates"] = updates(lstm, lambda: lstm(data[:, :-1], data[:, 1:])[1])
    torch.manual_seed(8)
    head = torch.nn.Linear(64, 3)
    labels = torch.randint(0, 3, (4,), generator=g)

    def classify() -> torch.Tensor:  # L3 = L2 + 0.5 L1, the head on the last position
        _, lm_loss = gpt(data[:, :-1], data[:, 1:])
        return F.cross_entropy(head(gpt.transformer(data[:, :-1])[:, -1]), labels) + 0.5 * lm_loss

    out["gpt_head_3_updates"] = updates(torch.nn.ModuleList([gpt, head]), classify)
    return out


def optimizer_ops(g: Any) -> dict[str, Any]:
    """AdamW's update taken apart (its own generator: the other groups' inputs stay as they were), so that a host
    where a whole update differs names the part: each ATen step of torch's single-tensor AdamW, its bias corrections
    (Python floats, through the C library's pow), gradient clipping's norm, and one AdamW step alone, single-tensor
    (pre-training's on a CPU until issue 42: its torch.sqrt is the vendor's) and fused (every training stage's)."""
    import math
    import struct

    import numpy as np
    import torch

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g)

    param, grad, avg, avg_sq = r(262_147), r(262_147), r(262_147), r(262_147).abs()
    out: dict[str, Any] = {"adamw_part_decay": param.clone().mul_(1 - 2.5e-4 * 0.01),
                           "adamw_part_lerp": avg.clone().lerp_(grad, 0.1),
                           "adamw_part_addcmul": avg_sq.clone().mul_(0.999).addcmul_(grad, grad, value=0.001),
                           "adamw_part_sqrt": avg_sq.sqrt(), "adamw_part_div": avg_sq / 0.0447213595499958,
                           "adamw_part_addcdiv": param.clone().addcdiv_(avg, avg_sq.sqrt().add_(1e-8), value=-2.5e-3),
                           "vector_norm": torch.linalg.vector_norm(grad)}
    corrections = [c for k in range(1, 3001) for c in (1 - 0.9**k, (1 - 0.999**k) ** 0.5, math.sqrt(1 - 0.999**k))]
    out["adamw_bias_corrections_python"] = np.frombuffer(struct.pack(f"{len(corrections)}d", *corrections))
    # One step over the whole vector (4,096 elements met no element where the vendors' square roots differ):
    # torch's single-tensor AdamW (torch.sqrt) and its fused kernel (the pipeline's, `pipeline_adamw`)
    for name, fused in (("adamw_1_step", None), ("adamw_fused_1_step", True)):
        p = param.clone().requires_grad_()
        opt = torch.optim.AdamW([p], lr=6.25e-5, weight_decay=0.01, fused=fused)
        p.grad = grad.clone()
        opt.step()
        out[name] = p
    return out


def pipeline_adamw(params: list[Any], lr: float) -> Any:
    """The optimizer every training stage builds (gpt1.training.runtime.adamw: fused on the CPU), with the weight
    decay of the probe's earlier releases on every tensor."""
    import torch

    from gpt1.training.runtime import adamw

    return adamw([{"params": params, "weight_decay": 0.01}], torch.device("cpu"), lr=lr, betas=(0.9, 0.999),
                 eps=1e-8)


def openblas_ops() -> dict[str, Any]:
    """The pinned mode's products on numpy alone (numpy's generator, float32), in the layouts gpt1.training.cpu_matmul
    hands OpenBLAS: forward (x W^T), both gradients (g W, g^T x), the LM head, a stack (attention)."""
    import numpy as np

    rng = np.random.default_rng(0)

    def r(*shape: int) -> Any:
        return rng.standard_normal(shape, dtype=np.float32)

    x, w, grad = r(512, 768), r(3072, 768), r(512, 3072)
    out: dict[str, Any] = {"openblas_linear_fwd_512x768x3072": x @ w.T, "openblas_linear_dx": grad @ w,
                           "openblas_linear_dw": grad.T @ x}
    h, wte = r(128, 256), r(8400, 256)
    out["openblas_lm_head_128x256x8400"] = h @ wte.T
    out["openblas_odd_33x257x65"] = r(33, 257) @ r(257, 65)
    q, k = r(4, 16, 128, 64), r(4, 16, 128, 64)
    out["openblas_attention_scores"] = q @ np.swapaxes(k, -2, -1)
    out["openblas_lstm_step_8x512x2048"] = r(8, 512) @ r(2048, 512).T
    return out


def run(products: bool) -> dict[str, str]:
    import torch

    torch.set_num_threads(1)
    torch.backends.mkldnn.enabled = False if products else torch.backends.mkldnn.enabled
    if products:
        from gpt1.training import numerics

        numerics.apply(True, 1)
    hashes = {name: digest(value) for name, value in openblas_ops().items()}
    g = torch.Generator().manual_seed(0)
    for group in (reference_ops, pipeline_ops, model_ops):
        hashes.update({name: "refused" if value is None else digest(value) for name, value in group(g).items()})
    hashes.update({name: digest(value) for name, value in optimizer_ops(torch.Generator().manual_seed(1)).items()})
    return hashes


def blas_info() -> Any:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "threadpoolctl not installed"
    return [{k: i.get(k) for k in ("internal_api", "version", "architecture")} for i in threadpool_info()
            if i.get("user_api") == "blas"]


def check(result: dict[str, Any], fixture: Path) -> int:
    """0 when every operation of the fixture hashes the same here, but those the fixture lists as known to differ on
    this host's vendor (said, not failed); else 1, naming the processor and each operation that differs."""
    expected = json.loads(fixture.read_text())
    differ = [op for op, h in expected["hashes"].items() if result["hashes"].get(op) != h]
    known = expected.get("known_differences", {}).get(result.get("vendor", ""), {})
    tolerated = [op for op in differ if op in known.get("ops", [])]
    failing = [op for op in differ if op not in tolerated]
    if tolerated:
        print(f"numerics probe: on {result['host']} {len(tolerated)} operations differ as the fixture says they do "
              f"on {result['vendor']} hosts ({known.get('why', 'no reason given')}): {', '.join(tolerated)}",
              file=sys.stderr)
    if not failing:
        print(f"numerics probe: {len(expected['hashes']) - len(tolerated)} of {len(expected['hashes'])} operations "
              f"as {fixture.name} on {result['host']}")
        return 0
    print(f"numerics probe: on {result['host']} (torch {result['torch']}, numpy {result['numpy']}) "
          f"{len(failing)} of {len(expected['hashes'])} operations differ from {fixture} (made on "
          f"{expected['host']}): {', '.join(failing)}", file=sys.stderr)
    return 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=MODES, default="pinned")
    parser.add_argument("--set", action="append", default=[], metavar="VAR=VALUE", help="an extra variable")
    parser.add_argument("--check", type=Path, metavar="FIXTURE", help="compare with a file this script wrote")
    args = parser.parse_args()
    env_wanted, products = MODES[args.mode]
    wanted = {**env_wanted, **dict(s.split("=", 1) for s in args.set)}
    if os.environ.get(CHILD) != "1":
        env = {k: v for k, v in os.environ.items() if k not in PINNED_ENV}
        path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)  # a carried numpy stays
        env.update(wanted, **{CHILD: "1", "PYTHONPATH": path})
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    import numpy
    import torch

    hashes = run(products)
    result = {"host": processor(), "vendor": vendor(), "torch": torch.__version__, "numpy": numpy.__version__,
              "blas": blas_info(), "mode": args.mode, "env": wanted,
              "cpu_capability": torch.backends.cpu.get_cpu_capability(), "hashes": hashes}
    if args.check:
        return check(result, args.check)
    json.dump(result, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
