# The last rule: the paper's Tables 2-5 and Figure 2 beside our numbers (also in `snakemake --report report.html`).

TABLES = ["table2", "table3", "table4", "table5"]
FIGURES = ["figure2_left", "figure2_right", "pretraining"]


rule report:
    input:
        code=code("report"),  # gpt1/paper.yaml among them
        # metrics for the cells; predictions for Table 5's paired tests
        finetune=[f for f in finetune_outputs() if f.endswith(("metrics.json", "predictions.jsonl"))],
        analyses=analysis_outputs(),
        pretrain=expand(out("pretrain", "{model}", "{file}"), model=PRETRAINED, file=["curves.csv", "metrics.json"]),
    output:
        # the report shows HTML inline (a CSV would only be a download)
        tables=[
            report(out("tables", f"{t}.html"), caption=f"../report/{t}.rst", category="Tables", labels={"table": t})
            for t in TABLES
        ],
        markdown=expand(out("tables", "{table}.{ext}"), table=TABLES, ext=["md", "tex", "csv"]),
        summary=out("tables", "summary.json"),
        # the curated few numbers per stage: `dvc metrics show` and `dvc exp show` print them
        metrics=out("metrics.json"),
        figures=[
            report(out("figures", f"{f}.png"), caption=f"../report/{f}.rst", category="Figures", labels={"figure": f})
            for f in FIGURES
        ],
        svg=expand(out("figures", "{figure}.svg"), figure=FIGURES),
    log:
        log_file("report"),
    conda:
        ENV
    params:
        profile=PROFILE,
        # results/<profile>: the folder holding tables/ (the report writes there and reads what is beside it)
        results=lambda wildcards, output: os.path.dirname(os.path.dirname(output.summary)),
        out=lambda wildcards, output: os.path.dirname(os.path.dirname(output.summary)),
        lists={
            k: config[k]
            for k in (
                "finetune_tasks",
                "finetune_variants",
                "seeds",
                "pretrain_models",
                "ablation_tasks",
                "layer_transfer_tasks",
            )
        },
    shell:
        "sh workflow/scripts/gpt1.sh report --profile {params.profile} --results {params.results} --out {params.out}"
        " 2>&1 | tee {log}"
