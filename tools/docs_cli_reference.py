"""The documentation site's command-line reference, written from the parser the ``attnkit``
command itself builds (``attnkit.cli.main.build_parser``): one section per command and
sub-command, its usage, and a table of its options per argument group.

MkDocs runs this file while building the site (the ``gen-files`` plugin in ``mkdocs.yml``),
which writes ``reference/cli.md``; ``python tools/docs_cli_reference.py`` prints the same page.
"""

from __future__ import annotations

import argparse
import os
import re

from attnkit.cli.main import build_parser

PAGE = "reference/cli.md"


def _cell(text: str) -> str:
    """``text`` inside a Markdown table cell: one line, pipes and angle brackets escaped."""
    text = " ".join(text.split())
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _anchor(path: list[str]) -> str:
    return "-".join(path)


def _option(action: argparse.Action, formatter: argparse.HelpFormatter) -> str:
    """The option as ``--help`` names it: its flags with their metavar, or a positional's name."""
    return formatter._format_action_invocation(action)


def _help(action: argparse.Action, formatter: argparse.HelpFormatter) -> str:
    text = formatter._expand_help(action) if action.help else ""
    default = action.default
    shown = (
        action.option_strings
        and default is not None
        and default is not False
        and default is not argparse.SUPPRESS
        and not isinstance(action, argparse._VersionAction)
        and "default" not in text
    )
    if shown:
        if isinstance(default, (tuple, list)):
            default = ",".join(str(d) for d in default)
        text = f"{text} (default `{default}`)" if text else f"default `{default}`"
    return text


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """``(name, one-line help, parser)`` of each sub-command of ``parser``, in ``--help``'s
    order."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            out += [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return out


def _section(parser: argparse.ArgumentParser, path: list[str], summary: str) -> list[str]:
    formatter = parser._get_formatter()
    level = "#" * min(len(path) + 1, 4)
    lines = [f"{level} `{' '.join(path)}` {{#{_anchor(path)}}}", ""]
    text = parser.description or summary
    if text:
        lines += [_cell(text), ""]
    usage = re.sub(r"^usage: ", "", parser.format_usage().strip())
    lines += ["```text", usage, "```", ""]
    for group in parser._action_groups:
        actions = [
            a
            for a in group._group_actions
            if a.help != argparse.SUPPRESS
            and not isinstance(a, (argparse._SubParsersAction, argparse._HelpAction))
        ]
        if not actions:
            continue
        lines += [f"**{group.title}**", "", "| option | meaning |", "|---|---|"]
        lines += [
            f"| `{_cell(_option(a, formatter))}` | {_cell(_help(a, formatter))} |" for a in actions
        ]
        lines.append("")
    subs = _subcommands(parser)
    if subs:
        lines += ["| command | what it does |", "|---|---|"]
        lines += [
            f"| [`{' '.join(path + [name])}`](#{_anchor(path + [name])}) | {_cell(help_)} |"
            for name, help_, _ in subs
        ]
        lines.append("")
        for name, help_, sub in subs:
            lines += _section(sub, path + [name], help_)
    return lines


def cli_markdown(parser: argparse.ArgumentParser | None = None) -> str:
    """The whole command-line reference page as Markdown."""
    os.environ["COLUMNS"] = "84"  # the usage lines' width, whatever the terminal's
    parser = parser or build_parser()
    head = [
        "# Command line",
        "",
        "Every `attnkit` command and its options, generated from the command's own "
        "argument parser when this site is built (`attnkit COMMAND --help` prints the same).",
        "",
    ]
    body = _section(parser, ["attnkit"], "")
    body[0] = "## `attnkit` {#attnkit}"
    return "\n".join(head + body) + "\n"


def _write_page() -> None:
    import mkdocs_gen_files

    with mkdocs_gen_files.open(PAGE, "w") as f:
        f.write(cli_markdown())


if __name__ == "__main__":
    print(cli_markdown(), end="")
else:  # run by mkdocs-gen-files
    _write_page()
