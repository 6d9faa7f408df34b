# Data stages: fetch -> clean -> bpe -> encode.


rule fetch:
    input:
        code("corpus", "sources"),
    output:
        out("corpus", "raw.jsonl"),
        out("corpus", "raw.manifest.json"),
    params:
        corpus=SETTINGS["corpus"],
        mirror=os.environ.get("GPT1_DATA_MIRROR") or config["data_mirror"],
    log:
        log_file("fetch"),
    conda:
        ENV
    shell:
        "python -m gpt1 fetch --profile {config[profile]} --out results/{config[profile]}/corpus 2>&1 | tee {log}"


rule clean:
    input:
        code("corpus"),
        out("corpus", "raw.jsonl"),
        out("corpus", "raw.manifest.json"),
    output:
        out("corpus", "train.jsonl"),
        out("corpus", "validation.jsonl"),
        out("corpus", "manifest.json"),
    params:
        corpus=SETTINGS["corpus"],
    threads: workflow.cores
    log:
        log_file("clean"),
    conda:
        ENV
    shell:
        "python -m gpt1 clean --profile {config[profile]} --raw results/{config[profile]}/corpus"
        " --out results/{config[profile]}/corpus 2>&1 | tee {log}"


rule bpe:
    input:
        code("tokenizer"),
        out("corpus", "train.jsonl"),
        out("corpus", "manifest.json"),
    output:
        out("tokenizer", "tokenizer.json"),
        out("tokenizer", "gpt1_tokenizer.json"),
    params:
        bpe=SETTINGS["bpe"],
        chunk_chars=SETTINGS["encode"]["chunk_chars"],
    threads: workflow.cores
    log:
        log_file("bpe"),
    conda:
        ENV
    shell:
        "python -m gpt1 bpe --profile {config[profile]} --corpus results/{config[profile]}/corpus"
        " --out results/{config[profile]}/tokenizer 2>&1 | tee {log}"


rule encode:
    input:
        code("ids", "tokenizer"),
        out("tokenizer", "tokenizer.json"),
        out("tokenizer", "gpt1_tokenizer.json"),
        out("corpus", "train.jsonl"),
        out("corpus", "validation.jsonl"),
    output:
        out("ids", "train.bin"),
        out("ids", "train.json"),
        out("ids", "validation.bin"),
        out("ids", "validation.json"),
    params:
        encode=SETTINGS["encode"],
    threads: workflow.cores
    log:
        log_file("encode"),
    conda:
        ENV
    shell:
        "python -m gpt1 encode --profile {config[profile]} --tokenizer results/{config[profile]}/tokenizer"
        " --corpus results/{config[profile]}/corpus --out results/{config[profile]}/ids 2>&1 | tee {log}"


def data_outputs():
    return rules.encode.output
