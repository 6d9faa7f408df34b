"""Fine-tuning time and held-out score with plain shuffled batches against batches formed by length.

    GPT1_DATA_MIRROR=../shared/data OMP_NUM_THREADS=1 .venv/bin/python -m experiments.length_grouping \\
        --tasks sst2:3200,stsb:400,rte:400,cola:1600 --groups 1,8 --rounds 2
    .venv/bin/python -m experiments.length_grouping --padding --groups 1,4,8,16,50   (no training: padded tokens only)

Why: a fine-tuning batch pads every sequence to its longest, and with shuffled batches of GLUE's short, unequal
sentences 40-60% of the padded tokens are padding (SST-2: 62%). `finetune.length_group_batches` forms batches by
length within runs of that many shuffled batches (`gpt1.training.finetune_loop.epoch_batches`). The two arms are
experiments/finetune_ab.py's A/B of `finetune.length_group_batches` (held-out design, interleaved rounds, paired
bootstrap; its docstring says what is printed). `--padding` instead counts, for the default run's encoded training
examples of every task (results/default/tasks), the share of real tokens among the padded tokens of 3 epochs of
batches of 16 at each grouping.
"""

from __future__ import annotations

import argparse
import json

from bench.common import REPO
from experiments.finetune_ab import ab
from experiments.learning_curves import RESULTS


def padding(groups: list[int], batch_size: int = 16, epochs: int = 3) -> None:
    """Real tokens / padded tokens of `epochs` epochs of each task's encoded training examples, per grouping."""
    import torch

    from gpt1.data.rows import Example, LoadedSplit
    from gpt1.data.taskdata import Part
    from gpt1.data.transforms import Transformed
    from gpt1.training.finetune_loop import epoch_batches, longest_sequence

    print("| task | training examples | " + " | ".join(f"real / padded, groups of {g}" for g in groups) + " |")
    print("| --- | ---: |" + " ---: |" * len(groups))
    for folder in sorted((REPO / "results" / "default" / "tasks").iterdir()):
        lines = [json.loads(line) for line in (folder / "examples.jsonl").read_text().splitlines()]
        train = [line for line in lines if line["part"] == 0]
        part = Part(LoadedSplit([Example(("",), 0, None, i) for i in range(len(train))], len(train), 0, 0),
                    [Transformed(line["sequences"], False) for line in train], "train", None)
        shares = []
        for group in groups:
            generator, real, padded = torch.Generator().manual_seed(0), 0, 0
            for _ in range(epochs):
                for batch in epoch_batches(part, batch_size, generator, group):
                    sequences = [s for i in batch for s in part.transformed[i].sequences]
                    real += sum(map(len, sequences))
                    padded += len(sequences) * max(longest_sequence(part, i) for i in batch)
            shares.append(real / padded)
        print(f"| {folder.name} | {len(train)} | " + " | ".join(f"{x:.2f}" for x in shares) + " |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="sst2:3200,qnli:400,stsb:400", help="task:training examples, ...")
    parser.add_argument("--groups", default="1,8", help="finetune.length_group_batches of the two arms")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--padding", action="store_true", help="only count padded tokens (no training)")
    args = parser.parse_args(argv)
    if args.padding:
        padding([int(g) for g in args.groups.split(",")])
        return
    a, b = args.groups.split(",")
    ab("finetune.length_group_batches", (a, b), args.tasks, args.rounds, RESULTS.with_name("length_grouping.jsonl"))

if __name__ == "__main__":
    main()
