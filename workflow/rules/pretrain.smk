# Pre-training: the GPT-1 decoder (and, for the Table 5 ablation, the LSTM) on the encoded corpus.
# Under torchrun the same command trains data-parallel (see README, "Pre-training on several GPUs").


rule pretrain:
    input:
        code=code("pretrain"),
        train=out("ids", "train.bin"),
        train_header=out("ids", "train.json"),
        validation=out("ids", "validation.bin"),
        validation_header=out("ids", "validation.json"),
        tokenizer=out("tokenizer", "tokenizer.json"),
        meta=out("tokenizer", "gpt1_tokenizer.json"),
    output:
        weights=out("pretrain", "{model}", "model.safetensors"),
        config=out("pretrain", "{model}", "model.json"),
        metrics=out("pretrain", "{model}", "metrics.json"),
        curves=out("pretrain", "{model}", "curves.csv"),
        snapshots=directory(out("pretrain", "{model}", "snapshots")),
    log:
        log_file("pretrain-{model}"),
    wildcard_constraints:
        model="gpt|lstm",
    conda:
        ENV
    threads: PRETRAIN_THREADS
    resources:
        mem_mb=8000,
    params:
        profile=PROFILE,
        ids=folder_of_input("train"),
        tokenizer=folder_of_input("tokenizer"),
        out=folder_of_output("weights"),
        model=SETTINGS["model"],
        pretrain=SETTINGS["pretrain"],
    shell:
        "sh workflow/scripts/gpt1.sh --per-gpu pretrain --profile {params.profile} --model {wildcards.model} --ids {params.ids}"
        " --tokenizer {params.tokenizer} --out {params.out} 2>&1 | tee {log}"
