"""A Table as text: Markdown, LaTeX (booktabs), tidy CSV and a standalone HTML page; footnotes numbered once."""

from __future__ import annotations

import csv
import html
import io
from collections.abc import Callable, Iterable, Mapping, Sequence

from gpt1.report.numbers import round_half_up
from gpt1.report.tables import Cell, Column, Table
from gpt1.significance import RESAMPLES

TESTS_TITLE = (
    "Paired tests: the full model minus each ablation, in percent points, and the two-sided p-value of a "
    f"paired bootstrap over the evaluation examples both runs scored ({RESAMPLES} resamples; seeds present "
    "in both pooled; gpt1/significance.py)."
)


def number_notes(table: Table) -> dict[str, int]:
    """Footnote numbers in reading order (rows, then columns); each distinct text once."""
    numbers: dict[str, int] = {}
    for row in table.rows:
        for column in table.columns:
            for note in row.cells[column.key].notes:
                numbers.setdefault(note, len(numbers) + 1)
    return numbers


def _markers(cell: Cell, numbers: Mapping[str, int]) -> str:
    return ",".join(str(numbers[n]) for n in cell.notes)


def tested_columns(table: Table) -> list[Column]:
    return [c for c in table.columns if c.task is not None]


def test_grid(table: Table) -> list[tuple[str, list[str]]]:
    """Per ablation: its label and one 'Δ (p)' text per task column ('' where not tested)."""
    labels = {row.variant: row.method.removeprefix("ours: ") for row in table.rows if row.source == "ours"}
    grid = []
    for variant in dict.fromkeys(t.variant for t in table.tests):
        found = {t.column: t for t in table.tests if t.variant == variant}
        texts = [
            f"{found[c.key].difference:+.1f} (p {found[c.key].p_value:.3f})" if c.key in found else ""
            for c in tested_columns(table)
        ]
        grid.append((f"full vs {labels.get(variant, variant)}", texts))
    return grid


# ---------------------------------------------------------------------------------------------------- Markdown


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def _markdown_tests(table: Table) -> list[str]:
    if not table.tests and not table.untested:
        return []
    columns = tested_columns(table)
    lines = [
        "",
        TESTS_TITLE,
        "",
        "| Comparison | " + " | ".join(c.label for c in columns) + " |",
        "| --- |" + " ---: |" * len(columns),
    ]
    lines += [f"| {_md(label)} | " + " | ".join(texts) + " |" for label, texts in test_grid(table)]
    return lines + [f"- {_md(line)}" for line in table.untested]


def to_markdown(table: Table) -> str:
    numbers = number_notes(table)
    lines = [
        f"# {table.title}",
        "",
        "| Method | " + " | ".join(c.label for c in table.columns) + " |",
        "| --- |" + " ---: |" * len(table.columns),
    ]
    for row in table.rows:
        texts = []
        for column in table.columns:
            cell, marks = row.cells[column.key], _markers(row.cells[column.key], numbers)
            texts.append(_md(cell.text()) + (f" [{marks}]" if marks else ""))
        method = f"**{row.method}**" if row.source == "ours" else row.method
        lines.append(f"| {_md(method)} | " + " | ".join(texts) + " |")
    if numbers:
        lines += ["", "Footnotes:", ""] + [f"{n}. {_md(text)}" for text, n in numbers.items()]
    lines += ["", "Notes:", ""] + [f"- {_md(note)}" for note in table.notes]
    return "\n".join(lines + _markdown_tests(table)) + "\n"


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
    return "".join(_TEX.get(ch, ch) for ch in text)


def _latex_tests(table: Table) -> list[str]:
    if not table.tests:
        return []
    columns = tested_columns(table)
    lines = [
        r"\medskip",
        rf"\begin{{tabular}}{{l{'r' * len(columns)}}}",
        r"\toprule",
        " & ".join([r"\textbf{Comparison}", *(tex(c.label) for c in columns)]) + r" \\",
        r"\midrule",
    ]
    lines += [" & ".join([tex(label), *(tex(t) for t in texts)]) + r" \\" for label, texts in test_grid(table)]
    return [*lines, r"\bottomrule", r"\end{tabular}\par", rf"{tex(TESTS_TITLE)}\par"]


