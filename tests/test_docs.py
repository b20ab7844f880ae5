"""The documentation holds: README.md, CHANGELOG.md and docs/*.md.

- every relative link resolves to a file in the checkout, and every ``#anchor`` to a heading of
  the page it names;
- every command the README shows exists: the scripts, ``scripts/proxy --help`` and its flags,
  each ``toolid`` sub-command, each ``toolid_*`` option and ``toolid.*`` mitmproxy command;
- every example row of the tables in docs/wire-format.md round-trips through ``toolid.codec``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from toolid import codec
from toolid.edit import literal_of

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = sorted([README, ROOT / "CHANGELOG.md", *(ROOT / "docs").glob("*.md")])

_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"(?<!\\)\[[^\]]*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$", re.M)
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)  # https:, mailto:, ...


def _prose(text: str) -> str:
    """``text`` without fenced code blocks and code spans (links there are not links)."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: markup dropped, lower case, punctuation removed,
    spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    anchors: set[str] = set()
    for _, heading in _HEADING.findall(text):
        slug = base = _slug(heading)
        n = 0
        while slug in anchors:  # a repeated heading gets -1, -2, ...
            n += 1
            slug = f"{base}-{n}"
        anchors.add(slug)
    return anchors


def _links(page: Path) -> list[str]:
    return _LINK.findall(_prose(page.read_text(encoding="utf-8")))


def test_the_pages_exist() -> None:
    names = {page.name for page in PAGES}
    for name in (
        "README.md",
        "CHANGELOG.md",
        "wire-format.md",
        "positions.md",
        "rules.md",
        "deployment.md",
        "design.md",
        "performance.md",
        "testing.md",
    ):
        assert name in names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in _links(page):
        if _EXTERNAL.match(target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
            continue
        if not linked.is_relative_to(ROOT):
            broken.append(f"{target}: outside the checkout")
            continue
        if anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = {(ROOT / target.partition("#")[0]).resolve() for target in _links(README)}
    unlinked = [p.name for p in (ROOT / "docs").glob("*.md") if p.resolve() not in linked]
    assert not unlinked


def test_readme_stays_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250
    # the first screenful: what it is, the two commands, pointing an agent at it
    first = "\n".join(lines[:45])
    for essential in ("scripts/proxy", "scripts/test", "HTTPS_PROXY", "--mode reverse:"):
        assert essential in first, essential


# --- the commands the README shows ----------------------------------------------------------


def _readme_code() -> str:
    """The README's fenced code blocks and code spans: where it shows commands."""
    text = README.read_text(encoding="utf-8")
    return "\n".join(_FENCE.findall(text) + _CODE_SPAN.findall(text))


def test_scripts_the_readme_shows_exist() -> None:
    scripts = set(re.findall(r"\bscripts/([a-z_]+)\b", _readme_code()))
    assert {"proxy", "test"} <= scripts
    for name in scripts:
        assert (ROOT / "scripts" / name).is_file(), name


def test_scripts_proxy_help(tmp_path: Path) -> None:
    """``scripts/proxy --help`` answers before it would bootstrap a venv: a copy of the script
    without ``_bootstrap.sh`` beside it still prints its usage (and creates nothing)."""
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    (tmp_path / "scripts").mkdir()
    proxy = tmp_path / "scripts" / "proxy"
    shutil.copy(ROOT / "scripts" / "proxy", proxy)
    done = subprocess.run(
        [bash, str(proxy), "--help"], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: scripts/proxy")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scripts"]
    shown = set(re.findall(r"scripts/proxy((?: --?[a-z-]+)+)", _readme_code()))
    flags = {flag for options in shown for flag in options.split()}
    for flag in flags & {"--web", "--console", "--help"}:
        assert flag in done.stdout, flag


def test_toolid_subcommands_the_readme_shows_exist() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "toolid", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=ROOT,
    )
    listed = set(re.findall(r"^    ([a-z][a-z-]*) ", done.stdout, re.M))
    shown = set(re.findall(r"(?<![\w./-])toolid ([a-z][a-z-]*)", _readme_code()))
    assert {"inspect", "addon-path"} <= shown
    assert shown <= listed, f"{sorted(shown - listed)} not in `toolid --help`: {sorted(listed)}"


def test_options_and_commands_the_readme_shows_exist() -> None:
    addon = (ROOT / "addons" / "toolid_addon.py").read_text(encoding="utf-8")
    options = set(re.findall(r'add_option\(\s*"(toolid_[a-z_]+)"', addon))
    commands = set(re.findall(r'_command\("(toolid\.[a-z]+)"\)', addon))
    readme = README.read_text(encoding="utf-8")
    shown_options = set(re.findall(r"\btoolid_[a-z_]*[a-z]\b(?!\.py)", readme))
    tabled = set(re.findall(r"^\| `(toolid_[a-z_]+)` \|", readme, re.M))
    shown_commands = set(re.findall(r"`(toolid\.[a-z]+)[ `]", readme))
    assert shown_options <= options, sorted(shown_options - options)
    assert {"toolid.encode", "toolid.decode", "toolid.trace"} <= shown_commands
    assert shown_commands <= commands, sorted(shown_commands - commands)
    # the options table names every option the addon has
    assert tabled == options, sorted(tabled ^ options)


