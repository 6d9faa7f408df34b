# Pre-training: the GPT-1 decoder (and, for the Table 5 ablation, the LSTM) on the encoded corpus.
# Under torchrun the same command trains data-parallel (see docs/operations.md, "Pre-training on several GPUs").


rule pretrain:
    input:
        code=code("pretrain"),
        train=out(layout.IDS, layout.ids_bin("train")),
        train_header=out(layout.IDS, layout.ids_header("train")),
        validation=out(layout.IDS, layout.ids_bin("validation")),
        validation_header=out(layout.IDS, layout.ids_header("validation")),
        tokenizer=out(layout.TOKENIZER, layout.TOKENIZER_FILE),
        meta=out(layout.TOKENIZER, layout.TOKENIZER_META),
    output:
        weights=out(layout.pretrain_dir("{model}"), layout.MODEL_WEIGHTS),
        config=out(layout.pretrain_dir("{model}"), layout.MODEL_JSON),
        metrics=out(layout.pretrain_dir("{model}"), layout.PRETRAIN_METRICS),
        curves=out(layout.pretrain_dir("{model}"), layout.PRETRAIN_CURVES),
        snapshots=directory(out(layout.pretrain_dir("{model}"), layout.SNAPSHOTS)),
    log:
        log_file("pretrain-{model}"),
    wildcard_constraints:
        model="gpt|lstm",
    conda:
        ENV
    threads: PRETRAIN_THREADS
    resources:
        mem_mb=8000,
        gpu=GPU_SLOTS,
        gpu_mem_units=gpu_mem_units,
    params:
        profile=PROFILE,
        settings=settings("pretrain"),
        ids=folder_of_input("train"),
        tokenizer=folder_of_input("tokenizer"),
        out=folder_of_output("weights"),
    shell:
        "sh workflow/scripts/gpt1.sh --per-gpu pretrain --profile {params.profile} --model {wildcards.model} --ids {params.ids}"
        " --tokenizer {params.tokenizer} --out {params.out} 2>&1 | tee {log}"
