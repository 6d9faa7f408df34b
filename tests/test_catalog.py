"""The Snakemake workflow catalog's conventions: snakefmt-clean rules, a license, the catalog's usage file, and a
config/README.md that leads to params.yaml."""

import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def test_snakefmt_leaves_the_workflow_unchanged():
    out = subprocess.run([sys.executable, "-m", "snakefmt", "--check", "workflow"], cwd=REPO, capture_output=True,
                         text=True)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_license_is_the_one_pyproject_names():
    license_text = (REPO / "LICENSE").read_text()
    assert tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["license"] == "MIT"
    assert license_text.startswith("MIT License") and "the gpt1 authors" in license_text


def test_the_catalog_file_says_how_to_run_it():
    usage = yaml.safe_load((REPO / ".snakemake-workflow-catalog.yml").read_text())["usage"]
    assert usage["software-stack-deployment"]["conda"] is True and usage["report"] is True
    assert "params.yaml" in usage["mandatory-flags"]["desc"]


def test_config_readme_leads_to_params_yaml_the_snakefile_loads():
    readme = (REPO / "config" / "README.md").read_text()
    assert "](../params.yaml)" in readme and (REPO / "params.yaml").is_file()
    assert 'configfile: "params.yaml"' in (REPO / "workflow" / "Snakefile").read_text()
