"""Library cost: toolid's rewrite against ``json.loads``, its pass-through against ``bytes.find``.

Every case times its operations interleaved (rewrite, baseline, rewrite, baseline, ...) with
``time.perf_counter_ns``; a sample is one call, or a batch of calls for small bodies (then
per-call time = batch time / batch size). Ratios are medians over medians.

Bodies: ``toolid.body.rewrite`` on whole request/response documents. Streams: a fresh
``toolid.stream.StreamRewriter`` fed one event per ``feed`` call (as mitmproxy calls the stream
callable once per upstream chunk, and LLM servers send one event per chunk), then ``finish``.

The garbage collector is off while timing (as timeit does); toolid's id caches are warm after
the first call, as they are for a conversation whose history is resent every turn.
"""

from __future__ import annotations

import contextlib
import gc
import json
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from bench import workloads
from bench.workloads import Shape
from toolid import body
from toolid.body import Direction, Policy
from toolid.positions import Api, Doc
from toolid.sse import EventFramer
from toolid.stream import StreamRewriter

KiB = 1024
MiB = 1024 * KiB
API_OF: dict[Shape, Api] = {"chat": Api.CHAT, "responses": Api.RESPONSES, "messages": Api.MESSAGES}
#: The pass-through baseline: one ``bytes.find`` of the restore marker. Pass-through bodies and
#: upstream streams do not contain it, so it scans the whole body.
NEEDLE = b"tid1_"


@dataclass
class Case:
    """One library measurement; ``ops`` maps a name to a zero-argument callable."""

    id: str
    kind: Literal["rewrite", "pass"]
    what: str  # a short description for the table
    size: int
    ops: dict[str, Callable[[], object]]
    info: dict[str, Any] = field(default_factory=dict)


def _size_label(size: int) -> str:
    return f"{size // MiB}MiB" if size >= MiB else f"{size // KiB}KiB"


@dataclass(frozen=True)
class BodySpec:
    """One body case before its (possibly 10 MiB) document is built."""

    doc_kind: Doc  # REQUEST: restore tid1_ ids; RESPONSE: encode Kimi-style ids
    shape: Shape
    size: int
    kind: Literal["rewrite", "pass"]

    @property
    def id(self) -> str:
        if self.doc_kind is Doc.REQUEST:
            verb = "restore" if self.kind == "rewrite" else "pass"
            return f"lib.request.{verb}.{self.shape}.{_size_label(self.size)}"
        verb = "encode" if self.kind == "rewrite" else "pass"
        return f"lib.response.{verb}.{self.shape}.{_size_label(self.size)}"


def body_specs(sizes: tuple[int, ...], shape_size: int) -> list[BodySpec]:
    """Chat request/response bodies at every size, the other shapes at one size."""
    specs: list[BodySpec] = []
    for doc_kind, other_size in ((Doc.REQUEST, shape_size), (Doc.RESPONSE, sizes[0])):
        shaped: list[tuple[Shape, int]] = [("chat", size) for size in sizes]
        shaped += [("responses", other_size), ("messages", other_size)]
        kinds: tuple[Literal["rewrite", "pass"], ...] = ("rewrite", "pass")
        for kind in kinds:
            specs += [BodySpec(doc_kind, shape, size, kind) for shape, size in shaped]
    return specs


def stream_case_ids() -> list[str]:
    return [f"lib.sse.{shape}.{label}" for shape in workloads.SHAPES for label in ("tools", "text")]


def body_cases(sizes: tuple[int, ...], shape_size: int) -> Iterator[Case]:
    """Request bodies to restore / pass, response bodies to encode / pass."""
    for spec in body_specs(sizes, shape_size):
        api = API_OF[spec.shape]
        if spec.doc_kind is Doc.REQUEST:
            calls = workloads.calls_for_size(spec.size)
            ids: Literal["client", "conforming"] = (
                "client" if spec.kind == "rewrite" else "conforming"
            )
            doc = workloads.history_request(spec.shape, calls, ids=ids)
            what = f"{spec.shape} request, {calls} prior calls"
            policy = Policy(Direction.DECODE)
        else:
            raw: Literal["raw", "conforming"] = "raw" if spec.kind == "rewrite" else "conforming"
            doc = workloads.tool_response(spec.shape, ids=raw, text_bytes=spec.size)
            what = f"{spec.shape} response, 2 calls + text"
            policy = Policy(Direction.ENCODE)
        yield _body_case(
            spec.id, spec.kind, what, doc, api=api, doc_kind=spec.doc_kind, policy=policy
        )


def _body_case(
    case_id: str,
    kind: Literal["rewrite", "pass"],
    what: str,
    doc: bytes,
    *,
    api: Api,
    doc_kind: Doc,
    policy: Policy,
) -> Case:
    new, plan = body.rewrite(doc, api, doc_kind, policy)
    info = {"changes": len(plan.changes), "edits": len(plan.edits), "changed": new != doc}
    if kind == "rewrite" and not plan.edits:
        raise AssertionError(f"{case_id}: the workload has nothing to rewrite")
    if kind == "pass" and plan.edits:
        raise AssertionError(f"{case_id}: the pass-through workload was rewritten")
    ops: dict[str, Callable[[], object]] = {
        "toolid": lambda: body.rewrite(doc, api, doc_kind, policy),
        "json_loads": lambda: json.loads(doc),
    }
    if NEEDLE not in doc:
        ops["bytes_find"] = lambda: doc.find(NEEDLE)
    return Case(case_id, kind, what, len(doc), ops, info)


