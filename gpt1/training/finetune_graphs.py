"""Fine-tuning's CUDA fast path, a library: the same updates as the plain loop (`gpt1.training.finetune_loop`)
without their fixed cost per update (an update of the paper's model paid ~30 ms of kernel launches, host syncs and
optimizer work whatever its size). Batches pad to a bounded set of lengths (`bucket_length`), so that a CUDA graph
can be recorded per shape; AdamW is fused and capturable, its lr a device tensor filled in place; nothing is read
back per update. Two ways to get there, by finetune.cuda_graphs (`fast_path`): `GraphedUpdates` compiles the loss
(torch.compile's reduce-overhead: Inductor's kernels replayed as CUDA graphs), `CapturedUpdates` records each shape's
whole update (forward, backward, AdamW) with torch.cuda.graph and no compiler. On a CPU (a test forcing a path) the
same steps run without graphs.

What every fine-tuning update shares lives here too, below the loop: the forward's context (`forward_context`: autocast
and the attention kernels whose dropout is p) and the optimizer (`finetune_adamw`).
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from gpt1.modeling.heads import Batch, FinetuneModel, compute_losses, static_losses
from gpt1.modeling.model import GPT
from gpt1.training.runtime import adamw, attention_kernels, autocast, resolve_compile, resolve_precision

# Adam's moments as in the paper's pre-training and OpenAI's fine-tuning code (params.yaml sets neither).
ADAM_BETAS, ADAM_EPS = (0.9, 0.999), 1e-8


class UpdateRecipe(Protocol):
    """What an update reads of `finetune_loop.Recipe`."""
    lr: float
    weight_decay: float
    precision: str
    lm_weight: float


@contextlib.contextmanager
def forward_context(device: torch.device, dtype: torch.dtype | None, cache: bool = True) -> Iterator[None]:
    """Where every fine-tuning forward runs: autocast in `dtype` and, on CUDA, the attention kernels whose dropout
    is p in fine-tuning's order (`attention_kernels(..., varying=True)`); `cache=False` inside a CUDA graph."""
    with autocast(device, dtype, cache), attention_kernels(device, varying=True):
        yield


def finetune_adamw(model: FinetuneModel, weight_decay: float, device: torch.device, lr: float | torch.Tensor,
                   capturable: bool = False) -> torch.optim.AdamW:
    """Fine-tuning's AdamW: decoupled weight decay on matrices only (`param_groups`), the paper's moments."""
    return adamw(model.param_groups(weight_decay), device, lr=lr, betas=ADAM_BETAS, eps=ADAM_EPS,
                 capturable=capturable)


