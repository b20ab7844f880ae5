"""Pairing: does every tool result of a request's history answer a call, and every call get
its result? Sans I/O: a parsed document in, problems out.

Strict APIs reject a whole request whose history pairs calls and results wrongly, with a
terse text ("No tool call found for function call output with call_id ..."). ``check``
names each such problem before the upstream does, with a stable code, its position, its id
and the text the destination answers:

- ``orphan-result``: a result whose id no call of the history defines;
- ``missing-result``: a call with no result before its turn is over (the next turn that
  closes it, see ``History``); a call in the last turn of the history is not a problem,
  unless results of that turn have come;
- ``misplaced-result``: a result whose call is there, but that is not where its API wants it:
  before the call, past its turn, or after another block of its message;
- ``empty-id``: an empty id at any position;
- ``duplicate-call``: an id an earlier call already defined (at each later call);
- ``composite-id``: an id holding ``|``, a newline or other whitespace (a call id and an
  item id joined into one).

The positions and their roles come from the table (``positions.find_ids``); the history is
the array the table's request positions start in (``messages``, ``input``, ``contents``),
each element a turn or part of one, known by its ``role`` (else its ``type``). What differs
per API is data (``HISTORIES``): which positions are results and which calls need one, which
elements close a call's turn, the destination's texts. Ids are compared as the client sends
them, except that toolid's own encoded ids (untagged) stand for the raw id inside: restored,
``tid1_x`` and ``x`` are one id. Nothing here changes a document (``toolid.repair`` repairs
one, where the user asks).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from itertools import repeat
from operator import lt
from typing import Any, Final, NamedTuple

from toolid import codec, jsonparse
from toolid.apis import RECORDS, api_from_path
from toolid.apis.record import (
    CODES,
    COMPOSITE,
    DUPLICATE,
    EMPTY,
    LACKING_TEXTS,
    MISPLACED,
    MISSING,
    MISSING_ID,
    NOT_A_STRING,
    ORPHAN,
    History,
)
from toolid.edit import RewriteError
from toolid.locate import Label, Located, locate
from toolid.markers import Markers
from toolid.memo import memo
from toolid.positions import (
    DEFINES,
    Api,
    Doc,
    Found,
    find_ids,
    history_members,
    path_order,
    positions,
)
from toolid.problem import Problem

__all__ = [
    "CODES",
    "COMPOSITE",
    "DUPLICATE",
    "EMPTY",
    "HISTORIES",
    "MISPLACED",
    "MISSING",
    "MISSING_ID",
    "NOT_A_STRING",
    "ORPHAN",
    "Element",
    "check",
    "check_history",
    "check_request",
    "element_path",
    "history_of",
    "id_codes",
    "key_of",
    "kind_of",
    "located",
    "problem",
    "problem_at",
]

_COMPOSITE: Final = re.compile(r"[|\s]")


#: What pairing means in each API's request history (``ApiRecord.history``).
HISTORIES: Final[dict[Api, History]] = {api: each.history for api, each in RECORDS.items()}


@memo()  # pure; a history names each id twice, every turn again
def key_of(value: str) -> str:
    """The id a value stands for in pairing: an untagged encoded id its raw id (restored,
    the two are one), any other value itself (a tagged id names a call of its own)."""
    if "tid" not in value:
        return value
    raw, occurrence = codec.parse(value)
    return raw if occurrence == 1 else value


def id_codes(value: str) -> tuple[str, ...]:
    """The codes a value earns wherever it stands: ``empty-id``, ``composite-id``."""
    if not value:
        return (EMPTY,)
    return (COMPOSITE,) if _COMPOSITE.search(value) else ()


def problem(code: str, api: Api, found: Found) -> Problem:
    """The problem ``code`` at ``found`` (its path, value, holder), with the API's text."""
    holder_type = found.holder.get("type") if isinstance(found.holder, dict) else None
    return problem_at(
        code,
        api,
        found.path,
        found.value,
        kind=found.kind,
        holder_type=holder_type if isinstance(holder_type, str) else None,
    )


