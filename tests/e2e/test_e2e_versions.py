"""The addon in the mitmproxy people already have: the oldest and the newest supported 12.x,
each in its own cached venv holding nothing but that mitmproxy (``cache.venv``).

mitmdump runs as a user would run it: from another working directory, this checkout not
on PYTHONPATH and toolid not installed, loading the addon by its absolute path (so the
addon has to find the checkout itself), or by a relative path from ``config.yaml``, or from
a ``pip install`` of the checkout via ``toolid addon-path``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import ssl
import subprocess
import time
import tomllib
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest
from mitmproxy.net import encoding
from standin import (
    API,
    Exchange,
    ScenarioHandle,
    UpstreamServer,
    client_bytes,
    end_chunked,
    kimi_parts,
    sse_headers,
    write_body,
    write_head,
)

from . import cache
from .cases import check_wire_loop, wire_client
from .conftest import ADDON, REPO_ROOT, Mitmdump, MitmdumpPool
from .helpers import dump_json, encode_safe, turn1_request, wire_loop

pytestmark = pytest.mark.e2e

OLDEST = "12.0.0"
NEWEST = metadata.version("mitmproxy")  # the dev extra pins the newest 12.x
VERSIONS = [OLDEST, NEWEST]


def mitmproxy_venv(version: str) -> Path:
    return cache.venv(f"mitmproxy-{version}", [f"mitmproxy=={version}"])


def user_mitmdump(workdir: Path, venv: Path, addon: Path | None = ADDON) -> Mitmdump:
    """mitmdump of ``venv``, run from ``workdir`` without this checkout on PYTHONPATH."""
    executable = venv / "bin" / "mitmdump"
    options = {"ssl_insecure": "true"}  # the TLS upstream's certificate is self-signed
    return Mitmdump(workdir, "regular", options, executable=executable, addon=addon, isolated=True)


def check_loop(proxy: Mitmdump, upstream: UpstreamServer, api: API, stream: bool) -> None:
    """A two-turn loop through ``proxy``: ids encoded for the client, restored upstream."""
    handle = upstream.scenario(writes="random" if stream else "events")
    verify = ssl.create_default_context(cafile=str(proxy.ca_cert))
    with wire_client(proxy, verify=verify) as client:
        result = wire_loop(client, handle, api, stream=stream)
    check_wire_loop(result, handle)


@pytest.fixture(scope="module", params=VERSIONS)
def user_proxy(
    request: pytest.FixtureRequest, mitm: MitmdumpPool, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Mitmdump]:
    """``mitmdump -s /abs/path/addons/toolid_addon.py`` of one mitmproxy version."""
    workdir = tmp_path_factory.mktemp(f"mitmproxy-{request.param}")
    with mitm.watching(user_mitmdump(workdir, mitmproxy_venv(request.param))) as proxy:
        yield proxy


def test_buffered_encode_and_restore(user_proxy: Mitmdump, upstream: UpstreamServer) -> None:
    check_loop(user_proxy, upstream, "chat", stream=False)


def test_streamed_encode(user_proxy: Mitmdump, upstream: UpstreamServer) -> None:
    check_loop(user_proxy, upstream, "anthropic", stream=True)


def test_https(user_proxy: Mitmdump, tls_upstream: UpstreamServer) -> None:
    check_loop(user_proxy, tls_upstream, "responses", stream=False)


async def zstd_stream(ex: Exchange, writer: asyncio.StreamWriter, handle: ScenarioHandle) -> bool:
    """The usual Chat stream, zstd-compressed, each event its own frame and chunk."""
    parts, filled, placeholders = kimi_parts(handle.scenario, "chat", True)
    ex.extra["expected"] = client_bytes(b"".join(parts), placeholders, encode_safe)
    await write_head(writer, sse_headers([("content-encoding", "zstd")]), ex=ex)
    for event in filled:
        await write_body(writer, ex, encoding.encode(event, "zstd"), chunked=True)
    await end_chunked(writer)
    return True


def test_zstd_stream(user_proxy: Mitmdump, upstream: UpstreamServer) -> None:
    """Decoded with the zstd module of that mitmproxy's Python: zstandard for 12.0 to 12.2,
    backports.zstd from 12.3 on."""
    handle = upstream.scenario(responder=zstd_stream)
    with (
        wire_client(user_proxy) as client,
        client.stream(
            "POST", handle.url("chat"), content=dump_json(turn1_request("chat", True))
        ) as response,
    ):
        got = b"".join(response.iter_raw())
    assert "content-encoding" not in response.headers
    assert got == handle.turn(0).extra["expected"]


def copy_checkout(dest: Path) -> Path:
    """A copy of the checkout's installable part: the package, addons/, pyproject.toml and
    README.md (what a build reads; it writes into the copy)."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO_ROOT / name, dest / name)
    for name in ("toolid", "addons"):
        ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
        shutil.copytree(REPO_ROOT / name, dest / name, ignore=ignore)
    return dest


@pytest.mark.parametrize(("version", "how"), [(OLDEST, "config.yaml"), (NEWEST, "-s relative")])
def test_checkout_elsewhere_and_reload(
    version: str, how: str, tmp_path: Path, mitm: MitmdumpPool, upstream: UpstreamServer
) -> None:
    """A checkout in another folder, its addon given by a path relative to the working
    directory (``-s``) or to the config file (``scripts:`` in ``config.yaml``); touching the
    file reloads the addon, which still works. (mitmproxy's script loading is the same
    code from 12.0 to 12.3: one version each.)"""
    checkout = copy_checkout(tmp_path / "checkout")
    addon = Path("..", "checkout", "addons", "toolid_addon.py")  # from tmp_path/run
    proxy = user_mitmdump(tmp_path / "run", mitmproxy_venv(version), addon)
    if how == "config.yaml":
        proxy.addon = None
        (proxy.confdir / "config.yaml").write_text(f'scripts: ["../{addon}"]\n')
    with mitm.watching(proxy):
        check_loop(proxy, upstream, "chat", stream=False)
        mark = proxy.mark()
        later = time.time() + 2
        os.utime(checkout / "addons" / "toolid_addon.py", (later, later))
        proxy.wait_for_log("Loading script", mark)
        check_loop(proxy, upstream, "chat", stream=False)


