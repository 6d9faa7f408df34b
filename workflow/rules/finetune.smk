# Fine-tuning: one job per (task, variant, seed), the lists in params.yaml (finetune_tasks, finetune_variants, seeds).
# Each task's examples are loaded, cut, capped and tokenised once (encode_task); all its jobs read them.


rule encode_task:
    input:
        code=code("encode-task"),
        tokenizer=out("tokenizer", "tokenizer.json"),
        meta=out("tokenizer", "gpt1_tokenizer.json"),
    output:
        encoded=out("tasks", "{task}", "encoded.json"),
        examples=out("tasks", "{task}", "examples.jsonl"),
    log:
        log_file("encode_task-{task}"),
    wildcard_constraints:
        task="|".join(config["finetune_tasks"]),
    conda:
        ENV
    threads: FANOUT_THREADS
    params:
        profile=PROFILE,
        tokenizer=folder_of_input("tokenizer"),
        out=folder_of_output("encoded"),
        data={key: SETTINGS["finetune"].get(key) for key in TASK_DATA_KEYS},
        n_ctx=SETTINGS["model"]["n_ctx"],
        mirror=data_mirror(),
    shell:
        "sh workflow/scripts/gpt1.sh encode-task --profile {params.profile} --task {wildcards.task}"
        " --tokenizer {params.tokenizer} --out {params.out} 2>&1 | tee {log}"


rule finetune:
    input:
        code=code("finetune"),
        weights=out("pretrain", "gpt", "model.safetensors"),
        config=out("pretrain", "gpt", "model.json"),
        tokenizer=out("tokenizer", "tokenizer.json"),
        meta=out("tokenizer", "gpt1_tokenizer.json"),
        encoded=out("tasks", "{task}", "encoded.json"),
        examples=out("tasks", "{task}", "examples.jsonl"),
    output:
        metrics=out("finetune", "{task}", "{variant}", "{seed}", "metrics.json"),
        predictions=out("finetune", "{task}", "{variant}", "{seed}", "predictions.jsonl"),
        curves=out("finetune", "{task}", "{variant}", "{seed}", "curves.csv"),
    log:
        log_file("finetune-{task}-{variant}-{seed}"),
    wildcard_constraints:
        task="|".join(config["finetune_tasks"]),
        variant="|".join(config["finetune_variants"]),
        seed=r"\d+",
    conda:
        ENV
    threads: FANOUT_THREADS
    resources:
        mem_mb=4000,
    params:
        profile=PROFILE,
        variant=lambda wildcards: wildcards.variant,
        pretrained=folder_of_input("weights"),
        tokenizer=folder_of_input("tokenizer"),
        examples=folder_of_input("encoded"),
        out=folder_of_output("metrics"),
        finetune=SETTINGS["finetune"],
    shell:
        "sh workflow/scripts/gpt1.sh finetune --profile {params.profile} --task {wildcards.task} --variant {params.variant}"
        " --seed {wildcards.seed} --pretrained {params.pretrained} --tokenizer {params.tokenizer}"
        " --examples {params.examples} --out {params.out}"
        " 2>&1 | tee {log}"


# Table 5 ablations on the GLUE columns (ablation_tasks): without the auxiliary LM (lambda = 0), from the GPT ...
use rule finetune as ablation_no_aux with:
    output:
        metrics=out("finetune", "{task}", "no_aux", "{seed}", "metrics.json"),
        predictions=out("finetune", "{task}", "no_aux", "{seed}", "predictions.jsonl"),
        curves=out("finetune", "{task}", "no_aux", "{seed}", "curves.csv"),
    log:
        log_file("finetune-{task}-no_aux-{seed}"),
    wildcard_constraints:
        task="|".join(config["ablation_tasks"]),
        seed=r"\d+",
    params:
        profile=PROFILE,
        variant="no_aux",
        pretrained=folder_of_input("weights"),
        tokenizer=folder_of_input("tokenizer"),
        examples=folder_of_input("encoded"),
        out=folder_of_output("metrics"),
        finetune=SETTINGS["finetune"],


# ... and the LSTM language model with the auxiliary LM, fine-tuned through the same task code.
use rule ablation_no_aux as ablation_lstm with:
    input:
        code=code("finetune"),
        weights=out("pretrain", "lstm", "model.safetensors"),
        config=out("pretrain", "lstm", "model.json"),
        tokenizer=out("tokenizer", "tokenizer.json"),
        meta=out("tokenizer", "gpt1_tokenizer.json"),
        encoded=out("tasks", "{task}", "encoded.json"),
        examples=out("tasks", "{task}", "examples.jsonl"),
    output:
        metrics=out("finetune", "{task}", "lstm", "{seed}", "metrics.json"),
        predictions=out("finetune", "{task}", "lstm", "{seed}", "predictions.jsonl"),
        curves=out("finetune", "{task}", "lstm", "{seed}", "curves.csv"),
    log:
        log_file("finetune-{task}-lstm-{seed}"),
    params:
        profile=PROFILE,
        variant="lstm",
        pretrained=folder_of_input("weights"),
        tokenizer=folder_of_input("tokenizer"),
        examples=folder_of_input("encoded"),
        out=folder_of_output("metrics"),
        finetune=SETTINGS["finetune"],