def bucket_length(longest: int, n_ctx: int) -> int:
    """The length a batch whose longest sequence has `longest` tokens pads to on the CUDA fast path: rounded up to
    a multiple of an eighth of the power of two below it (at least 8), at most n_ctx. A CUDA graph is recorded per
    shape, so the shapes must be few: 32 lengths up to 512 (8, 16, ..., 64, 72, ..., 128, 144, ..., 256, 288, ...,
    512), each at most 12.5% above the longest sequence beyond 64 tokens and at most 7 tokens above it below."""
    step = max(8, (1 << max(0, (longest - 1).bit_length() - 1)) // 8)
    return max(longest, min(n_ctx, -(-longest // step) * step))


def fast_path(setting: bool | str, device: torch.device) -> str | None:
    """The fast path a job trains through, by finetune.cuda_graphs: `compile` (`GraphedUpdates`) for auto on CUDA
    and for true anywhere, `capture` (`CapturedUpdates`) for capture anywhere, None (the plain loop) for false and for
    auto on a CPU, so that a CPU run keeps its bits. Forced on a CPU, a fast path runs its steps without graphs."""
    if setting == "capture":
        return "capture"
    return "compile" if resolve_compile(setting, device) else None


# ----------------------------------------------------------------------------------------------------------------
# The two fast paths

def compile_options(device: torch.device) -> dict[str, Any]:
    """torch.compile's arguments for the fast path: on CUDA Inductor with CUDA graphs (reduce-overhead); elsewhere
    (a test forcing the path on a CPU) dynamo's eager backend, which traces the same code without generating any."""
    return {"mode": "reduce-overhead"} if device.type == "cuda" else {"backend": "eager"}


def to_device(batch: Batch, device: torch.device) -> Batch:
    """The batch on `device` without waiting: from pageable memory a copy to the GPU first drains the stream (a
    host sync per update); from pinned memory it is queued like a kernel."""
    if device.type != "cuda":
        return batch.to(device)
    tokens, lengths, labels = (t.pin_memory().to(device, non_blocking=True)
                               for t in (batch.tokens, batch.lengths, batch.labels))
    return Batch(tokens, lengths, labels, batch.per_example)


class FastUpdates(abc.ABC):
    """What both fast paths share: the autocast dtype, a fused AdamW over every parameter, capturable on CUDA, whose
    lr is a device tensor filled in place (a kernel, no sync), and nothing read back per update. `update` runs one
    update and copies its L3, L2 and L1 into a device tensor; `close` frees what the path holds once training ends."""

    def __init__(self, model: FinetuneModel, recipe: UpdateRecipe, device: torch.device) -> None:
        self.model, self.recipe, self.device = model, recipe, device
        self.dtype = resolve_precision(recipe.precision, device)
        self.lr = torch.tensor(recipe.lr, dtype=torch.float32, device=device)
        self.optimizer = finetune_adamw(model, recipe.weight_decay, device, self.lr, capturable=device.type == "cuda")

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"].fill_(lr)  # the groups may share the one tensor

    def eager_losses(self, batch: Batch, cache: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """L3, L2, L1 of a batch of any shape (an epoch's last, smaller batch), without a graph."""
        with forward_context(self.device, self.dtype, cache):
            return compute_losses(self.model, batch, self.recipe.lm_weight)[0].parts()

    def static_losses(self, batch: Batch, cache: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """L3, L2, L1 of a batch of the batch size through `heads.static_losses`, whose shapes a graph can replay."""
        with forward_context(self.device, self.dtype, cache):
            return static_losses(self.model, batch, self.recipe.lm_weight).parts()

    @abc.abstractmethod
    def update(self, cpu_batch: Batch, lr: float, into: torch.Tensor, full: bool) -> None:
        """One update at rate `lr` (`full`: a batch of the batch size); its L3, L2 and L1 copied into `into`."""

    @abc.abstractmethod
    def close(self) -> None:
        """Free what the path holds (graphs, compiled code, their memory) once training ends."""


class GraphedUpdates(FastUpdates):
    """Fine-tuning updates without their fixed cost (eager, an update of the paper's model paid ~30 ms of kernel
    launches, host syncs and optimizer work whatever its size): the loss compiled (`static_losses`; on CUDA
    Inductor's kernels replayed as CUDA graphs, one recorded per bucket length), a fused AdamW over every parameter
    in a few kernels, capturable with its lr a device tensor filled in place, and nothing read back per update.
    A batch smaller than the batch size (an epoch's last) takes the eager update: one shape fewer to record.
    The LSTM's loss is not compiled (dynamo leaves recurrent modules out of its graphs; its update launches few
    kernels, cuDNN's recurrence among them): it keeps the rest, the updates without a host sync."""

    def __init__(self, model: FinetuneModel, recipe: UpdateRecipe, device: torch.device) -> None:
        super().__init__(model, recipe, device)
        compiled = isinstance(model.lm, GPT)
        self.losses = torch.compile(self.graph_losses, **compile_options(device)) if compiled else self.graph_losses
        self.cudagraphs = compiled and device.type == "cuda"

    def graph_losses(self, tokens: torch.Tensor, lengths: torch.Tensor, labels: torch.Tensor,
                     per_example: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`static_losses` as dynamo traces it: autocast inside, the attention kernels' order around the call
        (`update`), which the trace takes its kernel from."""
        with autocast(self.device, self.dtype):
            return static_losses(self.model, Batch(tokens, lengths, labels, per_example), self.recipe.lm_weight).parts()

    def update(self, cpu_batch: Batch, lr: float, into: torch.Tensor, full: bool) -> None:
        """One update at rate `lr`; its L3, L2 and L1 copied into `into` on the device."""
        self.set_lr(lr)
        batch = to_device(cpu_batch, self.device)
        if full:
            if self.cudagraphs:
                torch.compiler.cudagraph_mark_step_begin()
            # One compile for every bucket length (dynamic), then one CUDA graph recorded per length
            torch._dynamo.maybe_mark_dynamic(batch.tokens, 1)
            with attention_kernels(self.device, varying=True):  # traced with the kernels it selects
                total, clf, lm = self.losses(batch.tokens, batch.lengths, batch.labels, batch.per_example)
        else:
            total, clf, lm = self.eager_losses(batch)
        # Copied before the backward: a graph's outputs are overwritten when it replays next
        into.copy_(torch.stack((total.detach(), clf.detach(), lm.detach())))
        total.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def close(self) -> None:
        """Drop the compiled code and its CUDA graphs (and their memory) once training ends: the layers stage runs 13
        jobs in one process, whose graphs would otherwise pile up, each job recompiling (its guards name its own
        model) until dynamo's limit of recompiles sends the rest to the eager loop."""
        torch._dynamo.reset()


# Eager updates on a side stream before an update is recorded (torch.cuda.graph's recipe: lazy initialisation, cuBLAS
# and cuDNN workspaces and the optimizer's state all happen before the capture, not in it)
CAPTURE_WARMUP_UPDATES = 3


@dataclass
class Recorded:
    """One batch shape's update as recorded: its inputs' fixed tensors, the replay, and where its L3, L2, L1 land."""
    inputs: Batch
    replay: Callable[[], None]
    losses: torch.Tensor


class CapturedUpdates(FastUpdates):
    """Fine-tuning updates recorded whole, without a compiler (finetune.cuda_graphs: capture): per bucket shape, the
    forward, the backward and the fused AdamW step in one CUDA graph (`torch.cuda.graph`), replayed after the batch
    is copied into its fixed input tensors. Against `GraphedUpdates`: no Inductor compile (tens of seconds a job
    at the paper's size), a few eager updates and a capture per shape instead, and one launch an update, the
    optimizer's included; the kernels are eager ones (unfused).

    What a replay may touch must keep its address: the parameters and AdamW's state (updated in place), one set of
    gradients shared by every shape (zeroed and accumulated into inside the graph), the lr tensor. The shapes'
    graphs share one memory pool and replay in any order: nothing allocated inside a capture is read after its
    replay (the losses and the gradients live outside it). The warm-up updates before a capture really train, so
    the parameters, AdamW's state and the RNG are put back after them: training sees every batch once. The LSTM's
    updates are not recorded (cuDNN's recurrence under capture is not relied on): they, and an epoch's last smaller
    batch, run the same steps eagerly. On a CPU (a test) nothing is recorded and a replay runs the steps eagerly,
    warm-up and restore included."""

    def __init__(self, model: FinetuneModel, recipe: UpdateRecipe, device: torch.device,
                 warmup: int = CAPTURE_WARMUP_UPDATES) -> None:
        super().__init__(model, recipe, device)
        self.warmup, self.cuda = warmup, device.type == "cuda"
        if self.cuda and warmup < 1:  # AdamW would make its state inside the capture: each replay would reset it
            raise ValueError(f"warmup={warmup}: a capture needs at least one warm-up update before it")
        self.records = isinstance(model.lm, GPT)
        self.params = [p for p in model.parameters() if p.requires_grad]
        for p in self.params:  # the gradients every graph accumulates into
            p.grad = torch.zeros_like(p)
        self.grads = [p.grad for p in self.params]
        self.recorded: dict[tuple[Any, ...], Recorded] = {}
        self.pool = torch.cuda.graph_pool_handle() if self.cuda else None  # one memory pool for every shape's graph

    def step(self, batch: Batch, into: torch.Tensor, full: bool) -> None:
        """One update's work, as recorded and as run eagerly: gradients zeroed, L3 (its parts copied into `into`
        before the backward), backward, AdamW."""
        for param, grad in zip(self.params, self.grads, strict=True):
            param.grad = grad  # again: whoever set it to None (another loop on the same model) must not move it
        torch._foreach_zero_(self.grads)
        losses = self.static_losses if full else self.eager_losses
        total, clf, lm = losses(batch, cache=False)
        into.copy_(torch.stack((total.detach(), clf.detach(), lm.detach())))
        total.backward()
        self.optimizer.step()

    def state(self) -> list[torch.Tensor]:
        """Every tensor an update changes but the gradients: the parameters and AdamW's state."""
        return [*self.params, *(t for s in self.optimizer.state.values() for t in s.values()
                                if isinstance(t, torch.Tensor))]

    def warm_up(self, inputs: Batch, losses: torch.Tensor) -> None:
        """`self.warmup` updates on `inputs` (on a side stream on CUDA), then the parameters, AdamW's state and the
        RNG as before them; AdamW's state made by them is zeroed, as a first step finds it."""
        kept = self.state()
        before = [t.detach().clone() for t in kept]
        side = torch.cuda.Stream(self.device) if self.cuda else None
        with torch.random.fork_rng(devices=[self.device] if self.cuda else []):
            if side is not None:
                side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
                for _ in range(self.warmup):
                    self.step(inputs, losses, full=True)
            if side is not None:
                torch.cuda.current_stream(self.device).wait_stream(side)
        existed = set(map(id, kept))
        with torch.no_grad():
            for tensor, value in zip(kept, before, strict=True):
                tensor.copy_(value)
            for tensor in self.state():
                if id(tensor) not in existed:
                    tensor.zero_()

    def record(self, batch: Batch) -> Recorded:
        """`batch`'s shape recorded: its fixed inputs (a copy of `batch`), the warm-up, then the capture."""
        inputs = Batch(batch.tokens.clone(), batch.lengths.clone(), batch.labels.clone(), batch.per_example)
        losses = torch.zeros(3, device=self.device)
        self.warm_up(inputs, losses)
        if not self.cuda:
            return Recorded(inputs, lambda: self.step(inputs, losses, full=True), losses)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            self.step(inputs, losses, full=True)
        return Recorded(inputs, graph.replay, losses)

    def update(self, cpu_batch: Batch, lr: float, into: torch.Tensor, full: bool) -> None:
        """One update at rate `lr`; its L3, L2 and L1 copied into `into` on the device."""
        self.set_lr(lr)
        batch = to_device(cpu_batch, self.device)
        if not (full and self.records):
            self.step(batch, into, full)
            return
        key = (tuple(batch.tokens.shape), tuple(batch.labels.shape), batch.labels.dtype, batch.per_example)
        if key not in self.recorded:
            self.recorded[key] = self.record(batch)
        recorded = self.recorded[key]
        for fixed, now in zip((recorded.inputs.tokens, recorded.inputs.lengths, recorded.inputs.labels),
                              (batch.tokens, batch.lengths, batch.labels), strict=True):
            fixed.copy_(now)
        recorded.replay()
        into.copy_(recorded.losses)  # before the next replay overwrites them

    def close(self) -> None:
        """Free the graphs, their memory pool and the shared gradients once training ends: all graphs together,
        never one alone (their captures share the capture stream's cuBLAS workspace, which destroying one graph
        clears under the others: pytorch/pytorch#193402)."""
        self.recorded.clear()
        for p in self.params:
            p.grad = None


FAST_PATHS: dict[str, type[FastUpdates]] = {"compile": GraphedUpdates, "capture": CapturedUpdates}


__all__ = [
    "ADAM_BETAS",
    "ADAM_EPS",
    "CAPTURE_WARMUP_UPDATES",
    "FAST_PATHS",
    "CapturedUpdates",
    "FastUpdates",
    "GraphedUpdates",
    "Recorded",
    "UpdateRecipe",
    "bucket_length",
    "compile_options",
    "fast_path",
    "finetune_adamw",
    "forward_context",
    "to_device",
]
