"""The conda environments of the rules, pyproject.toml and the pins of constraints.txt agree."""

import re
import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
CONDA_TO_PYPI = {"pytorch": "torch", "huggingface_hub": "huggingface-hub"}
CONDA_ONLY = {"python", "pip"}
DRIVERS = {"snakemake", "dvc"}  # run the stages; not in the stages' environment (dvc has its own, for dvc_commit)
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def split(requirement: str) -> tuple[str, str]:
    name, spec = re.match(r"^([A-Za-z0-9_.\-]+)\s*(.*)$", requirement.strip()).groups()
    return name.lower(), spec.replace(" ", "")


def conda_packages(path: Path) -> dict[str, str]:
    """A conda environment file's packages under their PyPI names (python and pip left out)."""
    packages = dict(split(entry) for entry in yaml.safe_load(path.read_text())["dependencies"])
    return {CONDA_TO_PYPI.get(name, name): spec for name, spec in packages.items() if name not in CONDA_ONLY}


def test_environment_yml_holds_what_the_stages_run_at_pyprojects_versions():
    pypi = dict(split(r) for r in PROJECT["dependencies"])
    assert conda_packages(REPO / "environment.yml") == {k: v for k, v in pypi.items() if k not in DRIVERS}


def test_the_dvc_commit_env_holds_dvc_alone_at_pyprojects_version():
    pypi = dict(split(r) for r in PROJECT["dependencies"])
    assert conda_packages(REPO / "workflow" / "envs" / "dvc-commit.yaml") == {"dvc": pypi["dvc"]}


def test_every_rule_has_an_env_and_the_stages_share_the_project_environment():
    env = REPO / "workflow" / "envs" / "gpt1.yaml"
    assert env.resolve() == (REPO / "environment.yml").resolve()
    rules = "".join(p.read_text() for p in (REPO / "workflow" / "rules").glob("*.smk"))
    assert rules.count("conda:") == rules.count("\nrule ") == rules.count("shell:")
    assert rules.count("        ENV\n") == rules.count("\nrule ") - 1  # all but dvc_commit
    assert 'conda:\n        "../envs/dvc-commit.yaml"' in (REPO / "workflow" / "rules" / "dvc.smk").read_text()
    assert 'ENV = "../envs/gpt1.yaml"' in (REPO / "workflow" / "rules" / "common.smk").read_text()


def pins() -> dict[str, str]:
    lines = (REPO / "constraints.txt").read_text().splitlines()
    pairs = [line.split("==") for line in lines if line and not line.startswith("#")]
    return {re.sub(r"[-_.]+", "-", name).lower(): version for name, version in pairs}


def test_constraints_pin_every_requirement_at_a_version_it_allows():
    pinned = pins()
    requirements = [Requirement(r) for r in PROJECT["dependencies"] + PROJECT["optional-dependencies"]["test"]]
    for requirement in requirements:
        name = re.sub(r"[-_.]+", "-", requirement.name).lower()
        assert name in pinned, f"constraints.txt pins no {name}: regenerate it (its first lines say how)"
        assert requirement.specifier.contains(pinned[name]), f"{name}=={pinned[name]} is not {requirement}"


def test_setup_installs_the_pinned_torch_with_the_constraints():
    setup = (REPO / "setup.sh").read_text()
    assert f'torch_version=${{TORCH_VERSION:-{pins()["torch"]}}}' in setup
    assert '-c constraints.txt -e ".[test]"' in setup