def to_latex(table: Table) -> str:
    """A booktabs table (needs \\usepackage{booktabs,graphicx}); footnotes and notes under it."""
    numbers = number_notes(table)
    header = " & ".join([r"\textbf{Method}", *(rf"\textbf{{{tex(c.label)}}}" for c in table.columns)])
    lines = [
        TEX_HEADER,
        r"\begin{table}[t]",
        r"\centering",
        rf"\caption{{{tex(table.title)}}}",
        rf"\label{{tab:{table.name}}}",
        r"\resizebox{\textwidth}{!}{%",
        rf"\begin{{tabular}}{{l{'r' * len(table.columns)}}}",
        r"\toprule",
        header + r" \\",
        r"\midrule",
    ]
    for index, row in enumerate(table.rows):
        first_of_ours = row.source == "ours" and (index == 0 or table.rows[index - 1].source == "paper")
        if first_of_ours and table.name != "table5":
            lines.append(r"\midrule")
        cells = []
        for column in table.columns:
            cell, marks = row.cells[column.key], _markers(row.cells[column.key], numbers)
            cells.append(tex(cell.text()) + (rf"\textsuperscript{{{marks}}}" if marks else ""))
        method = rf"\textit{{{tex(row.method)}}}" if row.source == "ours" else tex(row.method)
        lines.append(" & ".join([method, *cells]) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}}", r"\par\smallskip\footnotesize"]
    lines += [rf"\textsuperscript{{{n}}}~{tex(text)}\par" for text, n in numbers.items()]
    lines += [rf"{tex(note)}\par" for note in table.notes]
    lines += _latex_tests(table)
    lines += [rf"{tex(line)}\par" for line in table.untested] + [r"\end{table}"]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------- CSV

CSV_COLUMNS = (
    "table",
    "method",
    "source",
    "variant",
    "column",
    "label",
    "value",
    "se",
    "sd",
    "seeds",
    "paper",
    "diff",
    "value_exact",
    "text",
    "notes",
    "p_value",
    "examples",
)


def _num(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def to_csv(table: Table) -> str:
    """Tidy: one line per cell, numbers as printed (value_exact unrounded), footnotes joined by ' | '."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in table.rows:
        for column in table.columns:
            cell = row.cells[column.key]
            writer.writerow(
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
            )
    labels = {c.key: c.label for c in table.columns}
    for test in table.tests:  # source paired_test: value = full - ablation (percent points)
        writer.writerow(
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
        )
    return out.getvalue()


# ---------------------------------------------------------------------------------------------------- HTML

HTML_STYLE = """
body { font-family: system-ui, sans-serif; font-size: 13px; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin-bottom: 1em; }
th, td { padding: 3px 8px; border-bottom: 1px solid #ddd; text-align: right; }
td:first-child { white-space: nowrap; }
th:first-child, td:first-child { text-align: left; }
thead th { border-bottom: 2px solid #444; }
tr.ours td { font-weight: 600; background: #f3f7fb; }
sup { color: #666; font-weight: normal; }
.notes { max-width: 75em; color: #444; }
"""


def _html_table(header: Sequence[str], rows: Iterable[tuple[str, Sequence[str]]]) -> list[str]:
    """rows: (css class, cells as HTML); the header is plain text."""
    lines = [
        "<table>",
        "<thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr></thead>",
        "<tbody>",
    ]
    lines += [f'<tr class="{kind}">' + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>" for kind, cells in rows]
    return [*lines, "</tbody>", "</table>"]


def _html_tests(table: Table) -> list[str]:
    if not table.tests and not table.untested:
        return []
    rows = [("test", [html.escape(label), *map(html.escape, texts)]) for label, texts in test_grid(table)]
    return [
        f'<p class="notes">{html.escape(TESTS_TITLE)}</p>',
        *_html_table(["Comparison", *(c.label for c in tested_columns(table))], rows),
        '<ul class="notes">',
        *(f"<li>{html.escape(line)}</li>" for line in table.untested),
        "</ul>",
    ]


def to_html(table: Table) -> str:
    """A standalone page (Snakemake's report shows it inline): the table, footnotes, notes and the paired tests."""
    numbers = number_notes(table)

    def cell_html(cell: Cell) -> str:
        marks = _markers(cell, numbers)
        return html.escape(cell.text()) + (f"<sup>{marks}</sup>" if marks else "")

    rows = [
        (row.source, [html.escape(row.method), *(cell_html(row.cells[c.key]) for c in table.columns)])
        for row in table.rows
    ]
    lines = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(table.title)}</title><style>{HTML_STYLE}</style></head><body>",
        f"<h2>{html.escape(table.title)}</h2>",
        *_html_table(["Method", *(c.label for c in table.columns)], rows),
    ]
    if numbers:
        lines += ['<ol class="notes">', *(f"<li>{html.escape(text)}</li>" for text in numbers), "</ol>"]
    lines += ['<ul class="notes">', *(f"<li>{html.escape(note)}</li>" for note in table.notes), "</ul>"]
    return "\n".join([*lines, *_html_tests(table), "</body></html>"]) + "\n"


RENDERERS: dict[str, Callable[[Table], str]] = {"md": to_markdown, "tex": to_latex, "csv": to_csv, "html": to_html}
TABLE_FORMATS = tuple(RENDERERS)  # html: what `snakemake --report` shows inline
