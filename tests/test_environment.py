"""environment.yml (the conda env of every rule) and pyproject.toml list the same dependencies."""

import re
import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
CONDA_TO_PYPI = {"pytorch": "torch", "huggingface_hub": "huggingface-hub"}
CONDA_ONLY = {"python", "pip"}


def split(requirement: str) -> tuple[str, str]:
    name, spec = re.match(r"^([A-Za-z0-9_.\-]+)\s*(.*)$", requirement.strip()).groups()
    return name.lower(), spec.replace(" ", "")


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pypi = dict(split(r) for r in project["dependencies"] + project["optional-dependencies"]["test"])
    conda = {}
    for entry in yaml.safe_load((REPO / "environment.yml").read_text())["dependencies"]:
        name, spec = split(entry)
        if name not in CONDA_ONLY:
            conda[CONDA_TO_PYPI.get(name, name)] = spec
    assert conda == pypi


def test_every_rule_env_is_the_project_environment():
    env = REPO / "workflow" / "envs" / "gpt1.yaml"
    assert env.resolve() == (REPO / "environment.yml").resolve()
    rules = "".join(p.read_text() for p in (REPO / "workflow" / "rules").glob("*.smk"))
    assert rules.count("conda:") == rules.count("\nrule ") and rules.count("shell:") == rules.count("\nrule ")
    assert 'ENV = "../envs/gpt1.yaml"' in (REPO / "workflow" / "rules" / "common.smk").read_text()
