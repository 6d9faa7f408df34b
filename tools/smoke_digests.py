"""Write tests/fixtures/smoke_digests.json, the bytes of every smoke output, from a whole smoke pipeline run: after a
change that is meant to change results, and committed with it. tests/test_workflow.py only ever reads the file.

    .venv/bin/python tools/smoke_digests.py [--work DIR]

Refused where CI is set (a run must never write the digests it is checked against), and it says which outputs moved
and on which processor they were written (tests/fixtures/smoke_digests_host.json): the pinned mode gives every
x86-64 host with AVX2 and FMA the same bytes whatever its vendor (gpt1.training.numerics), so the tests compare with
them on every host and a failure names both processors.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO)]  # the smoke checkout the tests run (pipeline_repo, which reads bench/)

from pipeline_repo import COMMITTED_DIGESTS, DIGESTS_HOST, output_digests, smoke_repo  # noqa: E402

from gpt1.training.numerics import processor, vendor  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, help="an empty folder for the smoke checkout (default: a new one)")
    args = parser.parse_args(argv)
    if os.environ.get("CI"):
        print("smoke_digests: refused under CI (CI is set): the digests are written on a developer's machine and "
              "committed, never by the run that checks them", file=sys.stderr)
        return 2
    work = args.work or Path(tempfile.mkdtemp(prefix="gpt1-smoke-digests-"))
    if work.exists() and any(work.iterdir()):
        parser.error(f"--work {work} is not empty; give a new folder")
    root, _, _ = smoke_repo(work)
    new, old = output_digests(root), json.loads(COMMITTED_DIGESTS.read_text())
    moved = sorted(name for name in new.keys() | old.keys() if new.get(name) != old.get(name))
    COMMITTED_DIGESTS.write_text(json.dumps(new, indent=1, sort_keys=True) + "\n")
    DIGESTS_HOST.write_text(json.dumps({"processor": processor(), "vendor": vendor()}, indent=1) + "\n")
    print(f"smoke_digests: {len(new)} outputs on {processor()}; {len(moved)} moved: {', '.join(moved[:20])}"
          f"{' ...' if len(moved) > 20 else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
