"""`python -m gpt1 <stage>`: how the workflow engines call the CLI (works from the repo root without install)."""

from gpt1.cli.main import entry

entry()
