# The last rule: the paper's Tables 2-5 and Figure 2 beside our numbers (also in `snakemake --report report.html`).

TABLES = layout.REPORT_TABLES
FIGURES = layout.REPORT_FIGURES


rule report:
    input:
        code=code("report"),  # gpt1/report/paper.yaml among them
        # metrics for the cells; predictions for Table 5's paired tests
        finetune=[f for f in finetune_outputs() if f.endswith((layout.FINETUNE_METRICS, layout.PREDICTIONS))],
        analyses=analysis_outputs(),
        pretrain=[
            out(layout.pretrain_dir(model), name)
            for model in PRETRAINED
            for name in (layout.PRETRAIN_CURVES, layout.PRETRAIN_METRICS)
        ],
        # the page of samples: the GPT's snapshots continue the prompts of params.yaml's samples, through its tokenizer
        snapshots=out(layout.pretrain_dir("gpt"), layout.SNAPSHOTS),
        tokenizer=out(layout.TOKENIZER, layout.TOKENIZER_FILE),
        meta=out(layout.TOKENIZER, layout.TOKENIZER_META),
    output:
        # the report shows HTML inline (a CSV would only be a download)
        tables=[
            report(out(layout.table(t, "html")), caption=f"../report/{t}.rst", category="Tables", labels={"table": t})
            for t in TABLES
        ],
        markdown=[out(layout.table(t, fmt)) for t in TABLES for fmt in layout.TABLE_FORMATS if fmt != "html"],
        summary=out(layout.TABLES, layout.SUMMARY),
        samples=[
            report(out(layout.table(layout.SAMPLES, "html")), caption="../report/samples.rst", category="Samples"),
            out(layout.table(layout.SAMPLES, "md")),
        ],
        # the curated few numbers per stage: `dvc metrics show` and `dvc exp show` print them
        metrics=out(layout.METRICS),
        figures=[
            report(
                out(layout.figure(f, "png")), caption=f"../report/{f}.rst", category="Figures", labels={"figure": f}
            )
            for f in FIGURES
        ],
        svg=[out(layout.figure(f, "svg")) for f in FIGURES],
    log:
        log_file("report"),
    conda:
        ENV
    threads: FANOUT_THREADS  # the page of samples runs the GPT (pinned: cpu.threads)
    resources:
        gpu=GPU_SLOTS,
    params:
        profile=PROFILE,
        settings=settings("report"),
        # results/<profile>: the folder holding tables/ (the report writes there and reads what is beside it)
        results=lambda wildcards, output: os.path.dirname(os.path.dirname(output.summary)),
        out=lambda wildcards, output: os.path.dirname(os.path.dirname(output.summary)),
    shell:
        "sh workflow/scripts/gpt1.sh report --profile {params.profile} --results {params.results} --out {params.out}"
        " 2>&1 | tee {log}"
