# Data stages: fetch -> clean -> bpe -> encode.


rule fetch:
    input:
        code=code("fetch"),
    output:
        raw=out("corpus", "raw.jsonl"),
        manifest=out("corpus", "raw.manifest.json"),
    log:
        log_file("fetch"),
    conda:
        ENV
    params:
        profile=PROFILE,
        out=folder_of_output("raw"),
        corpus=SETTINGS["corpus"],
        mirror=data_mirror(),
    shell:
        "sh workflow/scripts/gpt1.sh fetch --profile {params.profile} --out {params.out} 2>&1 | tee {log}"


rule clean:
    input:
        code=code("clean"),
        raw=out("corpus", "raw.jsonl"),
        manifest=out("corpus", "raw.manifest.json"),
    output:
        train=out("corpus", "train.jsonl"),
        validation=out("corpus", "validation.jsonl"),
        manifest=out("corpus", "manifest.json"),
    log:
        log_file("clean"),
    conda:
        ENV
    threads: workflow.cores
    params:
        profile=PROFILE,
        raw=folder_of_input("raw"),
        out=folder_of_output("train"),
        corpus=SETTINGS["corpus"],
    shell:
        "sh workflow/scripts/gpt1.sh clean --profile {params.profile} --raw {params.raw} --out {params.out} 2>&1 | tee {log}"


rule bpe:
    input:
        code=code("bpe"),
        train=out("corpus", "train.jsonl"),
        manifest=out("corpus", "manifest.json"),
    output:
        tokenizer=out("tokenizer", "tokenizer.json"),
        meta=out("tokenizer", "gpt1_tokenizer.json"),
    log:
        log_file("bpe"),
    conda:
        ENV
    threads: workflow.cores
    params:
        profile=PROFILE,
        corpus=folder_of_input("train"),
        out=folder_of_output("tokenizer"),
        bpe=SETTINGS["bpe"],
        chunk_chars=SETTINGS["encode"]["chunk_chars"],
    shell:
        "sh workflow/scripts/gpt1.sh bpe --profile {params.profile} --corpus {params.corpus} --out {params.out} 2>&1 | tee {log}"


rule encode:
    input:
        code=code("encode"),
        tokenizer=out("tokenizer", "tokenizer.json"),
        meta=out("tokenizer", "gpt1_tokenizer.json"),
        train=out("corpus", "train.jsonl"),
        validation=out("corpus", "validation.jsonl"),
    output:
        train=out("ids", "train.bin"),
        train_header=out("ids", "train.json"),
        validation=out("ids", "validation.bin"),
        validation_header=out("ids", "validation.json"),
    log:
        log_file("encode"),
    conda:
        ENV
    threads: workflow.cores
    params:
        profile=PROFILE,
        tokenizer=folder_of_input("tokenizer"),
        corpus=folder_of_input("train"),
        out=folder_of_output("train"),
        encode=SETTINGS["encode"],
    shell:
        "sh workflow/scripts/gpt1.sh encode --profile {params.profile} --tokenizer {params.tokenizer} --corpus {params.corpus}"
        " --out {params.out} 2>&1 | tee {log}"