def problem_at(
    code: str,
    api: Api,
    path: str,
    value: str,
    *,
    kind: str = "call",
    holder_type: str | None = None,
) -> Problem:
    """The problem ``code`` of the id ``value`` at ``path``, of the table's ``kind``, held by
    an object of type ``holder_type``, with the API's text."""
    history = HISTORIES[api]
    text = history.texts.get(f"{code}.{kind}") or history.texts.get(code) or LACKING_TEXTS[code]
    guessed = code in LACKING_TEXTS or (
        code in history.guesses and f"{code}.{kind}" not in history.texts
    )
    block, _, key = path.rpartition(".")
    block = _dotted(block)
    member = ".".join(part for part in (block, holder_type, key) if part)
    element = _dotted(element_path(api, path))
    message = text.format(
        id=value,
        path=path,
        block=block,
        member=member,
        element=element,
        next_element=_LAST_NUMBER.sub(lambda number: str(int(number[0]) + 1), element, count=1),
    )
    return Problem(code, message, path, value, api, verbatim=not guessed)


_LAST_NUMBER: Final = re.compile(r"\d+(?=\D*$)")  # an element's number in its dotted path


def element_path(api: Api, path: str) -> str:
    """The path of the history element a position's path sits in (``messages[3]`` for
    ``messages[3].tool_calls[0].id``; ``message`` for a transcript's
    ``message.content[1].id``; ``""`` for an element at the root), read off the table."""
    match = _element_suffix(api).search(path)
    if match is None:
        return path.rsplit(".", 1)[0] if "." in path else ""
    return path[: match.start()]


@functools.cache
def _element_suffix(api: Api) -> re.Pattern[str]:
    """What follows the element in each of the table's request positions, as one regex."""
    members = history_members(api)
    rests = set()
    for position in positions(api, Doc.REQUEST):
        member = next(m for m in members if position.notation.startswith(m))
        rest = re.sub(r"^\[[^\]]*\]", "", position.notation.removeprefix(member))
        rest = re.sub(r"\[[^\]]*\]", "[]", rest).removeprefix(".")
        rests.add(re.escape(rest).replace(r"\[\]", r"\[\d+\]"))
    return re.compile(r"(?:^|\.)(?:" + "|".join(sorted(rests)) + r")$")


def _dotted(path: str) -> str:
    """A path as Anthropic spells it: ``messages.1.content.0``."""
    return re.sub(r"\[(\d+)\]", r".\1", path).removeprefix(".")


# --- a request body ---------------------------------------------------------------------------


def check_request(
    content: bytes, *, path: str = "", api: Api | None = None, located: Located | None = None
) -> list[Problem]:
    """``check`` of a request body (bytes): its API is ``api``, else the one ``path`` names,
    else its shape's. ``located``: what rewriting the body read of it (``locate`` of its
    history), so that it is not read again. A body that spells no call or result (one byte
    search) is not read; one that is not JSON has no problems here (rewriting says so)."""
    api = api or api_from_path(path)
    if located is None or located.labels is None:
        if not _pairing_markers(api).in_(content):
            return []
        try:
            located = locate(content, api, Doc.HISTORY)
        except RewriteError:
            return []
        if located is None or located.labels is None:
            return []
    return _check_located(content, located)


def _check_located(content: bytes, located: Located) -> list[Problem]:
    """``check`` of what ``locate`` read of a request's history: its ids, and its elements'
    kinds from their labels (the role, else the type, of each)."""
    api, spec = located.api, HISTORIES[located.api]
    ids, labels = located.found, located.labels or []
    first = ids[0].path if ids else labels[0][0] if labels else ""
    members = history_members(api)
    member = next((m for m in members if _in_member(first, m)), members[0])
    document = located.document
    numbers = _element_numbers([one.path for one in ids], member)
    if numbers is None:
        # ids in two of the places a history may be (both contents and request.contents)
        return check(jsonparse.loads(content) if document is None else document, api, ids)
    kinds = _label_kinds(labels, member)
    # Elements after the last labelled one or id close no turn: leaving them out changes no end.
    kinds.extend([None] * (max(numbers, default=-1) + 1 - len(kinds)))
    if document is None and spec.elsewhere and _elsewhere_markers(api).in_(content):
        document = jsonparse.loads(content)  # rare: then the member's value decides
    elsewhere = isinstance(document, dict) and any(document.get(name) for name in spec.elsewhere)
    return [one for _, one in _check(numbers, ids, kinds, [elsewhere] * len(kinds), api)]


