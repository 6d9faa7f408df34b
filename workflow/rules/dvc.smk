# Record the outputs in DVC after a Snakemake run, so `dvc status` is clean and `dvc repro` reruns nothing.
# Only when params.yaml selects the profile Snakemake runs (see dvc_commit_flag in common.smk).
# Bookkeeping in the repository: run by Snakemake itself, never submitted as a cluster job (the Slurm profile).


localrules:
    dvc_commit,


rule dvc_commit:
    input:
        data_outputs(),
        task_data_outputs(),
        pretrain_outputs(),
        finetune_outputs(),
        analysis_outputs(),
        rules.report.output,
    output:
        touch(out(layout.DVC_COMMIT_FLAG)),
    log:
        log_file("dvc_commit"),
    conda:
        "../envs/dvc-commit.yaml"
    shell:
        "dvc commit --force > {log} 2>&1"
