"""Library cost: toolid's rewrite against ``json.loads``, its pass-through against ``bytes.find``.

Every case times its operations interleaved (rewrite, baseline, rewrite, baseline, ...) in the
thread's CPU time (``time.thread_time_ns``: wall time on an idle machine, and not inflated by
other processes on a busy one); a sample is one call, or a batch of calls for small bodies (then
per-call time = batch time / batch size). Ratios are medians over medians, with the spread of
the per-repeat ratios. A series (the restore scaling) is sampled interleaved across its cases.

Bodies: ``toolid.body.rewrite`` on whole request/response documents. Streams: a fresh
``toolid.stream.StreamRewriter`` fed the stream in 16 KiB pieces cut anywhere (as the proxy
stream workloads deliver it; mitmproxy calls the stream callable once per upstream chunk), then
``finish``; ``toolid_per_event`` feeds it one event per call (as LLM servers that flush every
event deliver it).

A stream case also counts the JSON documents toolid parses while rewriting it
(``json_parses``): the calls of ``toolid.jsonparse``'s public parse functions, where toolid
parses in Python; a stream without ids should parse none. What the native accelerator parses
itself is not counted there.

The garbage collector is off while timing (as timeit does); toolid's id caches are warm after
the first call, as they are for a conversation whose history is resent every turn.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Literal

from bench import workloads
from bench.workloads import SHAPES, Shape
from toolid import body, jsonparse
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
    """One body case before its (possibly 10 MiB) document is built.

    REQUEST: a follow-up request with ``calls`` prior tool calls (about 2.2 KiB each); RESPONSE:
    a response with 2 tool calls after ``size`` bytes of text.
    """

    doc_kind: Doc  # REQUEST: restore tid1_ ids; RESPONSE: encode Kimi-style ids
    shape: Shape
    kind: Literal["rewrite", "pass"]
    calls: int = 0
    size: int = 0

    @property
    def id(self) -> str:
        if self.doc_kind is Doc.REQUEST:
            if self.kind == "rewrite":
                return f"lib.restore.{self.shape}.{self.calls}"
            return f"lib.pass.request.{self.shape}.{self.calls}"
        if self.kind == "rewrite":
            return f"lib.encode.{self.shape}.{_size_label(self.size)}"
        return f"lib.pass.response.{self.shape}.{_size_label(self.size)}"


def body_specs(calls: tuple[int, ...], at_calls: int, size: int) -> list[BodySpec]:
    """Chat histories of every length in ``calls`` (the scaling series), the other shapes and the
    pass-through at ``at_calls``; responses to encode at ``size``, every shape, and to pass."""
    specs = [BodySpec(Doc.REQUEST, "chat", "rewrite", calls=n) for n in calls]
    specs += [BodySpec(Doc.REQUEST, shape, "rewrite", calls=at_calls) for shape in SHAPES[1:]]
    specs += [BodySpec(Doc.RESPONSE, shape, "rewrite", size=size) for shape in SHAPES]
    specs += [
        BodySpec(Doc.REQUEST, "chat", "pass", calls=at_calls),
        BodySpec(Doc.RESPONSE, "chat", "pass", size=size),
    ]
    return specs


#: The stream cases: (shape, label, tool call every N events; 0: none).
STREAMS: tuple[tuple[Shape, str, int], ...] = (
    ("chat", "tools", workloads.STREAM_TOOL_EVERY),
    ("chat", "every", 1),
    ("chat", "text", 0),
    ("responses", "tools", workloads.STREAM_TOOL_EVERY),
    ("responses", "text", 0),
    ("messages", "tools", workloads.STREAM_TOOL_EVERY),
    ("messages", "text", 0),
)


def stream_case_ids() -> list[str]:
    return [f"lib.sse.{shape}.{label}" for shape, label, _ in STREAMS]


def body_cases(calls: tuple[int, ...], at_calls: int, size: int) -> Iterator[Case]:
    """Request bodies to restore / pass, response bodies to encode / pass."""
    for spec in body_specs(calls, at_calls, size):
        api = API_OF[spec.shape]
        if spec.doc_kind is Doc.REQUEST:
            ids: Literal["client", "conforming"] = (
                "client" if spec.kind == "rewrite" else "conforming"
            )
            doc = workloads.history_request(spec.shape, spec.calls, ids=ids)
            what = f"{spec.shape} request, {spec.calls} prior calls"
            policy = Policy(Direction.DECODE)
        else:
            raw: Literal["raw", "conforming"] = "raw" if spec.kind == "rewrite" else "conforming"
            doc = workloads.tool_response(spec.shape, ids=raw, text_bytes=spec.size)
            what = f"{spec.shape} response, 2 calls + text"
            policy = Policy(Direction.ENCODE)
        case = _body_case(
            spec.id, spec.kind, what, doc, api=api, doc_kind=spec.doc_kind, policy=policy
        )
        case.info["calls"] = spec.calls or 2
        yield case


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
    fast = _orjson()
    if fast is not None:  # for reference: the accelerator's parse alone
        fast_loads = fast.loads
        ops["orjson_loads"] = lambda: fast_loads(doc)
    if NEEDLE not in doc:
        ops["bytes_find"] = lambda: doc.find(NEEDLE)
    return Case(case_id, kind, what, len(doc), ops, info)


def stream_cases(events: int, chunk: int) -> Iterator[Case]:
    """SSE streams with tool calls (rewrite) and text-only ones (pass), see ``STREAMS``."""
    for shape, label, every in STREAMS:
        yield _stream_case(shape, label, events, every, chunk)


def _stream_case(shape: Shape, label: str, events: int, every: int, chunk: int) -> Case:
    api = API_OF[shape]
    policy = Policy(Direction.ENCODE)
    stream = workloads.sse_events(shape, events, tool_every=every)
    whole = b"".join(stream)
    chunks = list(workloads.pieces(whole, chunk))
    datas = [workloads.event_data(e) for e in stream]
    datas = [d for d in datas if d.startswith(b"{")]
    parses, changes = _count_parses(lambda: _feed(chunks, api, policy))
    info = {
        "events": len(stream),
        "json_parses": parses,
        "changes": changes,
        "tool_events": sum(1 for e in stream if b"functions." in e),
    }
    kind: Literal["rewrite", "pass"] = "rewrite" if every else "pass"
    if kind == "rewrite" and changes == 0:
        raise AssertionError(f"{shape} tool stream: nothing was rewritten")
    ops: dict[str, Callable[[], object]] = {
        "toolid": lambda: _feed(chunks, api, policy),
        "json_loads": lambda: [json.loads(d) for d in datas],
        "bytes_find": lambda: whole.find(NEEDLE),
        "framing_only": lambda: _frame_only(chunks),
        "toolid_per_event": lambda: _feed(stream, api, policy),
    }
    what = f"{shape} SSE, {len(stream)} events in {chunk // KiB} KiB chunks" + (
        ", a tool call in every event"
        if every == 1
        else f", a tool call every {every}"
        if every
        else ", text only"
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


#: The functions of ``toolid.jsonparse`` that parse a document (those the module has).
PARSERS = ("loads", "loads_checked")


def _count_parses(run: Callable[[], int]) -> tuple[int, int]:
    """(JSON documents parsed, changes) while ``run`` runs: the calls of ``toolid.jsonparse``'s
    public parse functions (``PARSERS``; a call that another one makes counts once), which is
    where toolid parses a document in Python, with orjson or the standard library. Documents
    the native accelerator parses itself are not counted."""
    calls = 0
    depth = 0
    originals = {name: getattr(jsonparse, name) for name in PARSERS if hasattr(jsonparse, name)}

    def counting(original: Callable[..., Any]) -> Callable[..., Any]:
        def parse(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls, depth
            if depth == 0:
                calls += 1
            depth += 1
            try:
                return original(*args, **kwargs)
            finally:
                depth -= 1

        return parse

    for name, original in originals.items():
        setattr(jsonparse, name, counting(original))
    try:
        changes = run()
    finally:
        for name, original in originals.items():
            setattr(jsonparse, name, original)
    return calls, changes


def _orjson() -> ModuleType | None:
    """The orjson module if it is installed (toolid may use it as an accelerator)."""
    try:
        return importlib.import_module("orjson")
    except ImportError:
        return None


def json_parser() -> str:
    """Which JSON parser toolid uses: "orjson <version>" or "json (standard library)"."""
    fast = _orjson()
    if jsonparse.accelerated() and fast is not None:
        return f"orjson {fast.__version__}"
    return "json (standard library)"


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
    return measure_series([case], repeats, min_sample_ns)[0]


def measure_series(cases: list[Case], repeats: int, min_sample_ns: int) -> list[dict[str, Any]]:
    """``measure`` for several cases at once, every op of every case sampled once per repeat
    (interleaved, the order reversed every other repeat), so that drift hits them alike.

    Time is the thread's CPU time (``time.thread_time_ns``): the same as wall time on an idle
    machine, and not inflated by other processes taking the CPU on a busy one.
    """
    clock = time.thread_time_ns
    ops = [(case, name, op) for case in cases for name, op in case.ops.items()]
    with _no_gc():
        batches = [_batch_size(op, min_sample_ns) for _, _, op in ops]
        samples: list[list[float]] = [[] for _ in ops]
        for r in range(repeats):
            order = range(len(ops)) if r % 2 == 0 else reversed(range(len(ops)))
            for i in order:
                op, n = ops[i][2], batches[i]
                t0 = clock()
                for _ in range(n):
                    op()
                samples[i].append((clock() - t0) / n)
    by_case: dict[str, dict[str, list[float]]] = {}
    for (case, name, _), values in zip(ops, samples, strict=True):
        by_case.setdefault(case.id, {})[name] = values
    return [_result(case, by_case[case.id], repeats) for case in cases]


def _result(case: Case, samples: dict[str, list[float]], repeats: int) -> dict[str, Any]:
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
        "samples_ns": {name: samples[name] for name in ("toolid", "json_loads")},
        **case.info,
        "ratio_json_loads": toolid / stats["json_loads"]["median"],
    }
    # The spread of the ratio: one ratio per repeat (its samples were taken back to back).
    result["ratio_json_loads_spread"] = spread(
        [a / b for a, b in zip(samples["toolid"], samples["json_loads"], strict=True)]
    )
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