def _label_kinds(labels: Sequence[Label], member: str) -> list[str | None]:
    """The kind of each element of the history in ``member``, from its labels (``locate``'s,
    in table order: a member's ``role`` labels, then its ``type`` labels, each in document
    order), up to the last labelled element."""
    if labels:
        path, key, _ = labels[0]
        last, last_key, _ = labels[-1]
        # One element holds a member once (the native parser does not vouch for a key given
        # twice; a parsed object has each once), so the numbers of one label's elements
        # increase: n labels of one member from element 0 to n - 1 label every element.
        if (
            key == last_key
            and path == f"{member}[0].{key}"
            and last == f"{member}[{len(labels) - 1}].{key}"
        ):
            return [value for _, _, value in labels]
    kinds: dict[int, str] = {}
    start = len(member) + 1
    for path, key, value in labels:  # "member[i].role" or "member.role" (one object)
        if _in_member(path, member):
            number = _element_number(path, start)
            if key == "role" or number not in kinds:  # "role" is listed first in the table
                kinds[number] = value
    return [kinds.get(number) for number in range(max(kinds, default=-1) + 1)]


def _element_numbers(paths: Sequence[str], member: str) -> list[int] | None:
    """``_element_number`` of each of ``paths``; None when one is not inside ``member``."""
    if sum(map(str.startswith, paths, repeat(member + "["))) == len(paths):  # the usual
        return list(map(_bracketed, paths))  # a member holds no "[" (``history_members``)
    inside = (member + "[", member + ".")
    if sum(map(str.startswith, paths, repeat(inside))) != len(paths):
        return None
    start = len(member) + 1
    return [_element_number(path, start) for path in paths]


@memo(256 * 1024)  # pure; every request of a conversation has its paths again
def _bracketed(path: str) -> int:
    """The number in a path's first brackets (``messages[12].tool_calls[0].id``: 12)."""
    start = path.index("[") + 1
    return int(path[start : path.index("]", start)])


def _element_number(path: str, start: int) -> int:
    """The number of the history element a path is in (``messages[12]...``: 12; a history
    that is one object: 0); ``start``: where the number begins, after ``member[``."""
    return int(path[start : path.index("]", start)]) if path[start - 1 : start] == "[" else 0


@functools.cache
def _elsewhere_markers(api: Api) -> Markers:
    """The members that say a history is kept by the server, as a document spells them."""
    return Markers([f'"{name}"'.encode() for name in HISTORIES[api].elsewhere])


@functools.cache
def _pairing_markers(api: Api | None) -> Markers:
    """Words of which a request with a call or a result at one of ``api``'s positions spells
    one (every API's: None): a filtered position's ``type`` values, else the id's own member
    (``tool_call_id``, ``tool_use_id``), or for a bare ``id`` the member above it
    (``tool_calls``). Sharper than the rewriting markers, which every Chat request spells."""
    words: list[bytes] = []
    for each in Api if api is None else (api,):
        members = history_members(each)
        for position in positions(each, Doc.REQUEST):
            member = next(m for m in members if position.notation.startswith(m))
            steps = re.findall(r"\[[^\]]*\]|[^.\[\]]+", position.notation.removeprefix(member))
            filters = [step[6:-1].split("|") for step in steps if step.startswith("[type=")]
            names = [step for step in steps if not step.startswith("[")]
            key = names[-1]
            chosen = filters[-1] if filters else [key] if key != "id" else names[-2:-1]
            words.extend(f'"{word}"'.encode() for word in chosen)
    return Markers(words)


# --- the check -------------------------------------------------------------------------------


