"""The pinned CPU mode's matrix products, through kernels the project chooses rather than the processor's vendor.

Why: torch's CPU products go to MKL, and MKL picks its kernels by vendor. On Intel it takes the branch that
MKL_CBWR=AVX2 asks for; on AMD it ignores the request and takes its AUTO branch (Intel's oneMKL guide, "Conditional
Numerical Reproducibility"), so the same step gives other bits there (../shared/reference/numerics-probe).
numpy's OpenBLAS takes the kernels OPENBLAS_CORETYPE names on any x86-64 with AVX2 and FMA, whatever the vendor, and
on one thread it was the faster of the two on both vendors (bench/pinning.py, BENCHMARKS.md "Pinned kernels").

`PinnedMatmuls` is a torch function mode: while it is active, every matrix product a model makes - `F.linear`
(every `nn.Linear`: the layers, the LM heads, the task heads), `@`/`matmul`/`mm`/`bmm`/`addmm`, attention
(`F.scaled_dot_product_attention`, written out as its two products around ATen's softmax and dropout) and the LSTM
(`torch.lstm`, one autograd Function a layer) - runs through `matmul` below: numpy's `matmul` forward, and the two
products of its gradient backward. Everything else stays on ATen's own kernels, which `ATEN_CPU_CAPABILITY` fixes.
A matrix product this mode cannot express is refused by name, never silently left to MKL.

A library module: `gpt1.training.numerics.apply` turns it on for a pinned process; it knows no params.yaml key.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from gpt1.pipeline.errors import PinnedKernelError


def _np_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b by numpy (OpenBLAS's gemm for float32/float64), on views of the tensors' memory: no copy in or out.
    Overflow gives inf and nan as torch's would, silently: the stage's own check names a loss that is not finite."""
    with np.errstate(all="ignore"):
        return torch.from_numpy(np.matmul(a.detach().numpy(), b.detach().numpy()))


