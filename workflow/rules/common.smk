# Validation, the profile, and path helpers every rule file uses.
import os
import sys

import yaml

sys.path.insert(0, str(Path(workflow.basedir).parent))  # the gpt1 package, importable without installing
from gpt1.config import ConfigError, check_semantics  # noqa: E402

validate(config, "../schemas/params.schema.yaml")
try:
    check_semantics(config)  # the cross-field rules JSON Schema cannot say
except ConfigError as err:
    raise WorkflowError(f"params.yaml: {err}") from None

PROFILE = config["profile"]
SETTINGS = config["profiles"][PROFILE]
ENV = "../envs/gpt1.yaml"


def out(*parts):
    """A path under results/<profile>/."""
    return "/".join(("results", PROFILE) + parts)


def log_file(name):
    return out("logs", f"{name}.log")


def code(*modules):
    """The package modules a stage runs: a change to them reruns the stage (in DVC too)."""
    return [f"gpt1/{m}.py" for m in modules]
