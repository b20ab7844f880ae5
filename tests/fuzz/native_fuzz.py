"""Coverage-guided fuzzing of toolid/_native.c with AddressSanitizer and UBSan (libFuzzer).

``scripts/test`` runs it as its ``fuzz-native`` stage (after pytest)::

    .venv/bin/python tests/fuzz/native_fuzz.py [--long] [--seconds N]

It builds ``tests/fuzz/native_fuzz.c`` (which compiles the extension's source in, see there)
with clang's ``-fsanitize=fuzzer,address,undefined`` into ``build/fuzz-native/`` (rebuilt
when a source, the interpreter or the flags change), then:

1. runs two canaries, a deliberate heap overflow and a deliberate signed overflow, and fails
   unless ASan and UBSan each report theirs: the sanitizers are really in the program;
2. replays every input under ``tests/fuzz/native-regressions/<target>/``;
3. fuzzes each primitive (id_spans, event_ids, first_marker, splice), all at once, for the
   budget: 60 s, or 900 s with ``--long`` (or ``--seconds``), from a corpus kept in
   ``build/fuzz-native/corpus/`` and seeds made from ``tests/data``.

The embedded interpreter finds toolid in this checkout and its imports in this environment's
site-packages (``TOOLID_SITE``): the harness checks each answer against toolid's Python twins.

An input that crashes, trips a sanitizer or gets a wrong answer fails the run and is copied
into ``tests/fuzz/native-regressions/<target>/``: fix the bug and commit the file, and every
later run replays it.

Without clang and its libFuzzer runtime it installs them (``apt-get install clang
libclang-rt-dev``, as root, once: an installed toolchain is used as it is); where it cannot,
it says so in one line and exits 0 (the stage is skipped).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
os.environ["TOOLID_NATIVE"] = "off"  # the tables only (the harness has its own extension)

from toolid.prune import TABLES  # noqa: E402

HARNESS = REPO / "tests" / "fuzz" / "native_fuzz.c"
SOURCES = [HARNESS, REPO / "toolid" / "_native.c", Path(__file__)]
REGRESSIONS = REPO / "tests" / "fuzz" / "native-regressions"
BUILD = REPO / "build" / "fuzz-native"
TARGETS = ("id_spans", "event_ids", "first_marker", "splice")
CI_SECONDS, LONG_SECONDS = 60, 900
SANITIZE = ["-fsanitize=fuzzer,address,undefined", "-fno-sanitize-recover=undefined"]


def say(message: str) -> None:
    print(f"fuzz-native: {message}", file=sys.stderr, flush=True)


def link_flags() -> list[str]:
    """What links an embedded CPython, this interpreter's."""
    var = sysconfig.get_config_var
    version = var("LDVERSION") or var("VERSION")
    if var("Py_ENABLE_SHARED"):
        flags = [f"-L{var('LIBDIR')}", f"-Wl,-rpath,{var('LIBDIR')}", f"-lpython{version}"]
    else:  # a static libpython: its extension modules link against the program
        flags = [f"-L{var('LIBPL')}", f"-lpython{version}", "-Wl,--export-dynamic"]
    return flags + (var("LIBS") or "").split() + (var("SYSLIBS") or "").split()


def compile_command(output: Path) -> list[str]:
    include = sysconfig.get_paths()["include"]
    return [
        "clang", "-g", "-O1", "-fno-omit-frame-pointer", *SANITIZE,
        "-Wall", "-Wextra", "-Werror", f"-I{include}", str(HARNESS), "-o", str(output),
        *link_flags(),
    ]  # fmt: skip


def toolchain_works() -> bool:
    """Whether clang links a libFuzzer program with both sanitizers."""
    if shutil.which("clang") is None:
        return False
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch, "probe.c")
        source.write_text(
            "#include <stddef.h>\n#include <stdint.h>\n"
            "int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return d && !n; }\n"
        )
        probe = ["clang", *SANITIZE, str(source), "-o", str(Path(scratch, "probe"))]
        return subprocess.run(probe, capture_output=True, check=False).returncode == 0


