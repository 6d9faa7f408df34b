"""A Table as text: Markdown, LaTeX (booktabs), tidy CSV and a standalone HTML page, each through pandas
(DataFrame.to_markdown, Styler.to_latex, DataFrame.to_csv, Styler.to_html). What pandas has no notion of stays here:
the cells' texts and footnote markers (numbered once per table), the rule between the paper's rows and ours, bold
for a paired test below 5%, and the notes under the table."""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

import pandas as pd
from pandas.io.formats.style import Styler

from gpt1.evaluation.significance import RESAMPLES, average_test, column_test
from gpt1.report.numbers import round_half_up
from gpt1.report.tables import Column, Row, Table, code_name

SIGNIFICANT = 0.05  # a paired test below it is bold
TESTS_TITLE = (
    "Paired tests: the full model minus each ablation, in percent points, and the two-sided p-value of a "
    f"paired bootstrap over the evaluation examples both runs scored ({RESAMPLES} resamples; over the seeds "
    f"present in both, each side the mean of its seeds, the examples drawn once for all; {code_name(column_test)}); "
    f"Avg: the mean of the columns' differences, each report's examples drawn on its own ({code_name(average_test)}); "
    f"bold: p < {SIGNIFICANT} (each test on its own, not adjusted for the others)."
)


def number_notes(table: Table) -> dict[str, int]:
    """Footnote numbers in reading order (rows, then columns); each distinct text once."""
    numbers: dict[str, int] = {}
    for row in table.rows:
        for column in table.columns:
            for note in row.cells[column.key].notes:
                numbers.setdefault(note, len(numbers) + 1)
    return numbers


def tested_columns(table: Table) -> list[Column]:
    """The columns of the tests' table: every task column, and a computed one (Table 5's Avg) where it was tested."""
    named = {t.column for t in table.tests}
    return [c for c in table.columns if c.task is not None or c.key in named]


def cell_frames(table: Table) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The cells' texts and their footnote markers ('1,2'; '' for none): a row per method, a column per label."""
    numbers = number_notes(table)
    index = pd.Index([row.method for row in table.rows], name="Method")
    columns = [c.label for c in table.columns]
    texts = [[row.cells[c.key].text() for c in table.columns] for row in table.rows]
    marks = [[",".join(str(numbers[n]) for n in row.cells[c.key].notes) for c in table.columns] for row in table.rows]
    return pd.DataFrame(texts, index, columns), pd.DataFrame(marks, index, columns)


def test_frames(table: Table) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Table 5's paired tests: per ablation, 'Δ (p)' in each task column ('' where not tested), and where p < 5%."""
    labels = {row.variant: row.method.removeprefix("ours: ") for row in table.rows if row.source == "ours"}
    columns = {c.key: c.label for c in tested_columns(table)}
    names = list(dict.fromkeys(f"full vs {labels.get(t.variant, t.variant)}" for t in table.tests))
    index = pd.Index(names, name="Comparison")
    texts = pd.DataFrame("", index, list(columns.values()))
    significant = pd.DataFrame(False, index, list(columns.values()))
    for test in table.tests:
        where = (f"full vs {labels.get(test.variant, test.variant)}", columns[test.column])
        texts.loc[where] = f"{test.difference:+.1f} (p {test.p_value:.3f})"
        significant.loc[where] = test.p_value < SIGNIFICANT
    return texts, significant


def _framed(table: Table, escape: Callable[[str], str], mark: str, method: Callable[[Row], str]) -> pd.DataFrame:
    """The table's display texts: a first column `method(row)`, then each cell's text through `escape` with its
    footnote markers in `mark` ('' where it has none); the header through `escape`."""
    texts, marks = cell_frames(table)
    shown = texts.map(escape) + marks.map(lambda m: mark.format(m) if m else "")
    shown.insert(0, "Method", [method(row) for row in table.rows])
    return shown.rename(columns=escape).reset_index(drop=True)


# ---------------------------------------------------------------------------------------------------- Markdown


def md(text: str) -> str:
    return text.replace("|", "\\|")


def _align(frame: pd.DataFrame, align: str | None) -> str:
    return align or "l" + "r" * (frame.shape[1] - 1)


def markdown_table(frame: pd.DataFrame, bold: pd.DataFrame | None = None, align: str | None = None) -> str:
    """A pipe table of Markdown cells (no number parsing); `bold` (True or False, the frame's shape): the cells to
    set in bold; `align`, a letter per column (l, r): by default the first column left, the others right."""
    if bold is not None:
        frame = frame.where(~bold.to_numpy(), "**" + frame + "**")
    sides = {"l": "left", "r": "right"}
    return frame.to_markdown(index=False, disable_numparse=True, colalign=[sides[a] for a in _align(frame, align)])


