"""An mkdocs hook: the lists of the docs that the code already holds, written from it when the site is built.

* **The registered analyses' public names** (docs/api.md, where it holds :data:`MARKER`): each analysis
  declares them once (``Analysis.exports``), ``compose_lens`` exports them from there, and this hook writes
  one ``::: module.attribute`` entry per export, grouped by analysis in ``analyze``'s order
  (:func:`registered_entries`).
* **The grammar table** (docs/commands.md, where it holds :data:`GRAMMAR_MARKER`): every command and
  sub-command against the options every command shares, read from its own parser, with the reason a
  command lacks one (:data:`WITHOUT`; :func:`grammar_table`).
* **Each analysis's own command** (docs/commands.md, where it holds :data:`COMMANDS_MARKER`): one line per
  registered command, its first argument and what it does, from the declarations (:func:`analysis_commands`).

So an analysis added as one folder (or module) of ``compose_lens/registry`` is on both pages with no edit
to either. mkdocs.yml loads this file (``hooks``); ``tests/unit/test_api_page.py`` and
``tests/unit/test_cli_conventions.py`` read the pages through it as the build does.
"""

from __future__ import annotations

MARKER = "<!-- the registered analyses' exports -->"
GRAMMAR_MARKER = "<!-- the grammar table -->"
COMMANDS_MARKER = "<!-- each analysis's own command -->"
GRAMMAR = ("--device", "--out", "--overwrite", "--json", "--seed")
# commands without an option of GRAMMAR, and why (every other command takes every one)
WITHOUT = {
    "--device": {"data sample": "no model runs", "data split": "no model runs", "data stats": "no model runs",
                 "export": "copies the weights; no model runs", "settings": "lists the settings",
                 "completion": "prints a script"},
    "--out": {"settings": "lists the settings", "completion": "prints a script"},
    "--overwrite": {"settings": "lists the settings", "completion": "prints a script"},
    "--json": {"completion": "prints a script"},
    "--seed": {"export": "samples nothing", "settings": "lists the settings", "completion": "prints a script",
               "sweep": "--seeds: one run per seed"},
}


def registered_entries() -> str:
    """The mkdocstrings entries of every registered analysis's exports, as Markdown."""
    import compose_lens
    from compose_lens import registry

    where = compose_lens._registered()
    blocks = []
    for analysis in registry.ANALYSES:
        names = [export.partition("=")[0] for export in analysis.exports]
        if not names:
            continue
        blocks.append(f"From `{analysis.name}` ({analysis.title}"
                      + (f"; `compose-lens {analysis.command}`" if analysis.command else "") + "):")
        for name in names:
            module, _, attribute = where[name].partition(":")
            blocks.append(f"::: {module}.{attribute or name}"
                          + (f"\n    options:\n      heading: {name}" if attribute and attribute != name else ""))
    return "\n\n".join(blocks) + "\n"


def grammar_table() -> str:
    """Every command x the shared options (and -q / -v after the command), as a Markdown table read from
    each command's own parser: 'yes', or '-' with the reason :data:`WITHOUT` gives ('?' where it gives none)."""
    from compose_lens import cli

    header = ["command", *GRAMMAR, "-q / -v after it"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, parser in cli.leaf_parsers(cli.build_parser()):
        options = {o for action in parser._actions for o in action.option_strings}
        cells = ["yes" if flag in options else f"- ({WITHOUT.get(flag, {}).get(name.removeprefix('compose-lens '), '?')})"
                 for flag in GRAMMAR]
        cells.append("yes" if {"-q", "-v"} <= options else "-")
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def analysis_commands() -> str:
    """A bash block with one line per registered analysis command, ``compose-lens COMMAND MODEL --out NAME/``
    (RUN for an analysis of a run's checkpoints), commented with its help."""
    from compose_lens import registry

    lines = []
    for analysis in registry.ANALYSES:
        if analysis.command:
            call = f"compose-lens {analysis.command} {'RUN' if analysis.of == 'run' else 'MODEL'} --out {analysis.name}/"
            lines.append(f"{call:<56} # {analysis.help}")
    return "```bash\n" + "\n".join(lines) + "\n```"


WRITTEN = {"api.md": {MARKER: registered_entries},
           "commands.md": {GRAMMAR_MARKER: grammar_table, COMMANDS_MARKER: analysis_commands}}


def written(src_path: str, markdown: str) -> str:
    """The page ``src_path`` (under docs/) as the site shows it: each of its markers replaced by what
    :data:`WRITTEN` writes there."""
    for marker, write in WRITTEN.get(src_path, {}).items():
        markdown = markdown.replace(marker, write())
    return markdown


def on_page_markdown(markdown: str, page, **kwargs) -> str:
    """mkdocs's hook: :func:`written` for every page."""
    return written(page.file.src_path, markdown)