def _batch_sum(grad: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """A gradient summed back over the batch dimensions its input was broadcast along (ATen's pinned reduction)."""
    return grad if grad.shape == shape else grad.sum_to_size(shape)


class _MatMul(torch.autograd.Function):
    """a @ b for a [..., m, k] and b [..., k, n] with equal (or broadcast) batch dimensions; gradients
    g @ b^T and a^T @ g, each one numpy product."""

    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(a, b)
        return _np_matmul(a, b)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        a, b = ctx.saved_tensors
        grad_a = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_a = _batch_sum(_np_matmul(grad, b.transpose(-2, -1)), a.shape)
        if ctx.needs_input_grad[1]:
            grad_b = _batch_sum(_np_matmul(a.transpose(-2, -1), grad), b.shape)
        return grad_a, grad_b


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """torch.matmul's result through numpy's OpenBLAS, for the floating-point shapes models use: a vector or
    matrix times a matrix, and stacks of matrices. A stack times one matrix becomes one tall product (one gemm
    whatever the batch, so its gradient is one product too, not a sum over the stack)."""
    if not (a.is_floating_point() and a.dtype == b.dtype and a.dtype in (torch.float32, torch.float64)):
        raise PinnedKernelError(f"a matrix product of {a.dtype} by {b.dtype} has no pinned kernel; the pinned CPU "
                                f"mode computes in fp32 (set cpu.pinned: false for other precisions)")
    if a.device.type != "cpu" or b.device.type != "cpu":
        raise PinnedKernelError("the pinned mode's matrix products run on the CPU; move the model to the CPU or "
                                "set cpu.pinned: false")
    if a.dim() == 1 or b.dim() == 1:
        left, right = a.unsqueeze(0) if a.dim() == 1 else a, b.unsqueeze(-1) if b.dim() == 1 else b
        out = matmul(left, right)
        return out.squeeze(-1) if b.dim() == 1 else out.squeeze(-2)
    if b.dim() == 2 and a.dim() > 2:
        flat = _MatMul.apply(a.reshape(-1, a.shape[-1]), b)
        return flat.reshape(*a.shape[:-1], b.shape[-1])
    return _MatMul.apply(a, b)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear: x @ weight^T (+ bias, on ATen), the product through `matmul`."""
    y = matmul(x, weight.t())
    return y if bias is None else y + bias


def attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None = None,
              dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
              enable_gqa: bool = False) -> torch.Tensor:
    """F.scaled_dot_product_attention written out as its reference does: softmax(q k^T * scale + mask), dropout,
    times v; the two products through `matmul`, the rest on ATen."""
    if enable_gqa and query.shape[-3] != key.shape[-3]:
        raise PinnedKernelError("scaled_dot_product_attention with grouped query heads has no pinned kernel")
    scores = matmul(query, key.transpose(-2, -1)) * (1.0 / math.sqrt(query.shape[-1]) if scale is None else scale)
    length, source = query.shape[-2], key.shape[-2]
    if is_causal:
        causal = torch.ones(length, source, dtype=torch.bool).tril(diagonal=source - length)
        scores = scores.masked_fill(~causal, float("-inf"))
    if attn_mask is not None:
        scores = (scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool
                  else scores + attn_mask)
    weights = torch.softmax(scores, dim=-1)
    if dropout_p > 0.0:  # as the function itself: dropout whenever p > 0, training or not
        weights = F.dropout(weights, dropout_p)
    return matmul(weights, value)


class _LSTMLayer(torch.autograd.Function):
    """One unidirectional LSTM layer over [batch, time, features], its products through `_np_matmul`: the input
    products of every step in one, h_{t-1} W_hh^T step by step; backward the gates' gradients step by step, then each
    weight's gradient in one product over all steps, as fused LSTM kernels do (a step-by-step autograd graph took
    2.7 times as long: BENCHMARKS.md "Pinned kernels")."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor, w_ih: torch.Tensor,
                w_hh: torch.Tensor, b_ih: torch.Tensor | None, b_hh: torch.Tensor | None,
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        batch, steps, width = x.shape
        hidden = w_hh.shape[1]
        gates_in = _np_matmul(x.reshape(batch * steps, width), w_ih.t()).reshape(batch, steps, 4 * hidden)
        if b_ih is not None:
            gates_in += b_ih + b_hh
        acts = torch.empty(batch, steps, 4 * hidden, dtype=x.dtype)  # i, f, g, o after their nonlinearities
        cs, hs = (torch.empty(batch, steps, hidden, dtype=x.dtype) for _ in range(2))
        h, c, w_hh_t = h0, c0, w_hh.t()
        for t in range(steps):
            gates, a = gates_in[:, t] + _np_matmul(h, w_hh_t), acts[:, t]
            torch.sigmoid(gates[:, :2 * hidden], out=a[:, :2 * hidden])
            torch.tanh(gates[:, 2 * hidden:3 * hidden], out=a[:, 2 * hidden:3 * hidden])
            torch.sigmoid(gates[:, 3 * hidden:], out=a[:, 3 * hidden:])
            i, f, g, o = a.chunk(4, dim=1)
            c = f * c + i * g
            h = o * torch.tanh(c)
            cs[:, t], hs[:, t] = c, h
        ctx.save_for_backward(x, h0, c0, w_ih, w_hh, acts, cs, hs)
        ctx.has_bias = b_ih is not None
        return hs, h.clone(), c.clone()

    @staticmethod
    def backward(ctx: Any, d_hs: torch.Tensor | None, d_hn: torch.Tensor | None, d_cn: torch.Tensor | None,
                 ) -> tuple[torch.Tensor | None, ...]:
        x, h0, c0, w_ih, w_hh, acts, cs, hs = ctx.saved_tensors
        batch, steps, width = x.shape
        hidden = w_hh.shape[1]
        d_gates = torch.empty(batch, steps, 4 * hidden, dtype=x.dtype)
        dh = torch.zeros_like(h0) if d_hn is None else d_hn.clone()
        dc = torch.zeros_like(c0) if d_cn is None else d_cn.clone()
        for t in reversed(range(steps)):
            if d_hs is not None:
                dh = dh + d_hs[:, t]
            i, f, g, o = acts[:, t].chunk(4, dim=1)
            tanh_c = torch.tanh(cs[:, t])
            dc = dc + dh * o * (1 - tanh_c * tanh_c)
            dg = d_gates[:, t]
            dg[:, :hidden] = dc * g * i * (1 - i)
            dg[:, hidden:2 * hidden] = dc * (cs[:, t - 1] if t > 0 else c0) * f * (1 - f)
            dg[:, 2 * hidden:3 * hidden] = dc * i * (1 - g * g)
            dg[:, 3 * hidden:] = dh * tanh_c * o * (1 - o)
            dc = dc * f
            dh = _np_matmul(dg, w_hh)
        flat = d_gates.reshape(batch * steps, 4 * hidden)
        h_prev = torch.cat([h0.unsqueeze(1), hs[:, :-1]], dim=1).reshape(batch * steps, hidden)
        d_x = _np_matmul(flat, w_ih).reshape(batch, steps, width)
        d_w_ih, d_w_hh = _np_matmul(flat.t(), x.reshape(batch * steps, width)), _np_matmul(flat.t(), h_prev)
        d_b = flat.sum(0) if ctx.has_bias else None
        return d_x, dh, dc, d_w_ih, d_w_hh, d_b, d_b