class Element(NamedTuple):
    """One element of a history: its kind (``role``, else ``type``; None: neither) and the
    ids at the table's positions in it, each with its final path."""

    kind: str | None
    ids: Sequence[Found] = ()
    elsewhere: bool = False  # its results may answer calls the server keeps (not sent)


def kind_of(element: Any) -> str | None:
    """An element's kind: its ``role``, else its ``type`` (None: neither is a string)."""
    if not isinstance(element, dict):
        return None
    for member in ("role", "type"):
        value = element.get(member)
        if isinstance(value, str):
            return value
    return None


def check(document: Any, api: Api, found: Iterable[Found] | None = None) -> list[Problem]:
    """Every pairing problem of one request document of ``api``, in document order.

    ``found``: ``find_ids(document, api, Doc.REQUEST)`` when the caller has it already."""
    member, items = history_of(document, api)
    if not items:
        return []
    if found is None:
        found = find_ids(document, api, Doc.REQUEST)
    ids = [one for one in found if _in_member(one.path, member)]
    numbers = _element_numbers([one.path for one in ids], member)
    assert numbers is not None  # every one is inside the member
    elsewhere = any(document.get(name) for name in HISTORIES[api].elsewhere)
    kinds = [kind_of(item) for item in items]
    return [one for _, one in _check(numbers, ids, kinds, [elsewhere] * len(items), api)]


def history_of(document: Any, api: Api) -> tuple[str, list[Any]]:
    """Where a request document holds its history (the first of ``history_members`` it has)
    and the history's elements (an object there: its one element); ``("", [])``: none."""
    for member in history_members(api):
        node = document
        for name in member.split("."):
            node = node.get(name) if isinstance(node, dict) else None
        if isinstance(node, list):
            return member, node
        if isinstance(node, dict):
            return member, [node]
    return "", []


def elements_of(document: Any, api: Api) -> tuple[str, list[Any], list[Element]]:
    """Where a request document holds its history and its elements (``history_of``), and
    each as an ``Element``: its kind and the ids in it, at their paths in ``document``."""
    member, items = history_of(document, api)
    found = [one for one in find_ids(document, api, Doc.REQUEST) if _in_member(one.path, member)]
    numbers = _element_numbers([one.path for one in found], member)
    assert numbers is not None  # every one is inside the member
    ids: dict[int, list[Found]] = {}
    for number, one in zip(numbers, found, strict=True):
        ids.setdefault(number, []).append(one)
    elsewhere = any(document.get(name) for name in HISTORIES[api].elsewhere)
    return (
        member,
        items,
        [
            Element(kind_of(item), ids.get(number, []), elsewhere)
            for number, item in enumerate(items)
        ],
    )


def _in_member(path: str, member: str) -> bool:
    """Whether ``path`` is inside the request member ``member`` (``contents[2]...``)."""
    return path.startswith(member) and path[len(member) : len(member) + 1] in ("[", ".")


def check_history(history: Sequence[Element], api: Api) -> list[Problem]:
    """Every pairing problem of ``history`` (see the module docstring), in document order."""
    return [one for _, one in located(history, api)]


def located(history: Sequence[Element], api: Api) -> list[tuple[int, Problem]]:
    """``check_history``, each problem with the number of the element it is in."""
    numbers = [number for number, element in enumerate(history) for _ in element.ids]
    ids = [one for element in history for one in element.ids]
    kinds = [element.kind for element in history]
    return _check(numbers, ids, kinds, [element.elsewhere for element in history], api)


