"""Command line: ``toolid encode`` / ``toolid decode`` one tool-call id per line (wire format v1),
``toolid inspect FILE`` lists the tool-call ids of a capture, ``toolid run -- COMMAND`` runs a
command through a toolid proxy of its own (``toolid._run``).

Each subcommand is added by a small ``_add_<name>(subparsers)`` function listed in
``SUBCOMMANDS``; it registers its arguments and sets ``handler`` (``Namespace -> int``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from toolid import _run
from toolid.codec import PROFILES, Profile, decode, encode
from toolid.inspect import FORMATS, Format
from toolid.inspect import run as run_inspect

type Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]
type Handler = Callable[[argparse.Namespace], int]

_IDS_HELP = (
    "ids to convert; with none, read them from stdin, one per line (split on \\n only: "
    "a \\r or any other character is part of the id, and an empty line is the empty id). "
    "Put -- before an id that starts with -."
)
_OUTPUT_NOTE = (
    "Output: one id per line. Characters the output cannot carry, such as lone "
    "surrogates that decode restores from crafted ids, are printed as backslash escapes "
    "(e.g. \\ud800), so the output is always printable."
)


def _read_stdin_ids() -> list[str]:
    """Ids from stdin, one per line; bytes are read as UTF-8 (``surrogatepass``)."""
    buffer = getattr(sys.stdin, "buffer", None)
    text = (
        buffer.read().decode("utf-8", "surrogatepass") if buffer is not None else sys.stdin.read()
    )
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def _write_ids(ids: Iterable[str]) -> None:
    """Print one id per line, backslash-escaping what stdout's encoding cannot carry."""
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    for id_ in ids:
        printable = id_.encode(encoding, "backslashreplace").decode(encoding)
        sys.stdout.write(printable + "\n")
    sys.stdout.flush()


def _ids(args: argparse.Namespace) -> list[str]:
    ids: list[str] = args.ids
    return ids if ids else _read_stdin_ids()


def _run_encode(args: argparse.Namespace) -> int:
    profile: Profile = args.profile
    _write_ids(encode(raw, profile, args.occurrence) for raw in _ids(args))
    return 0