def to_markdown(table: Table) -> str:
    def method(row: Row) -> str:
        return md(f"**{row.method}**" if row.source == "ours" else row.method)

    numbers = number_notes(table)
    lines = [f"# {table.title}", "", markdown_table(_framed(table, md, " [{}]", method))]
    if numbers:
        lines += ["", "Footnotes:", ""] + [f"{n}. {md(text)}" for text, n in numbers.items()]
    lines += ["", "Notes:", ""] + [f"- {md(note)}" for note in table.notes]
    if table.tests or table.untested:
        lines += ["", TESTS_TITLE]
    if table.tests:
        tests, significant = test_frames(table)
        bold = significant.reset_index().assign(Comparison=False)
        lines += ["", markdown_table(tests.map(md).rename(index=md, columns=md).reset_index(), bold)]
    lines += [""] * bool(table.untested) + [f"- {md(line)}" for line in table.untested]  # a list after the table
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------- LaTeX

_TEX = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "—": "---",
    "–": "--",
    "±": r"$\pm$",
    "Δ": r"$\Delta$",
    "×": r"$\times$",
    "−": "--",
    "→": r"$\rightarrow$",
    "λ": r"$\lambda$",
    "“": "``",
    "”": "''",
}
TEX_HEADER = "% Rendered by gpt1 report (gpt1/report/renderers.py); needs \\usepackage{booktabs,graphicx}."


def tex(text: str) -> str:
    """LaTeX's special characters escaped (pandas' escape="latex" leaves ±, Δ, — and the like as they are)."""
    return "".join(_TEX.get(ch, ch) for ch in text)


def latex_tabular(frame: pd.DataFrame, bold: pd.DataFrame | None = None, align: str | None = None) -> str:
    """A booktabs tabular of LaTeX cells, the header bold; `bold` (True or False, the frame's shape): the cells to
    set in bold; `align` as markdown_table's."""
    styler = frame.style.hide(axis="index").map_index(lambda _: "textbf: --rwrap;", axis=1)
    if bold is not None:
        props = (
            bold.map(lambda b: "textbf: --rwrap;" if b else "").set_axis(frame.index).set_axis(frame.columns, axis=1)
        )
        styler = styler.apply(lambda _: props, axis=None)
    return styler.to_latex(hrules=True, column_format=_align(frame, align)).rstrip("\n")


def to_latex(table: Table) -> str:
    """A booktabs table (needs \\usepackage{booktabs,graphicx}); footnotes, notes and the paired tests under it."""
    first_ours = next((row for row in table.rows if row.source == "ours"), None)

    def method(row: Row) -> str:  # a rule above our rows, when they follow the paper's (Table 5 interleaves them)
        rule = "\\midrule\n" if table.name != "table5" and row is first_ours else ""
        return rule + (rf"\textit{{{tex(row.method)}}}" if row.source == "ours" else tex(row.method))

    lines = [
        TEX_HEADER,
        r"\begin{table}[t]",
        r"\centering",
        rf"\caption{{{tex(table.title)}}}",
        rf"\label{{tab:{table.name}}}",
        r"\resizebox{\textwidth}{!}{%",
        latex_tabular(_framed(table, tex, r"\textsuperscript{{{}}}", method)) + "}",
        r"\par\smallskip\footnotesize",
    ]
    lines += [rf"\textsuperscript{{{n}}}~{tex(text)}\par" for text, n in number_notes(table).items()]
    lines += [rf"{tex(note)}\par" for note in table.notes]
    if table.tests:
        tests, significant = test_frames(table)
        frame = tests.map(tex).rename(index=tex, columns=tex).reset_index()
        bold = significant.reset_index().assign(Comparison=False)
        lines += [r"\medskip", latex_tabular(frame, bold) + r"\par", rf"{tex(TESTS_TITLE)}\par"]
    lines += [rf"{tex(line)}\par" for line in table.untested] + [r"\end{table}"]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------- CSV

CSV_COLUMNS = (
    "table", "method", "source", "variant", "column", "label", "value", "se", "sd", "seeds", "paper", "diff",
    "value_exact", "text", "notes", "p_value", "examples",
)  # fmt: skip