def embeddable() -> bool:
    """Whether this interpreter's headers and library (to embed it) are here."""
    var = sysconfig.get_config_var
    version = var("LDVERSION") or var("VERSION")
    library = Path(var("LIBDIR"), var("LDLIBRARY"))
    if not var("Py_ENABLE_SHARED"):
        library = Path(var("LIBPL"), f"libpython{version}.a")
    return Path(sysconfig.get_paths()["include"], "Python.h").exists() and library.exists()


def ensure_toolchain() -> str | None:
    """None once clang with libFuzzer is there (installed if need be), or why it is not."""
    if not embeddable():
        return "this Python's headers or libpython (to embed it) are not installed"
    if toolchain_works():
        return None
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        return "no clang with libFuzzer here, and no apt-get as root to install it"
    say("installing clang and its libFuzzer runtime (apt-get)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, check=False)
    for packages in (["clang", "libclang-rt-dev"], ["clang"]):
        install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages]
        installed = subprocess.run(install, env=env, capture_output=True, check=False)
        if installed.returncode == 0 and toolchain_works():
            return None
    return "apt-get could not install clang with libFuzzer"


def build() -> Path:
    """The fuzzing program, built if a source, the interpreter or the command changed."""
    BUILD.mkdir(parents=True, exist_ok=True)
    program = BUILD / "native_fuzz"
    command = compile_command(program)
    stamp = BUILD / "native_fuzz.cmd"
    made = program.exists() and stamp.exists() and stamp.read_text() == " ".join(command)
    if made and all(source.stat().st_mtime <= program.stat().st_mtime for source in SOURCES):
        return program
    say("building " + " ".join(command[:8]) + " ...")
    subprocess.run(command, check=True)
    stamp.write_text(" ".join(command))
    return program


