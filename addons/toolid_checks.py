"""Startup checks of toolid's mitmproxy options: a mistyped ``toolid_`` option, a bad value,
and a proxy that would listen beyond loopback with no ``proxyauth``.

Part of the mitmproxy glue (``toolid_addon.py`` calls it); imported from this folder, as
mitmproxy puts a script's own folder on ``sys.path``.

mitmproxy keeps a ``--set`` (or ``config.yaml`` entry) whose option no addon has added yet in
its option manager's public ``deferred`` dict (``OptManager.deferred``, filled by
``OptManager.set(..., defer=True)`` and applied by ``process_deferred`` when an addon adds the
option): a mistyped name stays there for good, silently. toolid reads that dict for names
that start with ``toolid_`` and are not its own.

A check fails with ``OptionsError``. While the proxy starts, mitmproxy logs an exception from
a script's ``configure`` with its traceback; ``refuse`` logs one ERROR line instead, which
mitmproxy's ``errorcheck`` addon (in mitmdump, mitmweb and mitmproxy) turns into an exit
before any server listens.
"""

from __future__ import annotations

import difflib
import ipaddress
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from mitmproxy import ctx, exceptions
from mitmproxy.proxy import mode_specs

logger = logging.getLogger(__name__)

PREFIX = "toolid_"
OPEN_PROXY_OPTION = "toolid_open_proxy"


def unknown_options(deferred: Mapping[str, Any], known: Iterable[str]) -> list[str]:
    """One message for each ``toolid_`` name in ``deferred`` (mitmproxy's options waiting for
    an addon) that is not among ``known``, naming the closest known one."""
    ours = sorted(name for name in known if name.startswith(PREFIX))
    messages = []
    for name in sorted(deferred):
        if not name.startswith(PREFIX) or name in ours:
            continue
        close = difflib.get_close_matches(name, ours, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        messages.append(
            f"unknown option {name}{hint}; toolid's options are {', '.join(ours)} "
            "(mitmdump --options lists them with their help)"
        )
    return messages


def is_loopback(host: str) -> bool:
    """Whether a listen address reaches this machine only (``""``: every interface, not)."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name, or "" (every interface)


def exposed_addresses(modes: Sequence[str], listen_host: str) -> list[str]:
    """The listen addresses of ``modes`` (mitmproxy's ``mode`` option) that are not loopback,
    as ``host`` (``*`` for every interface). Modes that listen on no address (``local``) are
    left out; a spec mitmproxy cannot parse is mitmproxy's own error to report."""
    exposed = []
    for spec in modes:
        try:
            mode = mode_specs.ProxyMode.parse(spec)
        except ValueError:
            continue
        if mode.listen_port() is None:
            continue  # intercepts local applications: no socket to reach
        host = mode.listen_host(listen_host)
        if not is_loopback(host):
            exposed.append(host or "*")
    return exposed


def open_proxy_problem(modes: Sequence[str], listen_host: str, proxyauth: str | None) -> str:
    """Why toolid refuses to start (``""``: it does not): a listen address beyond loopback,
    with no ``proxyauth`` and ``toolid_open_proxy`` not set (the caller checks that)."""
    if proxyauth:
        return ""
    exposed = exposed_addresses(modes, listen_host)
    if not exposed:
        return ""
    where = ", ".join(sorted(set(exposed)))
    return (
        f"refusing to listen on {where} without proxyauth: anyone who can reach it could use "
        "this proxy (and its CA intercepts their TLS). Set --set proxyauth=USER:PASS (or an "
        f"htpasswd file: --set proxyauth=@/path/htpasswd), or --set {OPEN_PROXY_OPTION}=true "
        "if the network in front of it is yours to trust, or --listen-host 127.0.0.1"
    )


def apply_deferred() -> None:
    """Apply the values given for toolid's options before it loaded (``--set``, config.yaml),
    from the addon's ``load``, so that one that does not convert (``--set
    toolid_max_event_bytes=abc``) is one ERROR line that stops the proxy. (Left to
    mitmproxy, its conversion error, raised while the script is registered, leaves the
    script unloaded and the proxy running without toolid, silently.)"""
    options = ctx.options
    for name in [name for name in options.deferred if name.startswith(PREFIX)]:
        if name not in options:
            continue  # unknown: check_unknown names it
        value = options.deferred.pop(name)
        strings = getattr(value, "val", None)  # --set NAME=VALUE keeps the strings
        try:
            if strings is None:
                options.update(**{name: value})
            else:
                options.set(*([f"{name}={one}" for one in strings] or [name]))
        except exceptions.OptionsError as error:
            logger.error(f"toolid: {name}: {error}")


def check_unknown() -> None:
    """Raise ``OptionsError`` naming every ``toolid_`` option that was set and that no addon
    added (``ctx.options.deferred``)."""
    options = ctx.options
    unknown = unknown_options(options.deferred, options.keys())
    if unknown:
        raise exceptions.OptionsError("; ".join(unknown))


def check_open_proxy() -> None:
    """Raise ``OptionsError`` if the proxy would listen beyond loopback with nothing to guard
    it (``open_proxy_problem``)."""
    options = ctx.options
    if getattr(options, OPEN_PROXY_OPTION):
        return
    proxyauth = getattr(options, "proxyauth", None)  # an addon's option: absent in tests
    problem = open_proxy_problem(options.mode, options.listen_host, proxyauth)
    if problem:
        raise exceptions.OptionsError(problem)


def refuse(error: exceptions.OptionsError, starting: bool) -> None:
    """Report an option that failed a check: while the proxy starts (``starting``), as one
    ERROR log line, which stops it before it listens; later (an option changed in mitmweb or
    the console), by raising, so mitmproxy rolls the change back and shows it."""
    if not starting:
        raise error
    logger.error(f"toolid: {error}")


def under_errorcheck() -> bool:
    """Whether mitmproxy's ``errorcheck`` addon watches this start (mitmdump, mitmweb and
    mitmproxy have it; a test's ``taddons`` context has not)."""
    return ctx.master.addons.get("errorcheck") is not None
