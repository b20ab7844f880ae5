"""Coverage-guided fuzzing of toolid's parsers and rewriters with atheris (libFuzzer).

Optional, not collected by pytest, and atheris is not a project dependency. It needs
atheris in the interpreter that runs it, e.g. without touching the project's venv:

    .venv/bin/python -m pip install --target /tmp/atheris-pkg atheris
    PYTHONPATH=/tmp/atheris-pkg:. .venv/bin/python tests/fuzz/atheris_fuzz.py \\
        -max_total_time=600 -max_len=4096 -artifact_prefix=/tmp/ [CORPUS_DIR ...]

Without a corpus directory it seeds a temporary one from tests/data. Each input picks a
target with its first bytes and checks the same invariants as the hypothesis fuzz tests:

- body: ``tests.fuzz.oracle.check_rewrite`` (only RewriteError; edits only inside id
  literals at id positions; nothing missed; the parsed output right);
- stream: any bytes, any split, any max_event_bytes: never raises, the same output and
  changes however split, the input back when nothing changed;
- compressed stream: any bytes as gzip/deflate/br/zstd: never raises;
- codec: decode(encode(x)) == x, encode(x) is safe, decode never raises.

A crash or a failed invariant stops the run and writes the input to crash-<sha1> in the
current directory (run it from a scratch directory, or pass -artifact_prefix=/tmp/).
"""

from __future__ import annotations

import itertools
import shutil
import sys
import tempfile
from pathlib import Path

import atheris

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

with atheris.instrument_imports():
    from toolid import codec
    from toolid.body import Direction, Policy
    from toolid.positions import Api, Doc
    from toolid.rules import RULE_SETS
    from toolid.stream import StreamRewriter

from tests.fuzz.oracle import check_rewrite  # noqa: E402
from tests.fuzz.test_fuzz_stream import crlf_kept  # noqa: E402

APIS = [None, *Api]
DOCS = list(Doc)
POLICIES = [
    Policy(Direction.ENCODE),
    Policy(Direction.ENCODE, profile="call"),
    Policy(Direction.DECODE),
    Policy(Direction.DECODE, rules=RULE_SETS["safe"]),
    Policy(Direction.DECODE, rules=RULE_SETS["mistral"]),
]
ENCODINGS = ["gzip", "deflate", "br", "zstd"]


def run_stream(pieces: list[bytes], api: Api | None, **kwargs: object) -> tuple[bytes, list]:
    rewriter = StreamRewriter(api, Policy(Direction.ENCODE), **kwargs)  # type: ignore[arg-type]
    out = b"".join(rewriter.feed(piece) for piece in pieces) + rewriter.finish()
    return out, rewriter.changes


def test_one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    target = fdp.ConsumeIntInRange(0, 3)
    api = APIS[fdp.ConsumeIntInRange(0, len(APIS) - 1)]
    if target == 0:
        doc = DOCS[fdp.ConsumeIntInRange(0, len(DOCS) - 1)]
        policy = POLICIES[fdp.ConsumeIntInRange(0, len(POLICIES) - 1)]
        check_rewrite(fdp.ConsumeBytes(fdp.remaining_bytes()), api, doc, policy)
    elif target == 1:
        limit = fdp.ConsumeIntInRange(1, 1 << 20)
        cuts = sorted(fdp.ConsumeIntListInRange(fdp.ConsumeIntInRange(0, 8), 0, 1 << 16))
        payload = fdp.ConsumeBytes(fdp.remaining_bytes())
        points = [0, *sorted({c % (len(payload) + 1) for c in cuts}), len(payload)]
        pieces = [payload[a:b] for a, b in itertools.pairwise(points)]
        # (a cut between a CR and its LF can change what counts as oversized: see
        # test_fuzz_stream.test_a_crlf_split_does_not_make_the_next_event_oversized)
        pieces = crlf_kept(pieces)
        whole, changes = run_stream([payload], api, max_event_bytes=limit)
        split, split_changes = run_stream(pieces, api, max_event_bytes=limit)
        assert whole == split and changes == split_changes
        assert changes or whole == payload
    elif target == 2:
        encoding = ENCODINGS[fdp.ConsumeIntInRange(0, len(ENCODINGS) - 1)]
        payload = fdp.ConsumeBytes(fdp.remaining_bytes())
        run_stream(
            [payload[: len(payload) // 2], payload[len(payload) // 2 :]],
            api,
            content_encoding=encoding,
        )
    else:
        raw = fdp.ConsumeBytes(fdp.remaining_bytes()).decode("utf-8", "surrogateescape")
        for profile in codec.PROFILES:
            client = codec.encode(raw, profile)
            assert codec.decode(client) == raw
            assert codec.is_strict_safe(client)
            assert profile == "safe" or client.startswith("call_")
        codec.decode(raw)


def main() -> None:
    args = sys.argv[1:]
    if not any(not a.startswith("-") for a in args):
        corpus = Path(tempfile.mkdtemp(prefix="toolid-atheris-"))
        for n, seed in enumerate(sorted((REPO / "tests" / "data").iterdir())):
            # first byte 0: the body target; 1: the stream target
            kind = b"\x01" if seed.suffix == ".sse" else b"\x00"
            (corpus / f"seed-{n}").write_bytes(kind + b"\x00\x00\x00" + seed.read_bytes())
        args.append(str(corpus))
        print(f"seeded {corpus} from tests/data", file=sys.stderr)
    else:
        corpus = None
    atheris.Setup([sys.argv[0], *args], test_one_input)
    try:
        atheris.Fuzz()
    finally:
        if corpus is not None:
            shutil.rmtree(corpus, ignore_errors=True)


if __name__ == "__main__":
    main()
