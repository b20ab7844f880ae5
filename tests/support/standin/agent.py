"""``ReuseUpstream``: the stand-in as an agent's upstream, one server per test at the root.

It answers every tool turn with the SAME raw ids (by default), like Kimi K3, Moonshot's
Anthropic endpoint, Ollama-style servers or OpenAI-compatible servers that send ``call_0``
every time: while fewer than ``turns`` tool turns are done it answers one tool call per id
(all ids in one response: parallel calls), else a final text. A request that offers no
tools gets the final text. ``HEAD /`` answers 200 and ``.../count_tokens`` answers
``{"input_tokens": 1}`` (what Claude Code asks for).

``check`` makes it a strict host: a function of (API, request) that returns the error a
real host answers the request's history with (400), or None; ``strict.StrictHost`` passes
the id rules of a destination. ``max_requests`` bounds a runaway agent: model requests
beyond it get a 400 (``CAP_MESSAGE``).

    with ReuseUpstream(ids=["functions.Glob:0"]) as up:
        openai.OpenAI(base_url=up.sdk_url("chat"), ...)
        up.requests  # every request: path, headers, parsed JSON, status
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, Self

from .apis import API, endpoint, sdk_url
from .server import Exchange, Scenario, UpstreamServer

PATTERN_TEXT = "^[a-zA-Z0-9_-]+$"  # Anthropic's pattern for tool_use ids, in its error texts
SAFE_ID = re.compile(PATTERN_TEXT)
FINAL_TEXT = "There are 3 text files: a.txt, b.txt and c.txt."

# A strict host's verdict on a request: the error text it answers with (400), or None.
type Check = Callable[[API, dict[str, Any]], str | None]


class ReuseUpstream:
    """The stand-in on 127.0.0.1 (free port), in a daemon thread.

    ``ids``: the raw call ids of every tool turn (several: parallel calls; they may repeat);
    ``item_ids``: the Responses item ids (default ``fc_0``, ``fc_1``, ..., reused too);
    ``name``/``arguments``: the tool called (arguments as a JSON text); ``turns``: tool turns
    before the final text; ``check``: the strict host's verdict on a request (see the module
    docstring); ``max_requests``: model requests answered before every further one gets a
    400 (``CAP_MESSAGE``); ``reuse=False``: fresh ids every turn; ``gzip``: compress the
    answers ("auto": when the client accepts gzip); ``tls_dir``: serve HTTPS with a
    self-signed certificate for 127.0.0.1 made there; the rest: ``Scenario``'s transport
    options (``writes``, ``framing``, ``newline``, ...)."""

    # the Scenario it serves (a subclass renders answers its own way: ``unusable_ids``)
    scenario_type: type[Scenario] = Scenario

    def __init__(
        self,
        ids: Sequence[str] = ("functions.Glob:0",),
        *,
        item_ids: Sequence[str] | None = None,
        name: str = "Glob",
        arguments: str = '{"pattern": "*.txt"}',
        turns: int = 3,
        check: Check | None = None,
        max_requests: int | None = None,
        final_text: str = FINAL_TEXT,
        reuse: bool = True,
        gzip: Literal["auto", "force", "never"] = "never",
        tls_dir: Path | None = None,
        **transport: Any,
    ) -> None:
        items = list(item_ids) if item_ids is not None else [f"fc_{i}" for i in range(len(ids))]
        self.check = check
        self.scenario = self.scenario_type(
            ids=list(ids),
            item_ids=items,
            names=(name,),
            arguments=arguments,
            argument_fragments=(),
            final_text=final_text,
            final_fragments=(),
            preamble={},
            turns=turns,
            reuse=reuse,
            needs_tools=True,
            echo_model=True,
            check=self.problem,
            max_requests=max_requests,
            gzip=gzip,
            **transport,
        )
        if tls_dir is not None:
            tls_dir.mkdir(parents=True, exist_ok=True)
        self.server = UpstreamServer(
            tls=tls_dir is not None, cert_dir=tls_dir, default=self.scenario
        )

    def problem(self, ex: Exchange) -> str | None:
        """The error a strict host answers this request with, or None."""
        assert ex.api is not None
        return self.check(ex.api, ex.json) if self.check is not None else None

    # public API

    @property
    def port(self) -> int:
        assert self.server.port, "not started"
        return self.server.port

    @property
    def base_url(self) -> str:
        return self.server.base_url

    @property
    def requests(self) -> list[Exchange]:
        """Every request, in order: path, headers, parsed JSON, status, error."""
        assert self.server.default is not None
        return self.server.default.exchanges

    def sdk_url(self, api: API) -> str:
        """The SDK's base URL for ``api`` (openai appends /chat/completions or /responses,
        anthropic /v1/messages)."""
        return sdk_url(api, self.base_url)

    def url(self, api: API) -> str:
        """The endpoint of ``api``."""
        return endpoint(api, self.base_url)

    def model_requests(self, api: API | None = None) -> list[Exchange]:
        """The POSTs to a model endpoint (of ``api`` if given), in order."""
        found = list(self.requests)
        return [
            r
            for r in found
            if r.method == "POST" and r.api is not None and (api is None or r.api == api)
        ]

    def start(self) -> Self:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