def environment(target: str) -> dict[str, str]:
    return {
        **os.environ,
        "TOOLID_FUZZ_TARGET": target,
        "TOOLID_ROOT": str(REPO),
        "PYTHONHOME": sys.base_prefix,  # the embedded interpreter's standard library
        # and this environment's packages (toolid's own imports need them)
        "TOOLID_SITE": os.pathsep.join(
            dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
        ),
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def canaries(program: Path) -> bool:
    """Whether ASan and UBSan each report their deliberate bug (so both are loaded)."""
    expected = {
        "canary-asan": "ERROR: AddressSanitizer: heap-buffer-overflow",
        "canary-ubsan": "runtime error: signed integer overflow",
    }
    for canary, report in expected.items():
        run = subprocess.run(
            [str(program)], env=environment(canary), capture_output=True, check=False
        )
        if run.returncode == 0 or report not in run.stderr.decode(errors="replace"):
            say(f"{canary} was not reported ({report!r} expected): the sanitizers are not loaded")
            return False
    return True


def seeds(target: str, into: Path) -> None:
    """Inputs made from tests/data, in the target's format (see native_fuzz.c)."""
    data = REPO / "tests" / "data"
    documents = [p.read_bytes() for p in sorted(data.glob("*.json"))]
    documents += (data / "transcript.jsonl").read_bytes().splitlines()
    streams = [p.read_bytes() for p in sorted(data.glob("*.sse"))]  # chat, messages, responses
    for stream in streams:
        lines = stream.splitlines()
        documents += [line[6:] for line in lines if line.startswith(b"data: {")]
    if target == "id_spans":
        inputs = [bytes([i]) + doc for i in range(len(TABLES)) for doc in documents]
    elif target == "event_ids":
        inputs = []
        for api, stream in enumerate(streams):  # the API's table and markers, limit 32767
            data_only = b"\n".join(line for line in stream.split(b"\n") if b"event:" not in line)
            for body in (stream, data_only, data_only[len(data_only) // 3 :]):
                inputs.append(bytes([api, api, 0xFF, 0x7F]) + body)
    elif target == "first_marker":
        words = b'\x04"id"\x09"call_id"\x0btool_use_id'
        inputs = [b"\x03\x00" + words + doc for doc in documents]
    else:
        inputs = [b"\x13\x01\x03\x02\x00xy\x05\x09\x01\x00z" + doc[:64] for doc in documents]
    for one in inputs:
        (into / hashlib.sha1(one).hexdigest()).write_bytes(one)


def replay(program: Path, target: str) -> bool:
    """Whether every regression input of the target passes."""
    inputs = sorted((REGRESSIONS / target).glob("*")) if (REGRESSIONS / target).is_dir() else []
    if not inputs:
        return True
    command = [str(program), *map(str, inputs)]
    run = subprocess.run(command, env=environment(target), capture_output=True, check=False)
    if run.returncode != 0:
        sys.stderr.write(run.stderr.decode(errors="replace")[-6000:])
        say(f"{target}: a regression input fails again")
        return False
    say(f"{target}: {len(inputs)} regression inputs pass")
    return True


def fuzz(program: Path, seconds: int) -> bool:
    """Fuzz the targets at once for ``seconds``; False (and the inputs saved as
    regressions) if any found a failing input."""
    scratch = Path(tempfile.mkdtemp(prefix="toolid-fuzz-native-"))
    runs = {}
    for target in TARGETS:
        corpus, seeded, artifacts = BUILD / "corpus" / target, scratch / target, scratch / "out"
        for directory in (corpus, seeded, artifacts / target):
            directory.mkdir(parents=True, exist_ok=True)
        seeds(target, seeded)
        command = [
            str(program), f"-max_total_time={seconds}", "-max_len=8192", "-timeout=20",
            "-rss_limit_mb=2048", "-print_final_stats=1",
            f"-artifact_prefix={artifacts / target}/", str(corpus), str(seeded),
        ]  # fmt: skip
        log = (scratch / f"{target}.log").open("wb")
        runs[target] = (subprocess.Popen(command, env=environment(target), stderr=log), log)
    passed = True
    for target, (process, log) in runs.items():
        code = process.wait()
        log.close()
        text = (scratch / f"{target}.log").read_text(errors="replace")
        counters = re.search(r"Loaded \d+ modules\s+\((\d+) inline 8-bit counters\)", text)
        executed = re.search(r"stat::number_of_executed_units:\s*(\d+)", text)
        found = sorted((scratch / "out" / target).glob("*"))
        if code == 0 and not found and counters and int(counters[1]) > 0 and executed:
            say(f"{target}: {executed[1]} inputs in {seconds} s ({counters[1]} counters): passed")
            continue
        passed = False
        sys.stderr.write(text[-8000:])
        if not (counters and int(counters[1]) > 0):
            say(f"{target}: no coverage instrumentation was loaded")
        for artifact in found:
            kept = REGRESSIONS / target / artifact.name
            kept.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(artifact, kept)
            say(f"{target}: a failing input, now {kept.relative_to(REPO)}: fix it, commit the file")
        say(f"{target}: FAILED (exit {code})")
    shutil.rmtree(scratch, ignore_errors=True)
    return passed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--long", action="store_true", help=f"fuzz {LONG_SECONDS} s")
    parser.add_argument("--seconds", type=int, help=f"fuzz this long (default {CI_SECONDS})")
    args = parser.parse_args()
    seconds = args.seconds or (LONG_SECONDS if args.long else CI_SECONDS)
    why_not = ensure_toolchain()
    if why_not is not None:
        say(f"skipped: {why_not}")
        return 0
    program = build()
    if not canaries(program):
        return 1
    say("ASan and UBSan report their canaries")
    replayed = all([replay(program, target) for target in TARGETS])
    return 0 if fuzz(program, seconds) and replayed else 1


if __name__ == "__main__":
    sys.exit(main())
