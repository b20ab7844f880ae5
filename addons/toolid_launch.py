"""Start mitmdump, mitmweb or mitmproxy's console with toolid's addon in it from the start.

    python addons/toolid_launch.py {mitmdump|mitmweb|mitmproxy} [mitmproxy options...]

``scripts/proxy`` and ``toolid run`` start mitmproxy this way; the options are mitmproxy's own,
as its command lines take them. ``-s addons/toolid_addon.py`` works too, but mitmproxy loads a
script in a task of its own once its master runs, and by then it has bound its listening
sockets: toolid's refusal to listen beyond loopback without ``proxyauth`` stops the proxy a
moment after its port opened. Here the addon is registered at the start of the master's
``run``, where every option (command line, ``config.yaml``) is final and nothing listens yet:
toolid's ``load`` and ``configure`` run there and then, and an option it refuses is an ERROR
line that mitmproxy's ``errorcheck`` sees in its first check, which comes before
``setup_servers`` binds the proxy's ports (the web UI and the console start after that). The
same ``Master.run`` serves mitmdump, mitmweb and the console in every mitmproxy 12.x.

Everything else is as for a script: values set before the addon loaded (``--set``,
``config.yaml``) are applied in its ``load`` (``toolid_checks.apply_deferred``), its commands
and its contentview are registered, and every later hook runs as it does for a script.
``--options`` lists toolid's options with mitmproxy's (the addon is then loaded as a script,
which mitmproxy does for that listing).

``toolid run`` sets ``TOOLID_LAUNCH_FD`` to a socket the launcher inherits. Once the proxy
serves, the launcher writes one JSON line there: each server's mode and listen addresses, the
status endpoint's address, mitmproxy's CA certificate, ``proxyauth`` and mitmweb's URL. When
the other end of the socket closes (``toolid run`` is done, or gone), the proxy shuts down.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any, ClassVar

try:
    from mitmproxy import addonmanager, ctx, hooks, master
    from mitmproxy.tools import cmdline
    from mitmproxy.tools import main as tools
except ModuleNotFoundError as missing:
    if missing.name is None or missing.name.partition(".")[0] != "mitmproxy":
        raise
    sys.exit(
        f"toolid: {sys.executable} has no mitmproxy; install it there "
        "(pip install 'toolid[proxy]', or mitmproxy itself)"
    )

import toolid_addon  # this file's folder is sys.path[0] when it runs by path

TOOLS = ("mitmdump", "mitmweb", "mitmproxy")
FD_VARIABLE = "TOOLID_LAUNCH_FD"
USAGE = "usage: python toolid_launch.py {mitmdump|mitmweb|mitmproxy} [mitmproxy options...]"


class Announce:
    """Tell whoever started the proxy where it serves, once it does, over ``sock``; shut the
    proxy down when the other end of ``sock`` closes."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def running(self) -> None:
        self.sock.sendall(json.dumps(serving()).encode() + b"\n")
        self.sock.setblocking(False)
        asyncio.get_running_loop().add_reader(self.sock.fileno(), self._readable)

    def _readable(self) -> None:
        try:
            data = self.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            asyncio.get_running_loop().remove_reader(self.sock.fileno())
            proxy: Any = ctx.master  # mitmproxy's Master is partly untyped
            proxy.shutdown()

    def done(self) -> None:
        with contextlib.suppress(Exception):
            asyncio.get_running_loop().remove_reader(self.sock.fileno())
        self.sock.close()


def serving() -> dict[str, Any]:
    """Where the running proxy serves: its servers (mode, listen addresses), the status
    endpoint (toolid_status), the CA certificate clients trust, proxyauth, mitmweb's URL."""
    addons: Any = ctx.master.addons  # mitmproxy's AddonManager is untyped
    proxyserver = addons.get("proxyserver")
    servers = [
        {
            "mode": server.mode.full_spec,
            "type": server.mode.type_name,
            "addresses": [list(address[:2]) for address in server.listen_addrs],
        }
        for server in proxyserver.servers
    ]
    status = toolid_addon.addons[0].status
    return {
        "servers": servers,
        "status": list(status.address) if status and status.address else None,
        "ca": str(Path(ctx.options.confdir).expanduser() / "mitmproxy-ca-cert.pem"),
        "proxyauth": getattr(ctx.options, "proxyauth", None),
        "web": getattr(ctx.master, "web_url", None),
    }


def register(running: master.Master, addons: list[Any]) -> None:
    """Add ``addons`` to ``running`` and configure them with its options as they are, as
    mitmproxy's script loader does; an error is logged (and so stops the start)."""
    manager: Any = running.addons  # mitmproxy's AddonManager and OptManager are untyped
    options: Any = running.options
    with addonmanager.safecall():
        manager.add(*addons)
        for addon in addons:
            manager.invoke_addon_sync(addon, hooks.ConfigureHook(set(options.keys())))


class _WithToolId(master.Master):
    """A master that registers toolid's addon (and ``extra``) when it starts to run."""

    extra: ClassVar[list[Any]] = []

    async def run(self) -> None:
        register(self, [*toolid_addon.addons, *self.extra])
        await super().run()


# The masters are imported by the tool that needs one: mitmweb's brings tornado, the
# console's urwid.
def master_class(tool: str) -> type[_WithToolId]:
    """The master of ``tool`` with toolid's addon."""
    if tool == "mitmdump":
        from mitmproxy.tools.dump import DumpMaster  # noqa: PLC0415

        class Dump(_WithToolId, DumpMaster):
            pass

        return Dump
    if tool == "mitmweb":
        from mitmproxy.tools.web.master import WebMaster  # noqa: PLC0415

        class Web(_WithToolId, WebMaster):
            pass

        return Web
    from mitmproxy.tools.console.master import ConsoleMaster  # noqa: PLC0415

    class Console(_WithToolId, ConsoleMaster):
        pass

    return Console


def dump_filter(args: Any) -> dict[str, Any]:
    """mitmdump's filter arguments as options, as ``mitmproxy.tools.main.mitmdump`` sets them."""
    if not args.filter_args:
        return {}
    spec = " ".join(args.filter_args)
    return {"save_stream_filter": spec, "readfile_filter": spec, "dumper_filter": spec}


def main(argv: list[str]) -> None:
    """Run ``argv[0]`` (mitmdump, mitmweb or mitmproxy) with ``argv[1:]`` and toolid's addon."""
    if not argv or argv[0] not in TOOLS:
        sys.exit(USAGE)
    tool, args = argv[0], argv[1:]
    if "--options" in args:
        args = ["-s", str(Path(toolid_addon.__file__).resolve()), *args]
    fd = os.environ.pop(FD_VARIABLE, None)
    cls = master_class(tool)
    if fd is not None:
        cls.extra = [Announce(socket.socket(fileno=int(fd)))]
    sys.argv = [tool, *args]  # mitmproxy's messages name the tool
    tools.run(cls, getattr(cmdline, tool), args, dump_filter if tool == "mitmdump" else None)


if __name__ == "__main__":
    main(sys.argv[1:])
