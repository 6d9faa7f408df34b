# Data stages: fetch -> clean -> bpe -> encode.


rule fetch:
    input:
        code=code("fetch"),
    output:
        raw=out(layout.CORPUS, layout.RAW),
        manifest=out(layout.CORPUS, layout.RAW_MANIFEST),
    log:
        log_file("fetch"),
    conda:
        ENV
    params:
        profile=PROFILE,
        settings=settings("fetch"),
        out=folder_of_output("raw"),
    shell:
        "sh workflow/scripts/gpt1.sh fetch --profile {params.profile} --out {params.out} 2>&1 | tee {log}"


rule clean:
    input:
        code=code("clean"),
        raw=out(layout.CORPUS, layout.RAW),
        manifest=out(layout.CORPUS, layout.RAW_MANIFEST),
    output:
        train=out(layout.CORPUS, layout.corpus_split("train")),
        validation=out(layout.CORPUS, layout.corpus_split("validation")),
        manifest=out(layout.CORPUS, layout.CORPUS_MANIFEST),
    log:
        log_file("clean"),
    conda:
        ENV
    threads: workflow.cores
    params:
        profile=PROFILE,
        settings=settings("clean"),
        raw=folder_of_input("raw"),
        out=folder_of_output("train"),
    shell:
        "sh workflow/scripts/gpt1.sh clean --profile {params.profile} --raw {params.raw} --out {params.out} 2>&1 | tee {log}"


rule bpe:
    input:
        code=code("bpe"),
        train=out(layout.CORPUS, layout.corpus_split("train")),
        manifest=out(layout.CORPUS, layout.CORPUS_MANIFEST),
    output:
        tokenizer=out(layout.TOKENIZER, layout.TOKENIZER_FILE),
        meta=out(layout.TOKENIZER, layout.TOKENIZER_META),
    log:
        log_file("bpe"),
    conda:
        ENV
    threads: workflow.cores
    params:
        profile=PROFILE,
        settings=settings("bpe"),
        corpus=folder_of_input("train"),
        out=folder_of_output("tokenizer"),
    shell:
        "sh workflow/scripts/gpt1.sh bpe --profile {params.profile} --corpus {params.corpus} --out {params.out} 2>&1 | tee {log}"


rule encode:
    input:
        code=code("encode"),
        tokenizer=out(layout.TOKENIZER, layout.TOKENIZER_FILE),
        meta=out(layout.TOKENIZER, layout.TOKENIZER_META),
        train=out(layout.CORPUS, layout.corpus_split("train")),
        validation=out(layout.CORPUS, layout.corpus_split("validation")),
    output:
        train=out(layout.IDS, layout.ids_bin("train")),
        train_header=out(layout.IDS, layout.ids_header("train")),
        validation=out(layout.IDS, layout.ids_bin("validation")),
        validation_header=out(layout.IDS, layout.ids_header("validation")),
    log:
        log_file("encode"),
    conda:
        ENV
    threads: workflow.cores
    params:
        profile=PROFILE,
        settings=settings("encode"),
        tokenizer=folder_of_input("tokenizer"),
        corpus=folder_of_input("train"),
        out=folder_of_output("train"),
    shell:
        "sh workflow/scripts/gpt1.sh encode --profile {params.profile} --tokenizer {params.tokenizer} --corpus {params.corpus}"
        " --out {params.out} 2>&1 | tee {log}"
