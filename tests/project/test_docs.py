"""The docs say what the code does, read from the code itself.

- every `dlperf` subcommand, at any depth (`dlperf envs install`, `dlperf system check`), read from
  the real parser (`dlperf.cli.build_parser`), appears as "dlperf <sub>" in a heading or in code
  (a fenced block or an inline span) of some page of docs/;
- every flag of every subcommand appears in that subcommand's section of docs/commands.md;
- every relative link in README.md, CONTRIBUTING.md and docs/*.md points to a file that exists
  (and an anchor to a heading of that file);
- README.md, the front door, is at most 250 lines.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from dlperf import cli

# measures nothing and asserts nothing about time: `make test` runs it beside another
pytestmark = pytest.mark.parallel

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
REFERENCE = DOCS / "commands.md"
MAX_README_LINES = 250

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
INLINE = re.compile(r"`[^`\n]+`")
HEADING = re.compile(r"^#{1,6}\s+(.*)$", re.M)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def subcommands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ("dlperf",),
                action_words: bool = True) -> Iterator[tuple[tuple[str, ...],
                                                             argparse.ArgumentParser]]:
    """(words, parser) of every subcommand at any depth; with ``action_words``, a positional with
    choices counts as a subcommand too (`dlperf system show|check`), with the parser it
    belongs to."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                words = (*prefix, name)
                yield words, sub
                yield from subcommands(sub, words, action_words)
        elif action_words and not action.option_strings and action.choices and len(prefix) > 1:
            for choice in action.choices:
                yield (*prefix, str(choice)), parser


def flags(parser: argparse.ArgumentParser) -> list[str]:
    """The long options a parser itself declares (not its subcommands'), --help aside."""
    return [option for action in parser._actions
            if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))
            for option in action.option_strings if option.startswith("--")]


def headings_and_code(text: str) -> str:
    """What counts as documenting a command: headings, fenced blocks and inline code spans."""
    parts = FENCE.findall(text) + INLINE.findall(text) + HEADING.findall(text)
    return "\n".join(parts)


def mentions(words: tuple[str, ...], text: str) -> bool:
    pattern = r"\s+".join(re.escape(word) for word in words)
    return re.search(rf"(?<![\w-]){pattern}(?![\w-])", text) is not None


def docs_pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def undocumented(parser: argparse.ArgumentParser, pages: list[Path]) -> list[str]:
    """The subcommands no page of ``pages`` names in a heading or in code."""
    documented = "\n".join(headings_and_code(page.read_text(encoding="utf-8")) for page in pages)
    return [" ".join(words) for words, _ in subcommands(parser)
            if not mentions(words, documented)]


def reference_sections(text: str) -> dict[tuple[str, ...], str]:
    """docs/commands.md cut at its headings: a heading naming `dlperf ...` owns the text up to the
    next heading."""
    sections: dict[tuple[str, ...], str] = {}
    matches = list(re.finditer(r"^#{1,6}\s+`(dlperf(?:\s+[\w-]+)*)`\s*$", text, re.M))
    starts = [m.start() for m in re.finditer(r"^#{1,6}\s", text, re.M)] + [len(text)]
    for match in matches:
        end = min(start for start in starts if start > match.start())
        sections[tuple(match.group(1).split())] = text[match.end():end]
    return sections


def undocumented_flags(parser: argparse.ArgumentParser, reference: str) -> list[str]:
    """``dlperf CMD --flag`` for every flag missing from its command's section of the reference."""
    sections = reference_sections(reference)
    missing = []
    for words, sub in subcommands(parser, action_words=False):
        wanted = flags(sub)
        section = sections.get(words)
        if section is None:
            if wanted:
                missing += [f"{' '.join(words)} (no section)"]
            continue
        missing += [f"{' '.join(words)} {flag}" for flag in wanted
                    if not re.search(rf"`{re.escape(flag)}(?![\w-])", section)]
    return missing


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    for heading in HEADING.findall(text):
        base = slug(heading)
        name, n = base, 0
        while name in found:
            n += 1
            name = f"{base}-{n}"
        found.add(name)
    return found


def broken_links(page: Path) -> list[str]:
    """Relative links of ``page`` whose file does not exist, or whose #anchor names no heading."""
    text = INLINE.sub("", FENCE.sub("", page.read_text(encoding="utf-8")))
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):
            continue  # https:, mailto: ...
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page.resolve()
        if not resolved.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target} (no heading #{anchor})")
    return broken


PARSER = cli.build_parser()
LINKED = [README, ROOT / "CONTRIBUTING.md", *docs_pages()]


def test_the_parser_has_subcommands():
    """The walk below sees the real command tree, nested actions included."""
    names = {" ".join(words) for words, _ in subcommands(PARSER)}
    assert {"dlperf run", "dlperf envs install", "dlperf system check"} <= names


def test_every_subcommands_help_is_printable():
    """`dlperf SUB --help` formats its help through argparse's %-formatting: a bare % in a help
    text (a percentage written with an f-string) is a crash at the user's first question."""
    broken = []
    for words, sub in subcommands(PARSER, action_words=False):
        try:
            sub.format_help()
        except (ValueError, TypeError, KeyError) as error:
            broken.append(f"{' '.join(words)}: {error}")
    assert not broken, broken


def test_every_subcommand_is_documented_in_docs():
    missing = undocumented(PARSER, docs_pages())
    assert not missing, ("subcommands no page of docs/ names as `dlperf <sub>` in a heading or "
                         f"code: {missing}")


def test_every_flag_is_in_the_command_reference():
    missing = undocumented_flags(PARSER, REFERENCE.read_text(encoding="utf-8"))
    assert not missing, f"flags missing from their section of docs/commands.md: {missing}"


@pytest.mark.parametrize("page", LINKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_files_that_exist(page):
    assert page.is_file()
    assert not broken_links(page), f"{page.relative_to(ROOT)}: {broken_links(page)}"


def test_readme_is_a_front_door():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines (at most {MAX_README_LINES})"


def test_the_checks_fail_when_they_should(tmp_path):
    """A subcommand, a flag or a link the docs lack is caught (so the tests above can fail)."""
    parser = argparse.ArgumentParser(prog="dlperf")
    sub = parser.add_subparsers()
    frob = sub.add_parser("frobnicate")
    frob.add_argument("--widgets")
    nested = sub.add_parser("envs").add_subparsers()
    nested.add_parser("install")
    page = tmp_path / "page.md"
    page.write_text("# `dlperf envs install`\n\nfrobnicate, dlperf frobnicate in prose only; "
                    "[gone](missing.md), [here](page.md#dlperf-envs-install), [no](page.md#nope)\n")
    assert undocumented(parser, [page]) == ["dlperf frobnicate"]
    assert undocumented_flags(parser, page.read_text()) == ["dlperf frobnicate (no section)"]
    reference = "## `dlperf frobnicate`\n\n| `--widget` | singular |\n"
    assert undocumented_flags(parser, reference) == ["dlperf frobnicate --widgets"]
    assert broken_links(page) == ["missing.md (no such file)", "page.md#nope (no heading #nope)"]