# --- docs/wire-format.md: every example row round-trips ------------------------------------

WIRE_FORMAT = ROOT / "docs" / "wire-format.md"
_ORDINAL = re.compile(r"(\d+)(?:st|nd|rd|th)")


def _tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Every table of ``text``: its header cells and its rows' cells."""
    tables = []
    for block in re.findall(r"(?:^\|.*\|\n)+", _FENCE.sub("", text), re.M):
        rows = [
            [cell.strip() for cell in line.strip()[1:-1].split(" | ")]
            for line in block.splitlines()
        ]
        tables.append((rows[0], rows[2:]))
    return tables


def _id(cell: str) -> str:
    """The id a cell names: ``(empty string)``, or its first code span (a JSON string literal
    when it is quoted)."""
    if cell.startswith("(empty string)"):
        return ""
    span = re.match(r"`([^`]*)`", cell)
    assert span, f"no id in {cell!r}"
    value = span.group(1)
    if len(value) >= 2 and value[0] == value[-1] == '"':
        decoded = json.loads(value)
        assert isinstance(decoded, str)
        return decoded
    return value


def _table(header: list[str]) -> list[list[str]]:
    found = [
        rows for head, rows in _tables(WIRE_FORMAT.read_text(encoding="utf-8")) if head == header
    ]
    assert len(found) == 1, f"one table with the header {header}"
    assert found[0], f"the table {header} has rows"
    return found[0]


def _profile(cell: str) -> codec.Profile:
    name = cell.strip("` ")
    assert name in codec.PROFILES, f"no profile {cell!r}"
    return name


def _examples() -> list[tuple[str, codec.Profile, str]]:
    return [
        (_id(raw), _profile(profile), _id(client))
        for raw, profile, client in _table(["raw id", "profile", "client id"])
    ]


def _tagged() -> list[tuple[str, int, codec.Profile, str]]:
    cases = []
    for raw, profile, client in _table(["raw id, k-th call", "profile", "client id"]):
        ordinal = _ORDINAL.search(raw.rsplit(",", 1)[1])
        assert ordinal, raw
        cases.append((_id(raw), int(ordinal.group(1)), _profile(profile), _id(client)))
    return cases


def _not_decoded() -> list[str]:
    return [_id(client) for client, _ in _table(["client id", "why"])]


@pytest.mark.parametrize(("raw", "profile", "client"), _examples())
def test_wire_format_examples(raw: str, profile: codec.Profile, client: str) -> None:
    assert codec.encode(raw, profile) == client
    assert codec.decode(client) == raw


@pytest.mark.parametrize(("raw", "k", "profile", "client"), _tagged())
def test_wire_format_tag_examples(raw: str, k: int, profile: codec.Profile, client: str) -> None:
    assert codec.encode(raw, profile, k) == client
    assert codec.decode(client) == raw


def _unusable() -> list[tuple[str | None, int, codec.Profile, str, str]]:
    """The rows of the "Calls with no usable id" table: the upstream's JSON text (None: no
    member), k, profile, client id and the JSON text it is restored as."""
    cases = []
    for upstream, profile, client, restored in _table(
        ["upstream id", "profile", "client id", "restored as"]
    ):
        ordinal = _ORDINAL.search(upstream)
        text = None if upstream.startswith("(missing)") else _id(upstream)
        k = int(ordinal.group(1)) if ordinal else 1
        cases.append((text, k, _profile(profile), _id(client), restored.strip("`")))
    return cases


@pytest.mark.parametrize(("text", "k", "profile", "client", "restored"), _unusable())
def test_wire_format_unusable_id_examples(
    text: str | None, k: int, profile: codec.Profile, client: str, restored: str
) -> None:
    if text is None or text == "null":
        assert codec.mint(profile, k) == client
    else:
        assert codec.encode_value(text, profile, k) == client
    raw = codec.decode(client)
    assert literal_of(raw) == restored.encode()


@pytest.mark.parametrize("client", _not_decoded())
def test_wire_format_not_decoded(client: str) -> None:
    assert codec.decode(client) == client


def test_wire_format_unchanged_examples_are_unchanged() -> None:
    """Rows marked "(unchanged)" are ids that pass as they are."""
    for raw, profile, client in _table(["raw id", "profile", "client id"]):
        if "(unchanged)" in client:
            assert _id(raw) == _id(client)
            assert codec.passes(_id(raw), _profile(profile))