def _num(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def csv_rows(table: Table) -> list[dict[str, Any]]:
    """Tidy: one row per cell, numbers as printed (value_exact unrounded), footnotes joined by ' | '; then a row per
    paired test (source paired_test: value = full - ablation, in percent points)."""
    rows = [
        {
            "table": table.name,
            "method": row.method,
            "source": row.source,
            "variant": row.variant or "",
            "column": column.key,
            "label": column.label,
            "value": _num(cell.shown),
            "se": _num(None if cell.se is None else round_half_up(cell.se)),
            "sd": _num(None if cell.sd is None else round_half_up(cell.sd)),
            "seeds": " ".join(map(str, cell.seeds)),
            "paper": _num(cell.paper),
            "diff": _num(cell.diff),
            "value_exact": _num(cell.value, 4),
            "text": cell.text(),
            "notes": " | ".join(cell.notes),
        }
        for row in table.rows
        for column, cell in ((c, row.cells[c.key]) for c in table.columns)
    ]
    labels = {c.key: c.label for c in table.columns}
    rows += [
        {
            "table": table.name,
            "method": f"full vs {test.variant}",
            "source": "paired_test",
            "variant": test.variant,
            "column": test.column,
            "label": labels[test.column],
            "value": _num(test.difference),
            "seeds": " ".join(map(str, test.seeds)),
            "value_exact": _num(test.difference, 4),
            "text": f"{test.difference:+.1f} (p {test.p_value:.3f})",
            "notes": f"paired bootstrap, {test.resamples} resamples, metric {test.metric}",
            "p_value": f"{test.p_value:.4f}",
            "examples": test.examples,
        }
        for test in table.tests
    ]
    return rows


def to_csv(table: Table) -> str:
    frame = pd.DataFrame(csv_rows(table), columns=list(CSV_COLUMNS), dtype=object)
    return frame.to_csv(index=False, lineterminator="\n")


# ---------------------------------------------------------------------------------------------------- HTML

HTML_STYLE = """
body { font-family: system-ui, sans-serif; font-size: 13px; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin-bottom: 1em; }
th, td { padding: 3px 8px; border-bottom: 1px solid #ddd; text-align: right; }
td.col0 { white-space: nowrap; }
th.col0, td.col0 { text-align: left; }
thead th { border-bottom: 2px solid #444; }
td.ours { font-weight: 600; background: #f3f7fb; }
td.significant { font-weight: 600; }
sup { color: #666; font-weight: normal; }
.notes { max-width: 75em; color: #444; }
"""


def html_table(frame: pd.DataFrame, uuid: str, classes: pd.DataFrame | None = None) -> str:
    """A table of HTML cells and headers; each cell of classes data, row<i>, col<j> and those `classes` (the frame's
    shape) gives it."""
    styler = Styler(frame, uuid=uuid, cell_ids=False).hide(axis="index")
    if classes is not None:
        styler = styler.set_td_classes(classes.set_axis(frame.index).set_axis(frame.columns, axis=1))
    return styler.to_html().replace('<style type="text/css">\n</style>\n', "")  # no styles: no empty block


def html_page(title: str, body: list[str], style: str = HTML_STYLE) -> str:
    """A standalone page (Snakemake's report shows it inline)."""
    head = f'<html lang="en"><head><meta charset="utf-8">\n<title>{html.escape(title)}</title><style>{style}</style>'
    return "\n".join(["<!DOCTYPE html>", head + "</head><body>", *body, "</body></html>"]) + "\n"


def _items(kind: str, lines: list[str]) -> list[str]:
    return [f'<{kind} class="notes">', *(f"<li>{html.escape(line)}</li>" for line in lines), f"</{kind}>"]


def to_html(table: Table) -> str:
    """The table (our rows highlighted), footnotes, notes and the paired tests (those below 5% in bold)."""
    shown = _framed(table, html.escape, "<sup>{}</sup>", lambda row: html.escape(row.method))
    sources = pd.DataFrame([[row.source] * shown.shape[1] for row in table.rows])
    body = [f"<h2>{html.escape(table.title)}</h2>", html_table(shown, table.name, sources)]
    numbers = number_notes(table)
    body += (_items("ol", list(numbers)) if numbers else []) + _items("ul", table.notes)
    if table.tests or table.untested:
        body.append(f'<p class="notes">{html.escape(TESTS_TITLE)}</p>')
    if table.tests:
        tests, significant = test_frames(table)
        frame = tests.map(html.escape).rename(index=html.escape, columns=html.escape).reset_index()
        classes = significant.reset_index().assign(Comparison=False).map(lambda s: "significant" if s else "")
        body.append(html_table(frame, f"{table.name}_tests", classes))
    if table.untested:
        body += _items("ul", table.untested)
    return html_page(table.title, body)


RENDERERS: dict[str, Callable[[Table], str]] = {"md": to_markdown, "tex": to_latex, "csv": to_csv, "html": to_html}
TABLE_FORMATS = tuple(RENDERERS)  # html: what `snakemake --report` shows inline