def run(*cmd: str | Path, cwd: Path) -> str:
    """Run ``cmd`` in ``cwd`` without this checkout or the suite's venv in its environment;
    its stdout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, f"{cmd}: {done.stdout}{done.stderr}"
    return done.stdout.strip()


PIP = ("-m", "pip", "-q", "--no-input", "--disable-pip-version-check")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checkout's wheel, built as pip builds it, with pyproject.toml's build requirements
    (cached, not fetched by every run)."""
    with (REPO_ROOT / "pyproject.toml").open("rb") as f:
        build_requires = tomllib.load(f)["build-system"]["requires"]
    builder = cache.venv("build", build_requires) / "bin" / "python"
    where = tmp_path_factory.mktemp("wheel")
    source = copy_checkout(where / "source")
    build = ("wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", "dist", source)
    run(builder, *PIP, *build, cwd=where)
    (built,) = (where / "dist").glob("toolid-*.whl")
    return built


def test_pip_install_keeps_mitmproxy_and_addon_path(
    wheel: Path, tmp_path: Path, mitm: MitmdumpPool, upstream: UpstreamServer
) -> None:
    """Installing the checkout next to the oldest mitmproxy keeps it; ``toolid addon-path``
    names the installed addon, which that mitmdump loads."""
    venv = cache.clone(mitmproxy_venv(OLDEST), tmp_path / "venv")
    python = venv / "bin" / "python"
    run(python, *PIP, "install", wheel, cwd=tmp_path)
    query = "import importlib.metadata as m; print(m.version('mitmproxy'))"
    assert run(python, "-c", query, cwd=tmp_path) == OLDEST
    addon = Path(run(venv / "bin" / "toolid", "addon-path", cwd=tmp_path))
    assert addon.is_absolute() and addon.is_file() and addon.is_relative_to(venv), addon
    with mitm.watching(user_mitmdump(tmp_path / "run", venv, addon)) as proxy:
        check_loop(proxy, upstream, "chat", stream=False)


LIBRARY_ALONE = r"""
import gzip, json, sys
import toolid

raw = "functions.get_weather:0"
client = toolid.encode(raw)
call = {"id": raw, "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
answer = json.dumps({"choices": [{"index": 0, "message": {"tool_calls": [call]}}]}).encode()
got = toolid.rewrite_response(answer, path="/v1/chat/completions")
assert got.body == answer.replace(raw.encode(), client.encode()), got

history = [
    {"role": "assistant", "tool_calls": [dict(call, id=client)]},
    {"role": "tool", "tool_call_id": client, "content": "sunny"},
]
request = json.dumps({"messages": history}).encode()
assert toolid.rewrite_request(request, path="/v1/chat/completions").body == request.replace(
    client.encode(), raw.encode()
)

chunk = {"choices": [{"index": 0, "delta": {"tool_calls": [dict(call, index=0)]}}]}
event = b"data: " + json.dumps(chunk).encode() + b"\n\n"
stream = toolid.ResponseStream(path="/v1/chat/completions", content_encoding="gzip")
streamed = stream.feed(gzip.compress(event)).body + stream.finish().body
assert streamed == event.replace(raw.encode(), client.encode()), streamed
try:
    toolid.ResponseStream(path="/v1/chat/completions", content_encoding="br")
except ValueError as exc:
    print(exc)
assert "mitmproxy" not in sys.modules
"""


def test_the_library_installs_and_runs_without_mitmproxy(wheel: Path, tmp_path: Path) -> None:
    """The wheel in a venv of its own installs nothing else (a gateway that uses the library
    brings no mitmproxy); there it rewrites requests, responses and a gzip stream; a brotli
    stream is refused with the module it needs (a proxy passes such a stream unchanged);
    ``toolid inspect`` reads a JSON body and says what a flow file needs."""
    venv = tmp_path / "venv"
    run(cache.base_python(), "-m", "venv", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    run(python, *PIP, "install", "--no-index", wheel, cwd=tmp_path)
    installed = run(
        python, "-m", "pip", "list", "--format=freeze", "--exclude", "pip", cwd=tmp_path
    )
    assert installed.splitlines() == ["toolid==0.1.0"]
    said = run(python, "-c", LIBRARY_ALONE, cwd=tmp_path)
    assert (
        said == "cannot decode content-encoding 'br': this Python has no brotli module "
        "(the Brotli package, which mitmproxy brings)"
    )

    body = tmp_path / "answer.json"
    body.write_text('{"choices": [{"message": {"tool_calls": [{"id": "functions.f:0"}]}}]}')
    toolid_cli = venv / "bin" / "toolid"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [toolid_cli, "inspect", body], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 1 and "functions.f:0" in done.stdout, done  # not strict-safe
    flows = tmp_path / "saved.flows"
    flows.write_bytes(b"1:x,")
    done = subprocess.run(
        [toolid_cli, "inspect", "--format", "flows", flows],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 2, done
    assert "needs mitmproxy: pip install 'toolid[proxy]'" in done.stderr, done