def lstm(data: torch.Tensor, hx: Sequence[torch.Tensor], weights: Sequence[torch.Tensor], has_biases: bool,
         num_layers: int, dropout: float, train: bool, bidirectional: bool, batch_first: bool,
         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """torch.lstm (what nn.LSTM calls) for the unidirectional LSTM without projections that models build: each
    layer one `_LSTMLayer`, dropout between layers as nn.LSTM applies it."""
    per_layer = 4 if has_biases else 2
    if bidirectional or len(weights) != per_layer * num_layers:
        raise PinnedKernelError("nn.LSTM bidirectional or with proj_size has no pinned kernel; the project's "
                                "LSTM is unidirectional without projections")
    x = data if batch_first else data.transpose(0, 1)  # [batch, time, features]
    h_last, c_last = [], []
    for layer in range(num_layers):
        w_ih, w_hh, *biases = weights[per_layer * layer: per_layer * (layer + 1)]
        b_ih, b_hh = biases if has_biases else (None, None)
        x, h, c = _LSTMLayer.apply(x.contiguous(), hx[0][layer], hx[1][layer], w_ih, w_hh, b_ih, b_hh)
        h_last.append(h)
        c_last.append(c)
        if train and dropout > 0.0 and layer < num_layers - 1:
            x = F.dropout(x, dropout)
    out = x if batch_first else x.transpose(0, 1)
    return out, torch.stack(h_last), torch.stack(c_last)


def _addmm(input: torch.Tensor, mat1: torch.Tensor, mat2: torch.Tensor, *, beta: float = 1, alpha: float = 1,
           ) -> torch.Tensor:
    product = matmul(mat1, mat2)
    return beta * input + alpha * product


def _baddbmm(input: torch.Tensor, batch1: torch.Tensor, batch2: torch.Tensor, *, beta: float = 1,
             alpha: float = 1) -> torch.Tensor:
    return _addmm(input, batch1, batch2, beta=beta, alpha=alpha)


def _reversed(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return matmul(b, a)


# The functions (and tensor methods) that compute a matrix product, and what computes them in the pinned mode
ROUTES: dict[Callable[..., Any], Callable[..., Any]] = {
    F.linear: linear,
    torch.matmul: matmul, torch.Tensor.matmul: matmul, torch.Tensor.__matmul__: matmul,
    torch.Tensor.__rmatmul__: _reversed,
    torch.mm: matmul, torch.Tensor.mm: matmul, torch.bmm: matmul, torch.Tensor.bmm: matmul,
    torch.addmm: _addmm, torch.Tensor.addmm: _addmm, torch.baddbmm: _baddbmm, torch.Tensor.baddbmm: _baddbmm,
    F.scaled_dot_product_attention: attention,
    torch.lstm: lstm,
}  # fmt: skip
# Matrix products that no route covers: refused by name rather than left to MKL's vendor-dependent kernels
REFUSED = {torch.einsum, torch.tensordot, torch.mv, torch.Tensor.mv, torch.addmv, torch.dot, torch.inner,
           torch.outer, torch.bilinear, torch.gru, torch.rnn_tanh, torch.rnn_relu, torch.chain_matmul,
           torch.linalg.multi_dot, torch.conv1d, torch.conv2d, F.multi_head_attention_forward}


class PinnedMatmuls(TorchFunctionMode):
    """While active (on this thread, which also runs backward on the CPU), the matrix products of `ROUTES` go
    through numpy's OpenBLAS; those of `REFUSED` raise `PinnedKernelError`."""

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: tuple = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        route = ROUTES.get(func)
        if route is not None and _on_cpu(args):
            if func is torch.lstm and isinstance(args[1], torch.Tensor):  # packed: (data, batch_sizes, hx, ...)
                raise PinnedKernelError("nn.LSTM on a packed sequence has no pinned kernel; pad the batch instead")
            return route(*args, **kwargs)
        if func in REFUSED:
            raise PinnedKernelError(f"{getattr(func, '__name__', func)}: a matrix product the pinned CPU mode has "
                                    f"no vendor-independent kernel for (gpt1.training.cpu_matmul.ROUTES lists those "
                                    f"it has)")
        return func(*args, **kwargs)


def _on_cpu(args: tuple) -> bool:
    """Whether the call's tensors live on the CPU (a CUDA model in a pinned process keeps its own kernels)."""
    return all(a.device.type == "cpu" for a in args if isinstance(a, torch.Tensor))


_ACTIVE: list[PinnedMatmuls] = []


def enable() -> None:
    """Route this thread's matrix products for the rest of the process (the stage's whole run)."""
    if not _ACTIVE:
        mode = PinnedMatmuls()
        mode.__enter__()
        _ACTIVE.append(mode)


def enabled() -> bool:
    return bool(_ACTIVE) and torch.overrides._get_current_function_mode_stack().count(_ACTIVE[0]) == 1


def disable() -> None:
    """Undo `enable` (tests; a stage never needs it)."""
    while _ACTIVE:
        _ACTIVE.pop().__exit__(None, None, None)


def blas() -> str:
    """The library, version and kernels of numpy's BLAS, as outputs record them (its bits depend on all three)."""
    config = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    return f"{config['name']} {config['version']}"


__all__ = ["REFUSED", "ROUTES", "PinnedKernelError", "PinnedMatmuls", "attention", "blas", "disable", "enable",
           "enabled", "linear", "lstm", "matmul"]
