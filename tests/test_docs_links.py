"""The documentation's links: every relative link in the README and the docs pages points
at a file (and heading) inside the repository, and every docs page can be reached from
the README or the docs index."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")),
         ROOT / "benchmarks" / "README.md", ROOT / "ARCHITECTURE.md"]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as dashes."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def links(text: str) -> list[str]:
    """Markdown link targets outside code blocks."""
    return re.findall(r"\]\(([^)\s]+)\)", re.sub(r"```.*?```", "", text, flags=re.S))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve_inside_the_repository(page):
    text = page.read_text(encoding="utf-8")
    for target in links(text):
        assert "://" not in target, f"{page.name}: external link {target}"
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.name}: {target}"
        assert str(linked).startswith(str(ROOT)), f"{page.name}: {target}"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", linked.read_text(encoding="utf-8"), re.M)
            assert anchor in {slug(h) for h in headings}, f"{page.name}: {target}"
    assert "../shared" not in text, page.name


def test_every_docs_page_is_reachable_from_the_readme():
    """A page nobody links is a page nobody reads: each docs/*.md is linked from the
    README or from docs/index.md."""
    linked = set()
    for page in (ROOT / "README.md", ROOT / "docs" / "index.md"):
        for target in links(page.read_text(encoding="utf-8")):
            linked.add((page.parent / target.partition("#")[0]).resolve())
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert page.resolve() in linked, f"{page.name}: link it from docs/index.md"


def test_slug_matches_github():
    assert slug("What to measure next: `plan` and `tune`") == "what-to-measure-next-plan-and-tune"
    assert slug("The engine's ceiling") == "the-engines-ceiling"
