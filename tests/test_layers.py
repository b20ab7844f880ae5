"""The layers of ``toolid/`` as docs/design.md lists them, bottom up: each module imports only
modules listed before it, and data handed to the public entry points never climbs back up (no
call goes from one module to a module listed after it), with the accelerator and without."""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

import toolid
from toolid import native

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "toolid"
DATA = ROOT / "tests" / "data"


def layers() -> list[str]:
    """The modules of ``toolid/`` in docs/design.md's layer list, bottom up (``apis`` for the
    package of records)."""
    listing = (ROOT / "docs" / "design.md").read_text().split("```")[1].split("\naddons/")[0]
    names: list[str] = []
    for line in listing.splitlines():
        listed = re.match(r"  ([a-z_/]+(?:\.py|/)?(?:, [a-z_/.]+)*)\s", line)
        if listed:
            names += [name.rstrip("/") for name in listed.group(1).split(", ")]
    return names


LAYERS = layers()
RANK = {name: rank for rank, name in enumerate(LAYERS)}


def layer_of(path: Path) -> str:
    """The layer a source file of ``toolid/`` belongs to."""
    parts = path.relative_to(PACKAGE).parts
    return "apis" if parts[0] == "apis" else parts[0]


def imported(module: Path) -> Iterator[tuple[int, str]]:
    """Each module of ``toolid/`` that ``module`` imports (anywhere in it): its line and its
    layer (``__init__.py``: a name of the package's face)."""
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".")
            if parts[0] == "toolid" and len(parts) > 1:
                yield node.lineno, parts[1]
            elif parts[0] == "toolid":
                for alias in node.names:
                    yield node.lineno, alias.name if alias.name in MODULES else "__init__.py"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "toolid":
                    yield node.lineno, parts[1] if len(parts) > 1 else "__init__.py"


def as_layer(name: str) -> str:
    """The layer of a module named as it is imported (``codec``, ``apis``, ``_native``)."""
    return {"apis": "apis", "_native": "_native.c"}.get(name, name if "." in name else f"{name}.py")


MODULES = {path.stem for path in PACKAGE.glob("*.py")} | {"apis", "_native"}


def test_the_list_names_every_module() -> None:
    files = {layer_of(path) for path in PACKAGE.rglob("*.py")} | {"_native.c"}
    assert sorted(files) == sorted(LAYERS)


@pytest.mark.parametrize("module", sorted(PACKAGE.rglob("*.py")), ids=lambda p: p.name)
def test_a_module_imports_only_the_layers_below_it(module: Path) -> None:
    layer = layer_of(module)
    for line, name in imported(module):
        other = as_layer(name)
        if other != layer:
            assert RANK[other] < RANK[layer], f"{module.name}:{line} imports {other}, above it"


def upward_calls(run: Callable[[], Any]) -> set[str]:
    """The calls ``run`` makes from a module of ``toolid/`` into one listed after it."""
    seen: set[str] = set()

    def layer(frame: FrameType) -> str | None:
        path = Path(frame.f_code.co_filename)
        return layer_of(path) if path.is_relative_to(PACKAGE) else None

    def profile(frame: FrameType, event: str, _: object) -> None:
        caller = frame.f_back
        if event != "call" or caller is None:
            return
        callee_layer, caller_layer = layer(frame), layer(caller)
        if callee_layer and caller_layer and RANK[caller_layer] < RANK[callee_layer]:
            seen.add(
                f"{caller_layer}:{caller.f_code.co_qualname} -> "
                f"{callee_layer}:{frame.f_code.co_qualname}"
            )

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return seen


def _stream() -> None:
    source = (DATA / "responses_stream.sse").read_bytes()
    stream = toolid.ResponseStream(path="/v1/responses")
    for at in range(0, len(source), 97):
        stream.feed(source[at : at + 97])
    stream.finish()


def _socket() -> None:
    connection = toolid.ResponsesConnection()
    connection.client_message((DATA / "responses_request.json").read_bytes())
    connection.server_message((DATA / "responses_response.json").read_bytes())


ENTRY_POINTS: dict[str, Callable[[], Any]] = {
    "rewrite_request": lambda: toolid.rewrite_request(
        (DATA / "chat_request.json").read_bytes(), path="/v1/chat/completions"
    ).pairing_problems(),
    "rewrite_response": lambda: toolid.rewrite_response(
        (DATA / "messages_response.json").read_bytes(), path="/v1/messages"
    ),
    "ResponseStream": _stream,
    "ResponsesConnection": _socket,
    "repair_request": lambda: toolid.repair_request(
        (DATA / "responses_request.json").read_bytes(), path="/v1/responses"
    ),
}


@pytest.mark.parametrize("accelerated", [True, False], ids=["native", "pure"])
@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_data_never_climbs_back_up(
    entry: str, accelerated: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if accelerated and native.extension is None:
        pytest.skip("no accelerator here")
    if not accelerated:
        monkeypatch.setattr(native, "extension", None)
    run = ENTRY_POINTS[entry]
    run()  # the memos filled: their misses are no part of the path
    assert upward_calls(run) == set()
