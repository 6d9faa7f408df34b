# Data stages: fetch -> clean -> bpe -> encode.


rule fetch:
    input:
        code=code("corpus", "sources"),
    output:
        raw=out("corpus", "raw.jsonl"),
        manifest=out("corpus", "raw.manifest.json"),
    params:
        profile=PROFILE,
        out=folder_of_output("raw"),
        corpus=SETTINGS["corpus"],
        mirror=os.environ.get("GPT1_DATA_MIRROR") or config["data_mirror"],
    log:
        log_file("fetch"),
    conda:
        ENV
    shell:
        "python -m gpt1 fetch --profile {params.profile} --out {params.out} 2>&1 | tee {log}"


rule clean:
    input:
        code=code("corpus"),
        raw=out("corpus", "raw.jsonl"),
        manifest=out("corpus", "raw.manifest.json"),
    output:
        train=out("corpus", "train.jsonl"),
        validation=out("corpus", "validation.jsonl"),
        manifest=out("corpus", "manifest.json"),
    params:
        profile=PROFILE,
        raw=folder_of_input("raw"),
        out=folder_of_output("train"),
        corpus=SETTINGS["corpus"],
    threads: workflow.cores
    log:
        log_file("clean"),
    conda:
        ENV
    shell:
        "python -m gpt1 clean --profile {params.profile} --raw {params.raw} --out {params.out} 2>&1 | tee {log}"


rule bpe:
    input:
        code=code("tokenizer"),
        train=out("corpus", "train.jsonl"),
        manifest=out("corpus", "manifest.json"),
    output:
        tokenizer=out("tokenizer", "tokenizer.json"),
        meta=out("tokenizer", "gpt1_tokenizer.json"),
    params:
        profile=PROFILE,
        corpus=folder_of_input("train"),
        out=folder_of_output("tokenizer"),
        bpe=SETTINGS["bpe"],
        chunk_chars=SETTINGS["encode"]["chunk_chars"],
    threads: workflow.cores
    log:
        log_file("bpe"),
    conda:
        ENV
    shell:
        "python -m gpt1 bpe --profile {params.profile} --corpus {params.corpus} --out {params.out} 2>&1 | tee {log}"


rule encode:
    input:
        code=code("ids", "tokenizer"),
        tokenizer=out("tokenizer", "tokenizer.json"),
        meta=out("tokenizer", "gpt1_tokenizer.json"),
        train=out("corpus", "train.jsonl"),
        validation=out("corpus", "validation.jsonl"),
    output:
        train=out("ids", "train.bin"),
        train_header=out("ids", "train.json"),
        validation=out("ids", "validation.bin"),
        validation_header=out("ids", "validation.json"),
    params:
        profile=PROFILE,
        tokenizer=folder_of_input("tokenizer"),
        corpus=folder_of_input("train"),
        out=folder_of_output("train"),
        encode=SETTINGS["encode"],
    threads: workflow.cores
    log:
        log_file("encode"),
    conda:
        ENV
    shell:
        "python -m gpt1 encode --profile {params.profile} --tokenizer {params.tokenizer} --corpus {params.corpus}"
        " --out {params.out} 2>&1 | tee {log}"

