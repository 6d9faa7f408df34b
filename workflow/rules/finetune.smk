# Fine-tuning: one job per (task, variant, seed), the lists in params.yaml (finetune_tasks, finetune_variants, seeds).
# Each task's examples are loaded, cut, capped and tokenised once (encode_task); all its jobs read them.


rule encode_task:
    input:
        code=code("encode-task"),
        tokenizer=out(layout.TOKENIZER, layout.TOKENIZER_FILE),
        meta=out(layout.TOKENIZER, layout.TOKENIZER_META),
    output:
        encoded=out(layout.task_dir("{task}"), layout.ENCODED_JSON),
        examples=out(layout.task_dir("{task}"), layout.EXAMPLES_FILE),
    log:
        log_file("encode_task-{task}"),
    wildcard_constraints:
        task="|".join(config["finetune_tasks"]),
    conda:
        ENV
    threads: FANOUT_THREADS
    params:
        profile=PROFILE,
        settings=settings("encode_task"),
        tokenizer=folder_of_input("tokenizer"),
        out=folder_of_output("encoded"),
    shell:
        "sh workflow/scripts/gpt1.sh encode-task --profile {params.profile} --task {wildcards.task}"
        " --tokenizer {params.tokenizer} --out {params.out} 2>&1 | tee {log}"


rule finetune:
    input:
        code=code("finetune"),
        weights=out(layout.pretrain_dir("gpt"), layout.MODEL_WEIGHTS),
        config=out(layout.pretrain_dir("gpt"), layout.MODEL_JSON),
        tokenizer=out(layout.TOKENIZER, layout.TOKENIZER_FILE),
        meta=out(layout.TOKENIZER, layout.TOKENIZER_META),
        encoded=out(layout.task_dir("{task}"), layout.ENCODED_JSON),
        examples=out(layout.task_dir("{task}"), layout.EXAMPLES_FILE),
    output:
        metrics=out(layout.finetune_dir("{task}", "{variant}", "{seed}"), layout.FINETUNE_METRICS),
        predictions=out(layout.finetune_dir("{task}", "{variant}", "{seed}"), layout.PREDICTIONS),
        curves=out(layout.finetune_dir("{task}", "{variant}", "{seed}"), layout.FINETUNE_CURVES),
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
        gpu=GPU_SLOTS,
        gpu_mem_units=gpu_mem_units,
    params:
        profile=PROFILE,
        settings=settings("finetune"),
        variant=lambda wildcards: wildcards.variant,
        pretrained=folder_of_input("weights"),
        tokenizer=folder_of_input("tokenizer"),
        examples=folder_of_input("encoded"),
        out=folder_of_output("metrics"),
    shell:
        "sh workflow/scripts/gpt1.sh finetune --profile {params.profile} --task {wildcards.task} --variant {params.variant}"
        " --seed {wildcards.seed} --pretrained {params.pretrained} --tokenizer {params.tokenizer}"
        " --examples {params.examples} --out {params.out}"
        " 2>&1 | tee {log}"


# Table 5 ablations on the GLUE columns (ablation_tasks): without the auxiliary LM (lambda = 0), from the GPT ...
use rule finetune as ablation_no_aux with:
    output:
        metrics=out(layout.finetune_dir("{task}", "no_aux", "{seed}"), layout.FINETUNE_METRICS),
        predictions=out(layout.finetune_dir("{task}", "no_aux", "{seed}"), layout.PREDICTIONS),
        curves=out(layout.finetune_dir("{task}", "no_aux", "{seed}"), layout.FINETUNE_CURVES),
    log:
        log_file("finetune-{task}-no_aux-{seed}"),
    wildcard_constraints:
        task="|".join(config["ablation_tasks"]),
        seed=r"\d+",
    params:
        profile=PROFILE,
        settings=settings("ablation_no_aux"),
        variant="no_aux",
        pretrained=folder_of_input("weights"),
        tokenizer=folder_of_input("tokenizer"),
        examples=folder_of_input("encoded"),
        out=folder_of_output("metrics"),


# ... and the LSTM language model with the auxiliary LM, fine-tuned through the same task code.
use rule ablation_no_aux as ablation_lstm with:
    input:
        code=code("finetune"),
        weights=out(layout.pretrain_dir("lstm"), layout.MODEL_WEIGHTS),
        config=out(layout.pretrain_dir("lstm"), layout.MODEL_JSON),
        tokenizer=out(layout.TOKENIZER, layout.TOKENIZER_FILE),
        meta=out(layout.TOKENIZER, layout.TOKENIZER_META),
        encoded=out(layout.task_dir("{task}"), layout.ENCODED_JSON),
        examples=out(layout.task_dir("{task}"), layout.EXAMPLES_FILE),
    output:
        metrics=out(layout.finetune_dir("{task}", "lstm", "{seed}"), layout.FINETUNE_METRICS),
        predictions=out(layout.finetune_dir("{task}", "lstm", "{seed}"), layout.PREDICTIONS),
        curves=out(layout.finetune_dir("{task}", "lstm", "{seed}"), layout.FINETUNE_CURVES),
    log:
        log_file("finetune-{task}-lstm-{seed}"),
    params:
        profile=PROFILE,
        settings=settings("ablation_lstm"),
        variant="lstm",
        pretrained=folder_of_input("weights"),
        tokenizer=folder_of_input("tokenizer"),
        examples=folder_of_input("encoded"),
        out=folder_of_output("metrics"),
