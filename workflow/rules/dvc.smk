# Record the outputs in DVC after a Snakemake run, so `dvc status` is clean and `dvc repro` reruns nothing.
# dvc.yaml interpolates the profile that params.yaml names; Snakemake may run another one (--config profile=...),
# whose outputs DVC cannot describe, so the record is made only when the two profiles agree.

with open("params.yaml") as handle:
    DVC_PROFILE = yaml.safe_load(handle)["profile"]


def dvc_commit_flag():
    if DVC_PROFILE == PROFILE:
        return out("dvc_commit.done")
    print(f"Note: params.yaml selects profile {DVC_PROFILE!r}, this run {PROFILE!r}: not recorded in DVC.",
          file=sys.stderr)
    return []


rule dvc_commit:
    input:
        data_outputs(),
    output:
        touch(out("dvc_commit.done")),
    log:
        log_file("dvc_commit"),
    conda:
        ENV
    shell:
        "dvc commit --force > {log} 2>&1"