def _check(
    numbers: Sequence[int],
    ids: Sequence[Found],
    kinds: Sequence[str | None],
    elsewhere: Sequence[bool],
    api: Api,
) -> list[tuple[int, Problem]]:
    """The problems of the ``ids`` of a history, each with the number of its element
    (``numbers``: each id's; ``kinds`` and ``elsewhere``: each element's, every numbered one
    included). Of each kind, definitions come in document order (as ``find_ids`` gives
    them, or element by element)."""
    spec = HISTORIES[api]
    if spec.next_only and kinds and kinds[-1] is None:
        # Read as ``_check_located`` reads labels: up to the last element with a kind or an id
        # (the elements after it close no turn, but with ``next_only`` their number would).
        last = max((n for n, kind in enumerate(kinds) if kind is not None), default=-1)
        kinds = kinds[: max(last, *numbers, -1) + 1]
    values = [f.value for f in ids]
    plain = all(values) and _plain("".join(values))  # then no id is empty or composite
    ends = turn_ends(kinds, spec)
    late = _after_other_blocks(numbers, ids, spec) if spec.results_first else _NONE_LATE
    if plain and not late and _answered_in_order(numbers, ids, values, ends, api):
        return []
    flagged: list[tuple[int, str, Found]] = []  # (element, code, id), a Problem made of each
    first: dict[tuple[str, str], int] = {}  # (kind, key) -> the element of its first call
    again: dict[tuple[str, str], list[int]] = {}  # (kind, key) -> the elements of later ones
    calls: list[tuple[int, Found, tuple[str, str]]] = []
    references: list[tuple[int, Found, tuple[str, str]]] = []
    results, needs, types = spec.results, spec.calls, spec.call_types
    composite, key_of_value = _COMPOSITE.search, key_of
    for number, at in zip(numbers, ids, strict=True):  # the hot loop
        kind, value = at.kind, at.value
        if not plain:
            if not value:
                flagged.append((number, EMPTY, at))
                continue  # an empty id pairs with nothing: its empty-id says it all
            if not _plain(value) and composite(value):
                flagged.append((number, COMPOSITE, at))
        pair = (kind, key_of_value(value))
        if at.role is not DEFINES:
            if (kind, at.key) in results:
                references.append((number, at, pair))
        elif pair in first:
            flagged.append((number, DUPLICATE, at))
            again.setdefault(pair, []).append(number)
        else:
            first[pair] = number
            if (kind, at.key) in needs and (types is None or at.holder.get("type") in types):
                calls.append((number, at, pair))
    calls_made = _Calls(first, again, {pair for _, _, pair in calls})
    answered = _judge(references, calls_made, ends, late, elsewhere, flagged=flagged)
    # A call in the last turn of the history is not a problem (its results are to come),
    # unless results of that turn have come: then all of them are due.
    begun = any(ends[number] is None and pair in answered for number, _, pair in calls)
    for number, at, pair in calls:
        if pair not in answered and (begun or ends[number] is not None):
            flagged.append((number, MISSING, at))
    found = [(number, problem(code, api, at)) for number, code, at in flagged]
    found.sort(key=lambda item: (item[0], path_order(item[1].path), CODES.index(item[1].code)))
    return found


class _Calls(NamedTuple):
    """The calls of a history by (kind, key): the element of the first, those of the later
    ones, and which need a result (a server tool's is in its own element)."""

    first: dict[tuple[str, str], int]
    again: dict[tuple[str, str], list[int]]
    needing: set[tuple[str, str]]


def _judge(
    references: list[tuple[int, Found, tuple[str, str]]],
    calls: _Calls,
    ends: Sequence[int | None],
    late: frozenset[int],
    elsewhere: Sequence[bool],
    *,
    flagged: list[tuple[int, str, Found]],
) -> set[tuple[str, str]]:
    """Flag each result whose call is not in the history (``orphan-result``), or is but not
    where its result is due (``misplaced-result``: before it, past its turn, or after another
    block); the calls that have a result."""
    answered: set[tuple[str, str]] = set()
    for number, at, pair in references:
        made = calls.first.get(pair)
        if made is None:
            if not elsewhere[number]:
                flagged.append((number, ORPHAN, at))
            continue
        if pair in calls.again:  # the latest call before it, of those with its id
            made = max((n for n in (made, *calls.again[pair]) if n < number), default=made)
        answered.add(pair)
        if pair not in calls.needing:
            continue
        if not (made < number and ((end := ends[made]) is None or number < end)) or id(at) in late:
            flagged.append((number, MISPLACED, at))
    return answered


