"""Open `snakemake --report` output in headless Chromium, show every table and figure it lists, screenshot each, and
fail if one shows nothing: the check that a person opening report.html sees the results.

    snakemake --report report.html
    apt-get install chromium            # Debian's Chromium; Playwright drives it, no browser download
    uv pip install playwright           # a tool, not a dependency of gpt1 (a throwaway venv is fine)
    python tools/report_screenshots.py report.html --out report-shots [--chromium /usr/bin/chromium]

Writes OUT/home.png, then OUT/<category>-<entry>.png per result; prints what each one shows.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

CATEGORIES = ("Tables", "Figures")  # the `category=` of the report() outputs in workflow/rules/report.smk


def show(page, category: str, out: Path) -> list[str]:
    """Click each entry of a category; returns problems (an empty table or an image that did not load)."""
    problems = []
    page.get_by_text(category, exact=True).first.click()
    page.wait_for_timeout(800)
    rows = page.locator("tr", has=page.locator("a[iconname=eye]"))
    names = [rows.nth(i).locator("td").first.inner_text().strip() for i in range(rows.count())]
    for index, name in enumerate(names):
        rows.nth(index).locator("a[iconname=eye]").click()
        page.wait_for_timeout(1200)
        shot = out / f"{category.lower()}-{re.sub(r'[^A-Za-z0-9_]+', '_', name)}.png"
        page.screenshot(path=str(shot))
        frames = [f for f in page.frames if f.url.startswith("data:text/html")]
        if frames:
            text = frames[-1].inner_text("body")
            cells = frames[-1].locator("td").count()
            print(f"{category}/{name}: HTML, {cells} table cells, {len(text)} characters -> {shot}")
            if cells == 0:
                problems.append(f"{category}/{name}: the page shows no table")
        else:
            width = page.evaluate("() => Math.max(0, ...[...document.images].map(i => i.naturalWidth))")
            print(f"{category}/{name}: image {width} px wide -> {shot}")
            if not width:
                problems.append(f"{category}/{name}: no image loaded")
    if not names:
        problems.append(f"{category}: the report lists no entries")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("report", type=Path, help="the HTML file `snakemake --report` wrote")
    parser.add_argument("--out", type=Path, default=Path("report-shots"))
    parser.add_argument("--chromium", default="/usr/bin/chromium", help="the browser binary Playwright drives")
    args = parser.parse_args()
    if not args.report.is_file():
        parser.error(f"{args.report}: no such file; make it with `snakemake --report {args.report}`")
    from playwright.sync_api import sync_playwright

    args.out.mkdir(parents=True, exist_ok=True)
    problems = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=args.chromium, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.goto(args.report.resolve().as_uri())
        page.wait_for_timeout(1500)
        page.screenshot(path=str(args.out / "home.png"))
        for category in CATEGORIES:
            page.goto(args.report.resolve().as_uri())  # back to the start: the menu is a single-page app
            page.wait_for_timeout(1000)
            problems += show(page, category, args.out)
        browser.close()
    for problem in problems:
        print(f"problem: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
