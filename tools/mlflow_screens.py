"""`mlflow ui` as a user sees it: screenshots in headless Chromium, and a failure when a view shows nothing.

    apt-get install chromium      # Debian's Chromium, driven through its DevTools protocol (aiohttp: MLflow needs it)
    python tools/mlflow_screens.py --backend-store-uri sqlite:///mlflow.db --out docs/mlflow_ui

Starts `mlflow server` on a free 127.0.0.1 port against the store (it only reads it), opens a fresh browser profile
(a first visit: nothing remembered) at --size, and goes where a user goes, saving:

    home.png        the home page `mlflow ui` opens on, the experiment listed with its description
    experiment.png  the experiment as a click on its name opens it (MLflow 3.17: the GenAI overview, whatever the
                    experiment's tags say: the GenAI / Model training switch, kept in the browser, decides)
    training.png    the experiment after a click on the sidebar's Model training switch: the runs table as MLflow
                    shows it unasked (the stages' runs nested under their pipeline's report run)
    runs.png        gpt1.pipeline.tracking.ui_url, the address the report stage prints (the MLflow Assistant panel
                    closed first, as a user would): the saved view "gpt1 pipelines", the runs grouped by pipeline, the
                    report's curated metrics as columns
    reports.png     Views -> "gpt1 reports": a row per pipeline (its report run), the curated metrics as columns
    compare.png     its first two rows ticked, Compare, "Show diff only" on the parameters: the settings that differ
                    between the two pipelines, then the metrics side by side

Each view has to show what it is for, read from the store (the experiment's name, the newest pipeline and run, a
curated metric, the differing parameters and their values) within --timeout seconds, and be more than a blank image;
otherwise the tool prints one line naming the view and what is missing, and exits 1 (2: a wrong argument, or a store
without what a view needs). It prints one line per view: what it shows and the file. It stops the server and the
browser it started.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # gpt1, when run from a checkout

from gpt1.pipeline.tracking import PIPELINE_TAG, PIPELINES_VIEW, REPORTS_VIEW, VIEW_METRICS, VIEWS, ui_url

HOST = "127.0.0.1"
SCREENS = ("home", "experiment", "training", "runs", "reports", "compare")
SERVER_START_SECONDS = 180.0
MIN_COLOURS = 16  # a screenshot of fewer colours is a blank page, a spinner or a lone message


class ScreenError(RuntimeError):
    """A view showed nothing, or what it had to show was missing: one line naming the view."""


class UsageError(RuntimeError):
    """The store lacks what a view needs, or an argument is wrong."""


# ---------------------------------------------------------------------------------------------------- the store


@dataclass
class Expected:
    """What the store says each view must show."""

    experiment_id: str
    experiment: str
    newest_run: str  # the name of the newest run of a pipeline (of any run if none has a pipeline tag)
    newest_pipeline: str | None  # its gpt1.pipeline_run tag
    metrics: list[str]  # the curated metrics some run logged
    reports: list[Any]  # the report runs, newest first (mlflow Run objects)
    compared: list[Any] = field(default_factory=list)  # the two report runs the compare page shows
    changed: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)  # param -> (first's, second's)

    def compare_ids(self, run_ids: list[str]) -> None:
        """The runs the compare page shows (in its order), and the parameters that differ between them."""
        by_id = {run.info.run_id: run for run in self.reports}
        if len(run_ids) != 2 or not set(run_ids) <= set(by_id):
            raise ScreenError(f"compare: the page compares {run_ids}, not two report runs")
        self.compared = [by_id[run_id] for run_id in run_ids]
        first, second = (run.data.params for run in self.compared)
        self.changed = {key: (first.get(key), second.get(key)) for key in sorted(first.keys() | second.keys())
                        if first.get(key) != second.get(key)}


def read_store(uri: str, experiment: str, screens: list[str]) -> Expected:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise UsageError(f"{uri}: no experiment {experiment!r} (params.yaml mlflow.experiment names it)")
    runs = client.search_runs([found.experiment_id], max_results=100, order_by=["attributes.start_time DESC"])
    if not runs:
        raise UsageError(f"{uri}: experiment {experiment!r} holds no runs")
    newest = next((run for run in runs if PIPELINE_TAG in run.data.tags), runs[0])
    logged = {key for run in runs for key in run.data.metrics}
    reports = client.search_runs([found.experiment_id], "tags.`gpt1.stage` = 'report'", max_results=100,
                                 order_by=["attributes.start_time DESC"])
    needed = 2 if "compare" in screens else 1 if "reports" in screens else 0
    if len(reports) < needed:
        raise UsageError(f"{uri}: the {'compare' if needed == 2 else 'reports'} view needs {needed} report runs, the "
                         f"store has {len(reports)} (leave the view out with --views)")
    return Expected(found.experiment_id, experiment, newest.info.run_name, newest.data.tags.get(PIPELINE_TAG),
                    [name for name in VIEW_METRICS if name in logged], reports)


# ---------------------------------------------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def mlflow_server(uri: str, artifact_args: list[str], log: Path) -> Iterator[str]:
    """`mlflow server` on a free port of 127.0.0.1, stopped (its whole process group) on the way out."""
    port = free_port()
    command = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri, "--host", HOST, "--port",
               str(port), "--workers", "1", *artifact_args]
    with open(log, "w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://{HOST}:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_SECONDS
        while True:
            if proc.poll() is not None:
                raise UsageError(f"mlflow server exited ({proc.returncode}): {log.read_text()[-600:].strip()}")
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{base}/health", timeout=5) as answer:
                if answer.status == 200:
                    break
            if time.monotonic() > deadline:
                raise UsageError(f"mlflow server did not answer in {SERVER_START_SECONDS:g} s: {log}")
            time.sleep(0.5)
        yield base
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the process group it leads, SIGKILL after 10 s."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


class Browser:
    """One headless Chromium page driven through the DevTools protocol."""

    def __init__(self, chromium: str, size: tuple[int, int], profile: Path) -> None:
        self.size = size
        self.proc = subprocess.Popen(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
             "--no-default-browser-check", "--disable-extensions", "--force-device-scale-factor=1",
             f"--user-data-dir={profile}", "--remote-debugging-port=0", f"--window-size={size[0]},{size[1]}",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self.profile = profile
        self.ids = 0

    async def connect(self) -> None:
        import aiohttp

        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise UsageError(f"chromium did not start (exit {self.proc.poll()})")
            await asyncio.sleep(0.2)
        port = port_file.read_text().split()[0]
        self.session = aiohttp.ClientSession()
        async with self.session.get(f"http://{HOST}:{port}/json/list") as answer:
            pages = [t for t in await answer.json() if t.get("type") == "page"]
        self.ws = await self.session.ws_connect(pages[0]["webSocketDebuggerUrl"], max_msg_size=0)
        await self.send("Emulation.setDeviceMetricsOverride", width=self.size[0], height=self.size[1],
                        deviceScaleFactor=1, mobile=False)

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.ws.close()
        with contextlib.suppress(Exception):
            await self.session.close()
        _stop(self.proc)

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        self.ids += 1
        await self.ws.send_json({"id": self.ids, "method": method, "params": params})
        while True:  # events (no id) are not listened to
            message = json.loads((await self.ws.receive()).data)
            if message.get("id") == self.ids:
                if "error" in message:
                    raise ScreenError(f"DevTools {method}: {message['error'].get('message')}")
                return message.get("result", {})

    async def evaluate(self, expression: str) -> Any:
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return result.get("result", {}).get("value")

    async def goto(self, url: str) -> None:
        await self.send("Page.navigate", url=url)

    async def text(self) -> str:
        return await self.evaluate("document.body ? document.body.innerText : ''") or ""

    async def wait_for(self, texts: list[str], timeout: float) -> list[str]:
        """Wait until the page's text holds every one of `texts`, then for it to settle; returns those missing."""
        deadline = time.monotonic() + timeout
        while True:
            page = await self.text()
            missing = [t for t in texts if t not in page]
            if not missing or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        await asyncio.sleep(1.5)  # what loads after the names (icons, values) lands before the screenshot
        return missing

    async def until(self, expression: str, timeout: float) -> bool:
        """Wait up to `timeout` seconds for a JavaScript expression to be true."""
        deadline = time.monotonic() + timeout
        while not await self.evaluate(f"Boolean({expression})"):
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.3)
        return True

    async def click(self, text: str | None, selector: str = "button, a, [role=button], label, span") -> bool:
        """Click, with the mouse, the innermost visible element matching `selector` whose text (or aria-label) is
        `text` (None: any); False when there is none."""
        script = f"""(() => {{
            const want = {json.dumps(text)};
            const hits = [...document.querySelectorAll({json.dumps(selector)})].filter(e =>
                (want === null || (e.innerText || '').trim() === want || e.getAttribute('aria-label') === want) &&
                e.getClientRects().length > 0);
            const hit = hits.find(e => ![...e.querySelectorAll('*')].some(c => hits.includes(c))) || hits[0];
            if (!hit) return null;
            hit.scrollIntoView({{block: 'nearest'}});
            const box = hit.getBoundingClientRect();
            return [box.x + box.width / 2, box.y + box.height / 2];
        }})()"""
        where = await self.evaluate(script)
        if not where:
            return False
        x, y = where
        await self.send("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
        for kind in ("mousePressed", "mouseReleased"):
            await self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)
        return True

    async def screenshot(self, path: Path) -> None:
        shot = await self.send("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(shot["data"]))


def blank(path: Path) -> bool:
    from PIL import Image

    with Image.open(path) as image:
        colours = image.convert("RGB").getcolors(maxcolors=MIN_COLOURS)
    return colours is not None  # None: more colours than MIN_COLOURS


def compact(path: Path) -> None:
    """The screenshot in 256 colours (a third of the bytes; a UI has few): small enough to commit."""
    from PIL import Image

    with Image.open(path) as image:
        small = image.convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    small.save(path, optimize=True)


# ---------------------------------------------------------------------------------------------------- the views


ROWS = "document.querySelectorAll('.ag-center-cols-container .ag-row').length"
# Tick the first two rows of the runs table (their selection boxes), as a user does before Compare.
TICK_TWO = """(() => {
    const rows = new Map();
    for (const box of document.querySelectorAll('.ag-row input.ag-checkbox-input')) {
        const row = box.closest('.ag-row').getAttribute('row-index');
        if (!rows.has(row)) rows.set(row, box);
    }
    const boxes = [...rows.values()].slice(0, 2);
    boxes.forEach(box => box.click());
    return boxes.length === 2;
})()"""
# The compare page's "Run details" at the top of the window (the runs' names), the parameters and metrics below.
SCROLL_TO_DETAILS = """(() => {
    const hits = [...document.querySelectorAll('body *')].filter(e => (e.innerText || '').trim() === 'Run details');
    const heading = hits.find(e => ![...e.querySelectorAll('*')].some(c => hits.includes(c)));
    if (heading) heading.scrollIntoView({block: 'start'});
    return Boolean(heading);
})()"""


async def in_sight(browser: Browser, expected: Expected) -> str:
    headers = await browser.evaluate("[...document.querySelectorAll('.ag-header-cell')].map(e => e.innerText.trim())")
    return ", ".join(name for name in expected.metrics if name in (headers or [])) or "none"


def check(view: str, path: Path, missing: list[str]) -> None:
    if missing:
        raise ScreenError(f"{view}: the view is empty or wrong, it does not show {', '.join(map(repr, missing))} "
                          f"({path})")
    if blank(path):
        raise ScreenError(f"{view}: the screenshot is blank (fewer than {MIN_COLOURS} colours) ({path})")


async def take(browser: Browser, base: str, expected: Expected, views: list[str], out: Path,
               timeout: float) -> list[str]:
    """The views in turn, as one user's first visit; returns a line per view."""
    lines = []
    experiment_page = f"{base}/#/experiments/{expected.experiment_id}"
    metric = expected.metrics[:1]
    # The views' columns are the report's curated metrics: a store with report runs but none of them shows none.
    uncurated = [] if metric or not expected.reports else [f"a curated metric ({', '.join(VIEW_METRICS)}): no "
                                                           "report run logged one (made before they were logged?)"]

    async def shoot(view: str, want: list[str], extra: list[str] | None = None) -> Path:
        missing = await browser.wait_for(want, timeout)
        path = out / f"{view}.png"
        await browser.screenshot(path)
        check(view, path, missing + (extra or []))
        compact(path)
        return path

    async def tab() -> str:
        """The experiment page's tab in the address (#/experiments/<id>/<tab>), once the page has moved to one."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if name := await browser.evaluate("location.hash.split('?')[0].split('/')[3] || ''"):
                return name
            await asyncio.sleep(0.5)
        return ""

    async def not_active(view: str) -> list[str]:
        """[] when the runs page shows the saved view `view` (its name on the Views button), else what is missing."""
        active = await browser.evaluate(
            "(document.querySelector('[data-testid=saved-views-trigger]') || {innerText: ''}).innerText.trim()")
        return [] if active == view else [f"{view} (the Views button says {active!r})"]

    async def close_assistant() -> None:
        """Close the MLflow Assistant panel, as a user would for room (it opens itself on a first visit)."""
        if "MLflow Assistant" in await browser.text() and await browser.click("Close", "button"):
            await asyncio.sleep(1)

    if "home" in views:
        await browser.goto(f"{base}/")
        path = await shoot("home", [expected.experiment, "Experiments"])
        lines.append(f"home: MLflow's home page, experiment {expected.experiment!r} listed -> {path}")
    if "experiment" in views:
        await browser.goto(experiment_page)  # where a click on the experiment's name goes
        opened = await tab()
        path = await shoot("experiment", [expected.experiment], [] if opened else ["a tab of the experiment"])
        lines.append(f"experiment: opens on its {opened!r} tab -> {path}")
    if "training" in views:
        for _ in range(3):  # the GenAI overview's pop-up takes the first click, whenever it shows up
            if await browser.click("Got it", "button"):
                await asyncio.sleep(1)
            if not await browser.click("Model training"):  # the sidebar's switch: kept in the browser from now on
                raise ScreenError("training: no 'Model training' switch in the sidebar")
            if await browser.until("location.hash.includes('workflowType=machine_learning')", 10):
                break
        await browser.goto(experiment_page)
        opened = await tab()
        want = [expected.experiment, "Run Name", "report"]
        await browser.wait_for(want, timeout)
        rows = await browser.evaluate(ROWS) or 0
        path = await shoot("training", want, [] if opened == "runs" else [f"the runs (it opened on {opened!r})"])
        lines.append(f"training: after a click on Model training the experiment opens on {opened!r}, {rows} rows "
                     f"-> {path}")
    if "runs" in views:
        await browser.goto(ui_url(expected.experiment_id, base, PIPELINES_VIEW))  # the address the report prints
        want = [expected.newest_run, *metric]
        want += [f"Group: {expected.newest_pipeline}"] if expected.newest_pipeline else []
        await browser.wait_for(want, timeout)
        await close_assistant()
        rows = await browser.evaluate(ROWS) or 0
        untagged = "" if expected.newest_pipeline else f": no run carries the tag {PIPELINE_TAG}"
        extra = uncurated + ([] if rows >= 2 else [f"rows of runs (the table has {rows}{untagged})"])
        path = await shoot("runs", want, extra + await not_active(VIEWS[PIPELINES_VIEW]))
        lines.append(f"runs: view {VIEWS[PIPELINES_VIEW]!r}, {rows} rows grouped by {PIPELINE_TAG}, the newest "
                     f"{expected.newest_pipeline} first; metric columns in sight: {await in_sight(browser, expected)} "
                     f"-> {path}")
    if {"reports", "compare"} & set(views):
        if "runs" not in views:  # (from the runs page already, a change of address would hang MLflow 3.17's table)
            await browser.goto(f"{experiment_page}/runs?workflowType=machine_learning")
            await browser.wait_for(["Run Name"], timeout)
            await close_assistant()
        name = VIEWS[REPORTS_VIEW]
        menu = await browser.click(None, "[data-testid=saved-views-trigger]")
        if not (menu and await browser.until(f"document.querySelector('[data-testid=saved-views-item-{REPORTS_VIEW}]')",
                                             timeout) and await browser.click(name, "[role=menuitem]")):
            raise ScreenError(f"reports: the Views menu does not list {name!r}")
        pipelines = [run.data.tags.get(PIPELINE_TAG) for run in expected.reports[:2]]
        want = [*[p for p in pipelines if p], *metric]
        await browser.wait_for(want, timeout)
        rows = await browser.evaluate(ROWS) or 0
        extra = uncurated + ([] if rows else ["a row (the table has none)"])
        path = await shoot("reports", want, extra + await not_active(name))
        if "reports" in views:
            lines.append(f"reports: view {name!r} from the Views menu, {rows} rows, a report per pipeline; metric "
                         f"columns in sight: {await in_sight(browser, expected)} -> {path}")
    if "compare" in views:
        if not (await browser.evaluate(TICK_TWO) and await browser.click("Compare", "button")):
            raise ScreenError("compare: two report runs could not be ticked and compared")
        missing = await browser.wait_for(["Parameters", "Show diff only", *metric], timeout)
        if not missing:
            await browser.click("Show diff only", "span, label, div")  # the first: the parameters'
            await browser.evaluate(SCROLL_TO_DETAILS)
        ids = json.loads(await browser.evaluate("new URLSearchParams(location.hash.split('?')[1]).get('runs')") or "[]")
        expected.compare_ids(ids)
        want = [*expected.changed, *[value for pair in expected.changed.values() for value in pair if value]]
        want += [run.info.run_name for run in expected.compared]
        path = await shoot("compare", missing + want,
                           [] if expected.changed else ["a parameter that differs (none does)"])
        names = [run.data.tags.get(PIPELINE_TAG, run.info.run_name) for run in expected.compared]
        changed = "; ".join(f"{key}: {a} -> {b}" for key, (a, b) in expected.changed.items())
        lines.append(f"compare: {' vs '.join(names)}, parameters that differ: {changed} -> {path}")
    return lines


async def _main(args: argparse.Namespace, expected: Expected, base: str, profile: Path) -> list[str]:
    browser = Browser(args.chromium, args.size, profile)
    try:
        await browser.connect()
        return await take(browser, base, expected, args.views, args.out, args.timeout)
    finally:
        await browser.close()


def size(text: str) -> tuple[int, int]:
    width, _, height = text.partition("x")
    return int(width), int(height)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend-store-uri", default=os.environ.get("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db"))
    parser.add_argument("--artifacts-destination", help="passed to mlflow server")
    parser.add_argument("--default-artifact-root", help="passed to mlflow server")
    parser.add_argument("--experiment", default="gpt1")
    parser.add_argument("--out", type=Path, default=Path("mlflow-screens"))
    parser.add_argument("--views", default=",".join(SCREENS), help=f"a comma-separated subset of {','.join(SCREENS)}")
    parser.add_argument("--size", type=size, default=(1280, 800), help="the window, WIDTHxHEIGHT (1280x800)")
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds a view may take to show its content")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = parser.parse_args(argv)
    args.views = [v for v in args.views.split(",") if v]
    if unknown := set(args.views) - set(SCREENS):
        parser.error(f"--views: {', '.join(sorted(unknown))} unknown; choose from {', '.join(SCREENS)}")
    if not Path(args.chromium).is_file():
        parser.error(f"--chromium {args.chromium}: not found (Debian: apt-get install chromium)")
    artifact_args = []
    for option in ("artifacts_destination", "default_artifact_root"):
        if getattr(args, option):
            artifact_args += [f"--{option.replace('_', '-')}", getattr(args, option)]
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        expected = read_store(args.backend_store_uri, args.experiment, args.views)
        with tempfile.TemporaryDirectory(prefix="mlflow-screens-") as scratch, \
                mlflow_server(args.backend_store_uri, artifact_args, Path(scratch, "server.log")) as base:
            lines = asyncio.run(_main(args, expected, base, Path(scratch, "profile")))
    except UsageError as err:
        print(f"mlflow_screens: {err}", file=sys.stderr)
        return 2
    except ScreenError as err:
        print(f"mlflow_screens: {err}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
