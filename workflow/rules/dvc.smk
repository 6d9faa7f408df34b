# Record the outputs in DVC after a Snakemake run, so `dvc status` is clean and `dvc repro` reruns nothing.
# Only when params.yaml selects the profile Snakemake runs (see dvc_commit_flag in common.smk).


rule dvc_commit:
    input:
        data_outputs(),
        pretrain_outputs(),
        finetune_outputs(),
        analysis_outputs(),
        rules.report.output,
    output:
        touch(out("dvc_commit.done")),
    log:
        log_file("dvc_commit"),
    conda:
        ENV
    shell:
        "dvc commit --force > {log} 2>&1"
