"""Repair: a request whose history pairs calls and results wrongly, made into one its
destination accepts, in the API's own shape. Sans I/O: bytes in, bytes and records out.

Each pairing problem ``toolid.pairing`` names gets the smallest change that makes the history
valid, and nothing the model or the user wrote is lost:

- ``missing-result``: a result is put in where the API wants it (``ApiRecord.repairs``: a
  message of its own after the last call or result of the call's turn, or a block first in
  the next user turn, else in one new user turn for all of that message's calls), saying that
  no result was recorded for the call;
- ``orphan-result``: the result becomes text in the same place (a user message, text
  blocks), its content kept, saying which call it answered; where results of its turn follow
  it, after them;
- ``misplaced-result``: the result is moved, as it is, to where a missing one would be put in
  (a user turn left with nothing is dropped; the history's first keeps a line saying so);
- ``duplicate-call`` and ``empty-id``: the later call (every call, for an empty id) and the
  result that answers it (results pair with calls by order) get a new id of their own
  (``codec.mint``, which no restoring changes back);
- ``composite-id``: each position holding it gets its first part (``call_1|fc_2``:
  ``call_1``), the call's own id.

Everything else stays byte for byte: the edits are insertions and replacements of whole
elements, blocks and id literals, found with ``value_spans``. A history toolid cannot repair
with certainty is left as it is, with the reason (``Repaired.refused``, an ``unrepairable``
problem): one that is a single object, an element that is no object, an output no text can
stand for, a repair after which ``pairing.check`` still finds a problem.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Sequence
from typing import Any, Final, NamedTuple

from toolid import codec, jsonparse
from toolid.apis import RECORDS, api_from_path, api_from_shape
from toolid.apis.record import (
    COMPOSITE,
    DUPLICATE,
    EMPTY,
    MISPLACED,
    MISSING,
    ORPHAN,
    Repairs,
)
from toolid.edit import Edit, literal_of, splice
from toolid.pairing import (
    HISTORIES,
    check,
    elements_of,
    kind_of,
    located,
    turn_ends,
)
from toolid.positions import DEFINES, Api, Doc, Found, find_ids, path_order, value_at
from toolid.problem import UNREPAIRABLE, Problem, show
from toolid.value_spans import element_spans, value_span

#: The change action of a repair.
REPAIRED: Final = "repaired"

#: What a result put in for a call that has none says.
NO_RESULT: Final = (
    "No result was recorded for this tool call (the run was interrupted, or the result was "
    "lost); toolid put in this placeholder so that the conversation can go on."
)
#: What the first turn of a history says when all its blocks were moved to their calls.
MOVED: Final = "[The tool results that were here were moved to the turn after their calls.]"
#: What an orphan result kept as text starts with.
ORPHAN_NOTE: Final = (
    "[The tool result below answered tool call {id}, which is not in this conversation.]"
)


class Repair(NamedTuple):
    """One repair: the problem's code, path and id, what was done (``inserted``, ``kept as
    text``, ``moved``, ``renamed``), a line saying what, and where the repaired request holds
    what was put in, moved or renamed (its path there)."""

    code: str
    path: str
    id: str
    done: str
    detail: str
    at: str = ""

    def record(self) -> dict[str, str]:
        """As plain data (``flow.metadata``, ``--json``)."""
        return {
            "action": REPAIRED,
            "code": self.code,
            "path": self.path,
            "id": self.id,
            "done": self.done,
            "detail": self.detail,
            "at": self.at,
        }

    def line(self) -> str:
        """``missing-result call_b at messages[1].tool_calls[1].id: inserted ...``."""
        return f"{self.code} {show(self.id)} at {self.path}: {self.done} {self.detail}"


class Repaired(NamedTuple):
    """A request after repair: its bytes (the same object when nothing was repaired), the
    repairs, the problems found, and why it was not repaired (an ``unrepairable`` problem;
    None when it was, or had nothing to repair)."""

    content: bytes
    repairs: tuple[Repair, ...] = ()
    problems: tuple[Problem, ...] = ()
    refused: Problem | None = None


def repair_request(content: bytes, *, path: str = "", api: Api | None = None) -> Repaired:
    """The request ``content`` (a JSON body of ``api``, else the API ``path`` names, else its
    shape's) with every pairing problem of its history repaired. Never raises."""
    try:
        document = jsonparse.loads(content)
    except (ValueError, RecursionError):
        return Repaired(content)
    api = api or api_from_path(path) or api_from_shape(document, Doc.REQUEST)
    if api is None or not isinstance(document, dict):
        return Repaired(content)
    member, items, elements = elements_of(document, api)
    if not items:
        return Repaired(content)
    numbered = [(number, one) for number, element in enumerate(elements) for one in element.ids]
    problems = located(elements, api)
    if not problems:
        return Repaired(content)
    listed = tuple(problem for _, problem in problems)
    why = _unrepairable(content, document, member, items)
    if why:
        return _refused(content, listed, why)
    try:
        plan = _Plan(content, api, member, items, numbered)
        for number, problem in problems:
            plan.add(number, problem)
        repaired = plan.content()
        document = jsonparse.loads(repaired)
        left = check(document, api)
    except _Refused as refused:
        return _refused(content, listed, str(refused))
    except (ValueError, RecursionError):
        return _refused(content, listed, "the repaired request would not parse")
    except (LookupError, TypeError) as exc:  # a shape the plan did not foresee
        return _refused(content, listed, f"the history has an unforeseen shape ({exc!r})")
    if left:
        return _refused(content, listed, f"the repair would leave {left[0].line()}")
    return Repaired(repaired, tuple(plan.placed(document)), listed)


def _refused(content: bytes, problems: tuple[Problem, ...], why: str) -> Repaired:
    """``content`` left as it is, with its pairing ``problems`` and ``why`` (``unrepairable``)."""
    return Repaired(content, (), problems, Problem(UNREPAIRABLE, why))


class _Refused(Exception):
    """A repair that cannot be made with certainty."""


def _unrepairable(content: bytes, document: Any, member: str, items: list[Any]) -> str:
    if not isinstance(value_at(document, member), list):
        return "the history is a single object, not a list"
    if not all(isinstance(item, dict) for item in items):
        return "an element of the history is not an object"
    if element_spans(content, member) is None:
        return "the history could not be located in the bytes"
    return ""


_ID_PART: Final = re.compile(r"[^|\s]+")


class _Renamed(NamedTuple):
    """A repair's new id, and the member it is in."""

    key: str
    value: str


def _path_of(items: list[Any], target: Any, member: str, blocks: str | None) -> str:
    """The path of the first element of ``items`` (or, with ``blocks``, block of an element)
    equal to ``target``; "" when none is."""
    for number, item in enumerate(items):
        if item == target:
            return f"{member}[{number}]"
        inner = item.get(blocks) if blocks and isinstance(item, dict) else None
        if isinstance(inner, list):
            for index, block in enumerate(inner):
                if block == target:
                    return f"{member}[{number}].{blocks}[{index}]"
    return ""


class _Plan:
    """The repairs of one request, gathered problem by problem, then written as edits."""

    def __init__(
        self,
        content: bytes,
        api: Api,
        member: str,
        items: list[dict[str, Any]],
        numbered: list[tuple[int, Found]],
    ) -> None:
        self.source = content
        self.api = api
        shape = RECORDS[api].repairs
        if shape is None:
            raise _Refused(f"toolid knows no repair for {RECORDS[api].title}")
        self.shape: Repairs = shape
        self.member = member
        self.items = items
        self.numbered = numbered
        self.spans = element_spans(content, member) or []
        self.repairs: list[Repair] = []
        self.targets: list[Any] = []  # what the repaired request holds for each repair
        # element number -> what goes right after it: new elements (JSON texts)
        self.after: dict[int, list[bytes]] = {}
        # element number -> blocks put in first among its blocks (JSON texts)
        self.first: dict[int, list[bytes]] = {}
        self.replaced: dict[tuple[int, int | None], list[bytes]] = {}  # (element, block) -> new
        self.dropped: set[tuple[int, int | None]] = set()  # (element, block): moved away
        self.renamed: dict[int, tuple[Found, str]] = {}  # id(found) -> (found, new value)
        self.used = {one.value for _, one in numbered}
        self.minted = 0
        self.by_path = {one.path: (number, one) for number, one in numbered}
        self.results = HISTORIES[api].results
        self.ends = turn_ends([kind_of(item) for item in items], HISTORIES[api])
        self.calls_in = {number for number, one in numbered if one.role is DEFINES}
        self.results_in = {  # the elements that hold a result
            number
            for number, one in numbered
            if one.role is not DEFINES and (one.kind, one.key) in self.results
        }
        self.answers: dict[str, dict[int, list[Found]]] = {}  # by id value: ``_answers``
        # element number -> blocks put in last among its blocks (JSON texts)
        self.last: dict[int, list[bytes]] = {}
        # element number -> the blocks of a new user turn right after it (JSON texts)
        self.turn: dict[int, list[bytes]] = {}

    # --- gathering -----------------------------------------------------------------------

    def add(self, number: int, problem: Problem) -> None:
        at = self.by_path.get(problem.path)
        if at is None:
            raise _Refused(f"the position {problem.path} was not found")
        _, found = at
        if problem.code == MISSING:
            self._missing(number, found, problem)
        elif problem.code == ORPHAN:
            self._orphan(number, found, problem)
        elif problem.code == MISPLACED:
            self._misplaced(number, found, problem)
        elif problem.code == DUPLICATE or (problem.code == EMPTY and found.role is DEFINES):
            self._renamed(number, found, problem)
        elif problem.code == COMPOSITE:
            part = _ID_PART.search(found.value)
            if part is None:
                raise _Refused(f"no id in {found.value!r}")
            self.renamed[id(found)] = (found, part.group())
            self._done(problem, "renamed", f"to {part.group()}", _Renamed(found.key, part.group()))
        # an empty id at a result is renamed with its call (``_renamed``)

    def _missing(self, number: int, call: Found, problem: Problem) -> None:
        try:
            result = self.shape.result(call.value, call.holder, NO_RESULT)
        except ValueError as exc:
            raise _Refused(str(exc)) from None
        text = _dumps(result)
        where = self._place(number, text)
        self._done(problem, "inserted", f"{where}: {text.decode()}", result)

    def _orphan(self, number: int, result: Found, problem: Problem) -> None:
        """The result kept as text in its place, or, where results of its turn follow it
        (which text must not come before), after them."""
        block = self._block_of(number, result)
        holder = self.items[number] if block is None else self._blocks(number)[block]
        note = ORPHAN_NOTE.format(id=result.value or '""')
        kept = self.shape.as_text(holder, note)
        texts = [_dumps(one) for one in kept]
        where = self._where(number, block)
        if block is None and number + 1 in self.results_in:  # in a run of results
            self.dropped.add((number, None))
            at = number + 1
            while at + 1 in self.results_in:
                at += 1
            self.after.setdefault(at, []).extend(texts)
            where = f"{where}, after {self.member}[{at}]"
        elif block is not None and any(b > block for b in self._result_blocks(number)):
            self.dropped.add((number, block))
            self.last.setdefault(number, []).extend(texts)
            where = f"{where}, last in {self.member}[{number}].{self.shape.blocks}"
        else:
            self.replaced[(number, block)] = texts
        self._done(problem, "kept as text", where, kept[0])

    def _result_blocks(self, number: int) -> list[int]:
        """The blocks of element ``number`` that hold results."""
        prefix = f"{self.member}[{number}].{self.shape.blocks}["
        return [
            _block_index(one.path, prefix)
            for n, one in self.numbered
            if n == number and one.role is not DEFINES and (one.kind, one.key) in self.results
        ]

    def _misplaced(self, number: int, result: Found, problem: Problem) -> None:
        block = self._block_of(number, result)
        if (number, block) in self.dropped:
            return  # one block, two misplaced results in it: moved once
        call = self._call_before(number, result)
        if call is None:
            raise _Refused(f"the call of the result at {problem.path} is not before it")
        start, end = self._span(number, block)
        text = self.source[start:end]
        self.dropped.add((number, block))
        where = self._place(call, text)
        moved = f"from {self._where(number, block)} {where}"
        self._done(problem, "moved", moved, json.loads(text))

    def _renamed(self, number: int, call: Found, problem: Problem) -> None:
        """The call, and the results that answer it, get a new id of their own."""
        new = self._mint()
        self.renamed[id(call)] = (call, new)
        for result in self._answers(call.value).get(id(call), ()):
            self.renamed[id(result)] = (result, new)
        self._done(problem, "renamed", f"to {new}", _Renamed(call.key, new))

    def _answers(self, value: str) -> dict[int, list[Found]]:
        """The results of each call (by ``id()``) holding ``value``, paired by order: each
        result answers the first call before it that no result answered yet (else none)."""
        if value not in self.answers:
            mentions = sorted(
                ((n, path_order(one.path), one) for n, one in self.numbered if one.value == value),
                key=lambda mention: mention[:2],
            )
            calls = [(n, one) for n, _, one in mentions if one.role is DEFINES]
            answered: dict[int, list[Found]] = {}
            for n, _, one in mentions:
                if one.role is DEFINES or (one.kind, one.key) not in self.results:
                    continue
                free = [c for m, c in calls if m < n and id(c) not in answered]
                if free:
                    answered[id(free[0])] = [one]
            self.answers[value] = answered
        return self.answers[value]

    def _done(self, problem: Problem, done: str, detail: str, target: Any) -> None:
        """Record a repair; ``target``: what the repaired request holds for it (an element or
        a block, or a ``_Renamed`` id), for ``placed``."""
        self.repairs.append(Repair(problem.code, problem.path, problem.id, done, detail))
        self.targets.append(target)

    def placed(self, repaired: dict[str, Any]) -> list[Repair]:
        """The repairs, each with where ``repaired`` (the repaired request, parsed) holds
        what it put in, moved or renamed: the first element or block equal to it, or the
        first position holding the new id."""
        items = value_at(repaired, self.member)
        items = items if isinstance(items, list) else []
        found = find_ids(repaired, self.api, Doc.REQUEST)
        placed = []
        for repair, target in zip(self.repairs, self.targets, strict=True):
            if isinstance(target, _Renamed):
                at = next(
                    (f.path for f in found if f.key == target.key and f.value == target.value), ""
                )
            else:
                at = _path_of(items, target, self.member, self.shape.blocks)
            placed.append(repair._replace(at=at))
        return placed

    def _mint(self) -> str:
        while True:
            self.minted += 1
            new = codec.mint("safe", self.minted)
            if new not in self.used:
                self.used.add(new)
                return new

    # --- where things go -----------------------------------------------------------------

    def _place(self, number: int, text: bytes) -> str:
        """Put the result ``text`` where the results of the call in element ``number`` go;
        say where."""
        blocks = self.shape.blocks
        if blocks is None:  # results are elements: after the last call or result of its turn
            end = self.ends[number]
            at = max(
                n
                for n in range(number, len(self.items) if end is None else end)
                if n in self.calls_in or (n in self.results_in and (n, None) not in self.dropped)
            )
            self.after.setdefault(at, []).append(text)
            return f"after {self.member}[{at}]"
        nxt = number + 1
        if nxt < len(self.items) and kind_of(self.items[nxt]) == self.shape.user_kind:
            self.first.setdefault(nxt, []).append(text)
            return f"first in {self.member}[{nxt}].{blocks}"
        self.turn.setdefault(number, []).append(text)
        return f"in a new user turn after {self.member}[{number}]"

    def _user_turn(self, blocks: list[bytes]) -> bytes:
        """A new user turn holding ``blocks`` (JSON texts, each kept as it is)."""
        empty = _dumps({**self.shape.user, self.shape.blocks or "": []})  # ends with "[]}"
        return empty[:-2] + b",".join(blocks) + b"]}"

    def _call_before(self, number: int, result: Found) -> int | None:
        key = result.value
        calls = [n for n, one in self.numbered if one.role is DEFINES and one.value == key]
        before = [n for n in calls if n < number]
        if before:
            return max(before)
        return min(calls) if calls else None

    def _block_of(self, number: int, result: Found) -> int | None:
        """The block of element ``number`` that holds ``result`` (None: results are elements)."""
        blocks = self.shape.blocks
        if blocks is None:
            return None
        block = _block_index(result.path, f"{self.member}[{number}].{blocks}[")
        if block < 0:
            raise _Refused(f"the result at {result.path} is not a block of its turn")
        return block

    def _blocks(self, number: int) -> list[Any]:
        blocks = self.items[number].get(self.shape.blocks or "")
        if not isinstance(blocks, list):
            raise _Refused(f"{self.member}[{number}] holds no list of blocks")
        return blocks

    def _where(self, number: int, block: int | None) -> str:
        element = f"{self.member}[{number}]"
        return element if block is None else f"{element}.{self.shape.blocks}[{block}]"

    def _span(self, number: int, block: int | None) -> tuple[int, int]:
        if block is None:
            return self.spans[number]
        spans = self._block_spans(number)
        return spans[block]

    def _block_spans(self, number: int) -> list[tuple[int, int]]:
        spans = element_spans(self.source, f"{self.member}[{number}].{self.shape.blocks}")
        if spans is None:
            raise _Refused(f"the blocks of {self.member}[{number}] could not be located")
        return spans

    # --- writing -------------------------------------------------------------------------

    def content(self) -> bytes:
        edits: list[Edit] = []
        for found, new in self.renamed.values():
            span = value_span(self.source, found.path)
            if span is None:
                raise _Refused(f"the id at {found.path} could not be located")
            edits.append((span[0], span[1], literal_of(new)))
        for number, texts in self.turn.items():  # new user turns go first after their call
            self.after.setdefault(number, []).insert(0, self._user_turn(texts))
        emptied = {
            number
            for number in {n for n, block in self.dropped if block is not None}
            if len(self._blocks(number))
            == sum(1 for n, block in self.dropped if n == number and block is not None)
            and number not in self.first
            and number not in self.last
        }
        if 0 in emptied:  # the history's first turn stays, saying where its blocks went
            emptied.discard(0)
            self.last[0] = [_dumps(self.shape.text_block(MOVED))]
        gone: list[int] = []  # elements of the history removed
        for number in sorted({n for n, _ in self.replaced} | {n for n, _ in self.dropped}):
            if number in emptied:
                continue
            if (number, None) in self.replaced:
                start, end = self.spans[number]
                edits.append((start, end, b",".join(self.replaced[(number, None)])))
            elif (number, None) in self.dropped:
                gone.append(number)
            else:
                spans = self._block_spans(number)
                for (n, block), texts in self.replaced.items():
                    if n == number and block is not None:
                        start, end = spans[block]
                        edits.append((start, end, b",".join(texts)))
                dropped = sorted(b for n, b in self.dropped if n == number and b is not None)
                edits.extend(_removals(spans, dropped))
        gone.extend(emptied)
        if gone:
            edits.extend(_removals(self.spans, sorted(gone)))
        for number, texts in self.first.items():
            edits.append(self._first_blocks(number, texts))
        for number, texts in self.last.items():
            spans = self._block_spans(number)
            moved = sum(1 for n, block in self.dropped if n == number and block is not None)
            joined = b",".join(texts)
            end = spans[-1][1]
            edits.append((end, end, joined if moved == len(spans) else b"," + joined))
        for number, texts in self.after.items():
            end = self.spans[number][1]
            edits.append((end, end, b"".join(b"," + text for text in texts)))
        edits.sort(key=lambda edit: (edit[0], edit[1]))
        if any(start < end for (_, end, _), (start, _, _) in itertools.pairwise(edits)):
            raise _Refused("two repairs would change the same bytes")
        return splice(self.source, _merged(edits))

    def _first_blocks(self, number: int, texts: list[bytes]) -> Edit:
        """The edit putting ``texts`` first among the blocks of element ``number``, after the
        results already there (a turn whose content is a string gets a list: the results,
        then the string as a text block)."""
        blocks = self.items[number].get(self.shape.blocks or "")
        joined = b",".join(texts)
        if isinstance(blocks, list):
            spans = self._block_spans(number)
            leading = 0
            results = set(self._result_blocks(number))
            while leading in results and (number, leading) not in self.dropped:
                leading += 1
            if leading < len(spans):
                start = spans[leading][0]
                return (start, start, joined + b",")
            if spans:
                end = spans[-1][1]
                return (end, end, b"," + joined)
            span = value_span(self.source, f"{self.member}[{number}].{self.shape.blocks}")
            if span is None:
                raise _Refused(f"the blocks of {self.member}[{number}] could not be located")
            return (span[0] + 1, span[0] + 1, joined)
        if isinstance(blocks, str):
            span = value_span(self.source, f"{self.member}[{number}].{self.shape.blocks}")
            if span is None:
                raise _Refused(f"the content of {self.member}[{number}] could not be located")
            text = _dumps(self.shape.text_block(blocks))
            return (span[0], span[1], b"[" + joined + b"," + text + b"]")
        raise _Refused(f"{self.member}[{number}] holds no blocks")


def _block_index(path: str, prefix: str) -> int:
    """The number after ``prefix`` (``messages[3].content[``) in ``path``; -1: not there."""
    if not path.startswith(prefix):
        return -1
    rest = path[len(prefix) :]
    return int(rest[: rest.index("]")])


def _removals(spans: Sequence[tuple[int, int]], numbers: list[int]) -> list[Edit]:
    """The edits removing the elements ``numbers`` (sorted, distinct) of an array whose element
    spans are ``spans``, each with the comma that parts it from the element before it (those
    before the first kept one, with the comma after them)."""
    gone = set(numbers)
    kept = next((n for n in range(len(spans)) if n not in gone), None)
    if kept is None:  # all of them
        return [(spans[0][0], spans[-1][1], b"")]
    edits: list[Edit] = []
    if kept > 0:
        edits.append((spans[0][0], spans[kept][0], b""))
    edits.extend((spans[n - 1][1], spans[n][1], b"") for n in numbers if n > kept)
    return edits


def _merged(edits: list[Edit]) -> list[Edit]:
    """``edits`` (sorted) with insertions at one offset joined, in order."""
    merged: list[Edit] = []
    for edit in edits:
        if merged and merged[-1][0] == merged[-1][1] == edit[0] == edit[1]:
            merged[-1] = (edit[0], edit[1], merged[-1][2] + edit[2])
        else:
            merged.append(edit)
    return merged


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
