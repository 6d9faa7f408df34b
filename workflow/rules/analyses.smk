# Analyses of the paper's section 5: layers transferred (Figure 2 left), zero-shot behaviour along pre-training
# (Figure 2 right).


rule zeroshot:
    input:
        code=code("zeroshot"),
        weights=out(layout.pretrain_dir("{model}"), layout.MODEL_WEIGHTS),
        config=out(layout.pretrain_dir("{model}"), layout.MODEL_JSON),
        # ancient(): `dvc commit` relinks the files of this folder, which touches its mtime; a new pre-training
        # run still reruns this rule through model.safetensors.
        snapshots=ancient(out(layout.pretrain_dir("{model}"), layout.SNAPSHOTS)),
        tokenizer=out(layout.TOKENIZER, layout.TOKENIZER_FILE),
        meta=out(layout.TOKENIZER, layout.TOKENIZER_META),
    output:
        json=out(layout.zeroshot_dir("{model}"), layout.ZEROSHOT_JSON),
        csv=out(layout.zeroshot_dir("{model}"), layout.ZEROSHOT_CSV),
        heldout=out(layout.zeroshot_dir("{model}"), layout.HELDOUT_CSV),
    log:
        log_file("zeroshot-{model}"),
    wildcard_constraints:
        model="gpt|lstm",
    conda:
        ENV
    threads: FANOUT_THREADS
    resources:
        gpu=GPU_SLOTS,
    params:
        profile=PROFILE,
        settings=settings("zeroshot"),
        model_dir=folder_of_input("weights"),
        tokenizer=folder_of_input("tokenizer"),
        out=folder_of_output("json"),
    shell:
        "sh workflow/scripts/gpt1.sh zeroshot --profile {params.profile} --model-dir {params.model_dir}"
        " --tokenizer {params.tokenizer} --out {params.out} 2>&1 | tee {log}"


rule layers:
    input:
        code=code("layers"),
        weights=out(layout.pretrain_dir("gpt"), layout.MODEL_WEIGHTS),
        config=out(layout.pretrain_dir("gpt"), layout.MODEL_JSON),
        tokenizer=out(layout.TOKENIZER, layout.TOKENIZER_FILE),
        meta=out(layout.TOKENIZER, layout.TOKENIZER_META),
        encoded=out(layout.task_dir("{task}"), layout.ENCODED_JSON),
        examples=out(layout.task_dir("{task}"), layout.EXAMPLES_FILE),
    output:
        json=out(layout.layers_dir("{task}", "{seed}"), layout.LAYERS_JSON),
        csv=out(layout.layers_dir("{task}", "{seed}"), layout.LAYERS_CSV),
    log:
        log_file("layers-{task}-{seed}"),
    wildcard_constraints:
        task="|".join(LAYER_TRANSFER_TASKS),
        seed=r"\d+",
    # the longest single job (n_layer + 1 fine-tunings): started first, it does not hold up the end of the run
    priority: 10
    conda:
        ENV
    threads: FANOUT_THREADS
    resources:
        mem_mb=4000,
        gpu=GPU_SLOTS,
        gpu_mem_units=gpu_mem_units,
    params:
        profile=PROFILE,
        settings=settings("layers"),
        pretrained=folder_of_input("weights"),
        tokenizer=folder_of_input("tokenizer"),
        examples=folder_of_input("encoded"),
        out=folder_of_output("json"),
    shell:
        "sh workflow/scripts/gpt1.sh layers --profile {params.profile} --task {wildcards.task} --seed {wildcards.seed}"
        " --pretrained {params.pretrained} --tokenizer {params.tokenizer} --examples {params.examples}"
        " --out {params.out} 2>&1 | tee {log}"
