"""Print the jobs Snakemake plans for a profile as JSON (run in a subprocess by test_dag.py).

`--detailed-summary` reports only what earlier runs recorded, so the planned DAG is read from the API.
"""

import json
import sys
from pathlib import Path

from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, ResourceSettings, StorageSettings


def planned_jobs(root: Path, profile: str) -> list[dict]:
    with SnakemakeApi(OutputSettings()) as api:
        workflow_api = api.workflow(
            resource_settings=ResourceSettings(cores=1),
            config_settings=ConfigSettings(config={"profile": profile}),
            storage_settings=StorageSettings(),
            snakefile=root / "workflow" / "Snakefile",
            workdir=root,
        )
        workflow_api.dag(dag_settings=DAGSettings(forceall=True))
        workflow = workflow_api._workflow  # no public API lists planned jobs with their files
        workflow._prepare_dag(forceall=True, ignore_incomplete=True, lock_warn_only=True)
        workflow._build_dag()
        return [
            {"rule": job.rule.name, "wildcards": [str(v) for v in job.wildcards],
             "input": [str(f) for f in job.input], "output": [str(f) for f in job.output],
             "log": [str(f) for f in job.log], "shell": job.shellcmd,
             "settings": dict(job.params).get("settings")}
            for job in workflow.dag.jobs
        ]


if __name__ == "__main__":
    print("JOBS " + json.dumps(planned_jobs(Path(sys.argv[1]), sys.argv[2])))