def _answered_in_order(
    numbers: Sequence[int],
    ids: Sequence[Found],
    values: list[str],
    ends: Sequence[int | None],
    api: Api,
) -> bool:
    """Whether the ids of a history, every one plain (``values``: theirs), are paired the way
    nearly every history is, which has no problem: every id of one kind, the calls first (as
    the table lists them), each a call that needs a result, their ids distinct, then the
    results, the n-th answering the n-th call (the same id, in a later element, before the
    call's turn ends). False says nothing (the caller checks the history in full). Worked in
    slices and columns: a history holds a thousand ids."""
    if len({f.kind for f in ids}) != 1:
        return False
    roles, kind, spec = [f.role for f in ids], ids[0].kind, HISTORIES[api]
    count = roles.count(DEFINES)
    if 2 * count != len(ids) or DEFINES in roles[count:]:
        return False
    calls, results = ids[:count], ids[count:]
    if any((kind, key) not in spec.calls for key in {f.key for f in calls}) or any(
        (kind, key) not in spec.results for key in {f.key for f in results}
    ):
        return False
    if spec.call_types is not None and not spec.call_types.issuperset(
        map(dict.get, (f.holder for f in calls), repeat("type"))
    ):
        return False
    called, answers = values[:count], values[count:]
    keys = list(map(key_of, called))
    if len(set(keys)) < count or (answers != called and list(map(key_of, answers)) != keys):
        return False
    made, answered = numbers[:count], numbers[count:]
    closed = [len(ends) if end is None else end for end in ends]
    return all(map(lt, made, answered)) and all(map(lt, answered, map(closed.__getitem__, made)))


_PLAIN_ASCII: Final = bytes(range(0x21, 0x7F)).replace(b"|", b"")  # printable, not " " or "|"


def _plain(text: str) -> bool:
    """Whether ``text`` is printable and holds no ``|`` or space: then it holds no
    whitespace, and ``_COMPOSITE`` finds nothing in it."""
    if text.isascii():
        return not text.encode("ascii").translate(None, _PLAIN_ASCII)
    return text.isprintable() and " " not in text and "|" not in text


def _after_other_blocks(
    numbers: Sequence[int], ids: Sequence[Found], spec: History
) -> frozenset[int]:
    """The results (``id()`` of each) that follow another kind of block in their element
    (``History.results_first``), read off their paths (``messages[3].content[2]...``: the
    third block): the results of an element must be its first blocks. The results of one
    element come in document order (``find_ids``), so the n-th of them must be block n."""
    keys = {key for _, key in spec.results}
    results = [(n, at) for n, at in zip(numbers, ids, strict=True) if at.key in keys]
    references = [pair for pair in results if pair[1].role is not DEFINES]
    if not references:
        return _NONE_LATE
    blocks = _BLOCK.findall("\n".join(at.path for _, at in references))  # one per path
    late: list[int] = []
    expected, element = 0, -1
    for (number, at), block in zip(references, blocks, strict=True):
        if not block:
            continue  # not a block of an element (a history that is one object)
        if number != element:
            expected, element = 0, number
        if int(block) != expected:
            late.append(id(at))
        expected += 1
    return frozenset(late)


# The block a result is in, per line of paths: the number in its second brackets
# (member[n].blocks[k]...), or "" for a path without them.
_BLOCK: Final = re.compile(r"^(?:[^\[\n]*\[\d+\][^\[\n]*\[(\d+)\])?.*$", re.MULTILINE)
_NONE_LATE: Final[frozenset[int]] = frozenset()


def turn_ends(kinds: Sequence[str | None], spec: History) -> list[int | None]:
    """For each element, the first later element that closes a call made in it (None: the
    history ends first); with ``History.next_only``, the one after the next."""
    if spec.next_only:
        last = len(kinds) - 1
        return [number + 2 if number < last else None for number in range(len(kinds))]
    closes, runs = spec.closes, spec.runs
    ends: list[int | None] = [None] * len(kinds)
    closing: int | None = None  # the first closing element after ``number``
    after_run: int | None = None  # the first after the closing elements right after it
    for number in range(len(kinds) - 1, -1, -1):
        # with runs, the closing elements right after a call are its own turn
        ends[number] = after_run if runs else closing
        if kinds[number] in closes:
            closing = number
        else:
            after_run = closing
    return ends