def stream_cases(events: int, tool_every: int) -> Iterator[Case]:
    """SSE streams with tool calls (rewrite) and text-only ones (pass), per API shape."""
    for shape in workloads.SHAPES:
        yield _stream_case(shape, "rewrite", events, tool_every)
        yield _stream_case(shape, "pass", events, 0)


def _stream_case(shape: Shape, kind: Literal["rewrite", "pass"], events: int, every: int) -> Case:
    api = API_OF[shape]
    policy = Policy(Direction.ENCODE)
    stream = workloads.sse_events(shape, events, tool_every=every)
    whole = b"".join(stream)
    pieces_64k = _pieces(whole, 64 * KiB)
    datas = [workloads.event_data(e) for e in stream]
    datas = [d for d in datas if d.startswith(b"{")]
    parses, changes = _count_parses(lambda: _feed(stream, api, policy))
    info = {
        "events": len(stream),
        "json_parses": parses,
        "changes": changes,
        "tool_events": sum(1 for e in stream if b"functions." in e),
    }
    if kind == "rewrite" and changes == 0:
        raise AssertionError(f"{shape} tool stream: nothing was rewritten")
    ops: dict[str, Callable[[], object]] = {
        "toolid": lambda: _feed(stream, api, policy),
        "json_loads": lambda: [json.loads(d) for d in datas],
        "bytes_find": lambda: whole.find(NEEDLE),
        "framing_only": lambda: _frame_only(stream),
        "toolid_64k_pieces": lambda: _feed(pieces_64k, api, policy),
    }
    label = "tools" if kind == "rewrite" else "text"
    what = f"{shape} SSE, {len(stream)} events" + (
        f", a tool call every {every}" if every else ", text only"
    )
    return Case(f"lib.sse.{shape}.{label}", kind, what, len(whole), ops, info)


def _feed(pieces: list[bytes], api: Api, policy: Policy) -> int:
    rewriter = StreamRewriter(api, policy)
    out = 0
    for piece in pieces:
        out += len(rewriter.feed(piece))
    out += len(rewriter.finish())
    return len(rewriter.changes)


def _frame_only(pieces: list[bytes]) -> int:
    framer = EventFramer()
    n = 0
    for piece in pieces:
        n += len(framer.feed(piece))
    return n


def _pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def _count_parses(run: Callable[[], int]) -> tuple[int, int]:
    """(JSON documents decoded, changes) while ``run`` runs: every json.loads, any decoder."""
    calls = 0
    original = json.JSONDecoder.decode

    def counting(self: json.JSONDecoder, s: str, *args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return original(self, s, *args, **kwargs)

    json.JSONDecoder.decode = counting  # type: ignore[method-assign]
    try:
        changes = run()
    finally:
        json.JSONDecoder.decode = original  # type: ignore[method-assign]
    return calls, changes


# --- timing -----------------------------------------------------------------------------------


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _batch_size(op: Callable[[], object], min_ns: int) -> int:
    """Calls per sample so that one sample takes at least ``min_ns``."""
    n = 1
    while True:
        t0 = time.perf_counter_ns()
        for _ in range(n):
            op()
        took = time.perf_counter_ns() - t0
        if took >= min_ns or n >= 1 << 20:
            return n
        n = max(n * 2, int(n * min_ns / max(took, 1) * 1.2))


def measure(case: Case, repeats: int, min_sample_ns: int) -> dict[str, Any]:
    """Per-call ns of each op of ``case`` (median, quartiles, min, max) and the ratios."""
    with _no_gc():
        batches = {name: _batch_size(op, min_sample_ns) for name, op in case.ops.items()}
        samples: dict[str, list[float]] = {name: [] for name in case.ops}
        for r in range(repeats):
            names = list(case.ops) if r % 2 == 0 else list(reversed(case.ops))
            for name in names:
                op, n = case.ops[name], batches[name]
                t0 = time.perf_counter_ns()
                for _ in range(n):
                    op()
                samples[name].append((time.perf_counter_ns() - t0) / n)
    stats = {name: spread(values) for name, values in samples.items()}
    toolid = stats["toolid"]["median"]
    result: dict[str, Any] = {
        "id": case.id,
        "group": "library",
        "kind": case.kind,
        "what": case.what,
        "bytes": case.size,
        "repeats": repeats,
        "ns": stats,
        **case.info,
        "ratio_json_loads": toolid / stats["json_loads"]["median"],
    }
    if "bytes_find" in stats:
        result["ratio_bytes_find"] = toolid / stats["bytes_find"]["median"]
    if "framing_only" in stats and "bytes_find" in stats:
        result["ratio_framing_find"] = (
            stats["framing_only"]["median"] / stats["bytes_find"]["median"]
        )
    return result


def spread(values: list[float]) -> dict[str, float]:
    """Median, quartiles, min and max of ``values``."""
    ordered = sorted(values)
    if len(ordered) >= 2:
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        q1 = q3 = ordered[0]
    return {
        "median": statistics.median(ordered),
        "q1": q1,
        "q3": q3,
        "min": ordered[0],
        "max": ordered[-1],
        "n": len(ordered),
    }
