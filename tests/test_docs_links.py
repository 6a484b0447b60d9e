"""The docs render on the repository page too: pages link each other with plain Markdown
links (GitHub renders them, MyST resolves them), never ``{doc}``/``{ref}`` roles, and every
link to a page or a heading of ours leads somewhere (no Sphinx run)."""

from __future__ import annotations

import pathlib
import re
from typing import Dict, Iterator, List, Set, Tuple

import pytest

pytestmark = pytest.mark.timeout(10)

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"
PAGES = sorted(DOCS.glob("*.md"))
_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,3})\s+(.*?)\s*#*\s*$")  # conf.py: myst_heading_anchors = 3
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def prose(page: pathlib.Path) -> Iterator[Tuple[int, str]]:
    """The page's lines outside code blocks, with their numbers."""
    fenced = False
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            yield number, line


def slug(heading: str) -> str:
    """GitHub's anchor of a heading (MyST's ``github`` slugs: the same)."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    return re.sub(r"[^\w\u4e00-\u9fff\- ]", "", text.lower().replace(" ", "-"))


def anchors() -> Dict[str, Set[str]]:
    return {
        page.name: {slug(m[2]) for _, line in prose(page) if (m := _HEADING.match(line))}
        for page in PAGES
    }


def test_no_page_links_with_a_sphinx_role() -> None:
    """``{doc}`` and ``{ref}`` show as raw text on the repository page."""
    found = [
        f"{page.name}:{number}: {line.strip()}"
        for page in PAGES
        for number, line in prose(page)
        if "{doc}`" in line or "{ref}`" in line
    ]
    assert not found, found[:5]


def test_no_page_has_a_myst_target_line() -> None:
    """A ``(label)=`` line shows as raw text on the repository page: link to the heading."""
    found = [
        f"{page.name}:{number}: {line.strip()}"
        for page in PAGES
        for number, line in prose(page)
        if re.match(r"^\([\w-]+\)=\s*$", line)
    ]
    assert not found, found[:5]


def test_every_link_to_a_page_or_heading_of_ours_resolves() -> None:
    """``[text](page.md)``, ``[text](page.md#heading)`` and ``[text](#heading)``: the page
    exists and has the heading (h1 to h3, the anchors MyST makes)."""
    known = anchors()
    broken: List[str] = []
    for page in PAGES:
        for number, line in prose(page):
            for target in _LINK.findall(line):
                if "://" in target or target.startswith("mailto:"):
                    continue
                name, _, anchor = target.partition("#")
                name = name or page.name
                if not name.endswith(".md") or "/" in name:
                    continue  # a file of the repository, not a page
                if name not in known or (anchor and anchor not in known[name]):
                    broken.append(f"{page.name}:{number}: {target}")
    assert not broken, broken[:5]