def _occurrence(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 up, not {text!r}")
    return int(text)


def _run_decode(args: argparse.Namespace) -> int:
    _write_ids(decode(client_id) for client_id in _ids(args))
    return 0


def _add_encode(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "encode",
        help="turn raw upstream ids into client ids",
        description="Print the client id for each raw upstream id. " + _OUTPUT_NOTE,
    )
    p.add_argument(
        "--profile",
        choices=PROFILES,
        default="safe",
        help="which ids a client accepts as they are (default: safe)",
    )
    p.add_argument(
        "--occurrence",
        type=_occurrence,
        default=1,
        metavar="K",
        help="K >= 2: the occurrence-tagged id of the K-th tool call that carries the raw id "
        "(toolid gives these when an upstream reuses ids); default 1, the plain encoding",
    )
    p.add_argument("ids", nargs="*", metavar="ID", help=_IDS_HELP)
    p.set_defaults(handler=_run_encode)


def _add_decode(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "decode",
        help="restore raw upstream ids from client ids",
        description="Print the raw id inside each client id; anything encode did not "
        "produce comes back unchanged. " + _OUTPUT_NOTE,
    )
    p.add_argument("ids", nargs="*", metavar="ID", help=_IDS_HELP)
    p.set_defaults(handler=_run_decode)


def _run_inspect(args: argparse.Namespace) -> int:
    fmt: Format | None = None if args.format == "auto" else args.format
    return run_inspect(
        args.file,
        fmt,
        stdin=sys.stdin.buffer,
        stdout=sys.stdout,
        stderr=sys.stderr,
        json_output=args.json,
        repair=args.repair,
    )


def _add_inspect(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "inspect",
        help="list the tool-call ids in a capture and check they conform",
        description="Print a table of every tool-call id in FILE: where it is (line, SSE "
        "event, HAR entry or flow, and JSON path), the API, the id as seen, its raw form "
        "(decoded), the client id toolid gives it (later calls that reuse a raw id get "
        "occurrence tags), whether clients of each profile accept it (safe: [A-Za-z0-9_-]+, "
        "call: call_[A-Za-z0-9_-]+), and how many calls of its conversation define it when "
        "more than one does. Exit status: 0 when every id matches [A-Za-z0-9_-]+ and none is "
        "defined twice in a conversation, 1 when some id would be rejected by a strict API "
        "(Anthropic, OpenAI Responses, Bedrock), 2 when FILE cannot be read.",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print a JSON array with one object per id position instead of the table",
    )
    p.add_argument(
        "--repair",
        action="store_true",
        help="also print FILE with its history's pairing problems repaired, as toolid_repair=true "
        "sends it, and each repair: a JSON request body or a JSONL file of them (each line), or "
        "a transcript (a JSON array or JSONL file of one API's messages)",
    )
    p.add_argument(
        "--format",
        choices=("auto", *FORMATS),
        default="auto",
        help="json: one JSON body; jsonl: one JSON value per line (agent transcripts); "
        "sse: a server-sent-events body; har: a HAR file; flows: a mitmproxy flow file "
        "(default: auto, detected from the content)",
    )
    p.add_argument("file", metavar="FILE", help="the file to read, or - for stdin")
    p.set_defaults(handler=_run_inspect)


def _run_addon_path(args: argparse.Namespace) -> int:
    package = Path(__file__).resolve().parent
    # installed: the wheel carries addons/ inside the package; a checkout: beside it
    for addons in (package / "addons", package.parent / "addons"):
        if (addons / "toolid_addon.py").is_file():
            print(addons / "toolid_addon.py")
            return 0
    print(f"toolid: no addons/toolid_addon.py in or beside {package}", file=sys.stderr)
    return 1


def _add_addon_path(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "addon-path",
        help="print the path of the mitmproxy addon that goes with this toolid",
        description="Print the absolute path of the mitmproxy addon file that uses this "
        'toolid, to load it with: mitmdump -s "$(toolid addon-path)".',
    )
    p.set_defaults(handler=_run_addon_path)


def _run_run(args: argparse.Namespace) -> int:
    return _run.main(args.arguments)


def _add_run(subparsers: Subparsers) -> None:
    # Everything after `run` is toolid run's own to read (mitmproxy's options, then -- and
    # COMMAND; its --help too): no option of this parser may take any of it, hence a prefix
    # no argument uses.
    p = subparsers.add_parser(
        "run",
        help="run a command (an agent) with its HTTP(S) through a toolid proxy of its own",
        prefix_chars="+",
        add_help=False,
    )
    p.add_argument("arguments", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    p.set_defaults(handler=_run_run)


SUBCOMMANDS: list[Callable[[Subparsers], None]] = [
    _add_encode,
    _add_decode,
    _add_inspect,
    _add_addon_path,
    _add_run,
]


def build_parser() -> argparse.ArgumentParser:
    """The ``toolid`` argument parser with every subcommand in ``SUBCOMMANDS``."""
    parser = argparse.ArgumentParser(
        prog="toolid",
        description="Make LLM tool-call ids safe for agents and restore them exactly "
        "(wire format v1). " + _OUTPUT_NOTE,
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in SUBCOMMANDS:
        add(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI on ``argv`` (default ``sys.argv[1:]``); return the exit status.

    Usage errors print argparse's message and return 2; ``--help`` returns 0; stdin that
    is not UTF-8 returns 1.
    """
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    handler: Handler = args.handler
    try:
        return handler(args)
    except UnicodeDecodeError as exc:
        print(f"toolid: stdin is not UTF-8: {exc}", file=sys.stderr)
        return 1
