# Fine-tuning: one job per (task, variant, seed), the lists in params.yaml (finetune_tasks, finetune_variants, seeds).


rule finetune:
    input:
        code=code("finetune", "tasks", "metrics"),
        weights=out("pretrain", "gpt", "model.safetensors"),
        config=out("pretrain", "gpt", "model.json"),
        tokenizer=out("tokenizer", "tokenizer.json"),
        meta=out("tokenizer", "gpt1_tokenizer.json"),
    output:
        metrics=out("finetune", "{task}", "{variant}", "{seed}", "metrics.json"),
        predictions=out("finetune", "{task}", "{variant}", "{seed}", "predictions.jsonl"),
        curves=out("finetune", "{task}", "{variant}", "{seed}", "curves.csv"),
    wildcard_constraints:
        task="|".join(config["finetune_tasks"]),
        variant="|".join(config["finetune_variants"]),
        seed=r"\d+",
    params:
        profile=PROFILE,
        pretrained=folder_of_input("weights"),
        tokenizer=folder_of_input("tokenizer"),
        out=folder_of_output("metrics"),
        finetune=SETTINGS["finetune"],
    threads: workflow.cores
    resources:
        mem_mb=4000,
    log:
        log_file("finetune-{task}-{variant}-{seed}"),
    conda:
        ENV
    shell:
        "python -m gpt1 finetune --profile {params.profile} --task {wildcards.task} --variant {wildcards.variant}"
        " --seed {wildcards.seed} --pretrained {params.pretrained} --tokenizer {params.tokenizer} --out {params.out}"
        " 2>&1 | tee {log}"
