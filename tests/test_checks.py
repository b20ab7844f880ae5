"""toolid's option checks: a mistyped ``toolid_`` option, a value mitmproxy cannot convert, a
proxy listening beyond loopback with nothing guarding it (mitmproxy's test helpers; the
whole path through a real mitmdump is in tests/e2e/test_e2e_status.py)."""

from __future__ import annotations

import logging

import pytest
from mitmproxy import exceptions, options
from mitmproxy.test import taddons

from addons import toolid_checks
from addons.toolid_addon import ToolId

KNOWN = ["toolid_mode", "toolid_hosts", "toolid_profile", "listen_host"]


def test_a_mistyped_option_is_named_with_the_closest_real_one():
    (message,) = toolid_checks.unknown_options({"toolid_mod": ["observe"]}, KNOWN)
    assert message.startswith("unknown option toolid_mod (did you mean toolid_mode?)")
    assert "toolid_hosts, toolid_mode, toolid_profile" in message


def test_other_addons_deferred_options_are_theirs():
    assert toolid_checks.unknown_options({"someaddon_x": 1, "toolid_mode": 1}, KNOWN) == []


def test_an_unknown_name_far_from_every_option_gets_the_list_only():
    (message,) = toolid_checks.unknown_options({"toolid_zzzzzzzzzzzz": 1}, KNOWN)
    assert "did you mean" not in message and "toolid_mode" in message


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("", False),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.5", False),
        ("proxy.example", False),
    ],
)
def test_loopback(host, loopback):
    assert toolid_checks.is_loopback(host) is loopback


@pytest.mark.parametrize(
    ("modes", "listen_host", "exposed"),
    [
        (["regular"], "127.0.0.1", []),
        (["regular"], "", ["*"]),
        (["regular"], "0.0.0.0", ["0.0.0.0"]),
        (["reverse:http://127.0.0.1:8000@10.0.0.5:9000"], "127.0.0.1", ["10.0.0.5"]),
        (["regular", "reverse:http://u@127.0.0.1:9000"], "127.0.0.1", []),
        (["local"], "", []),  # intercepts local applications: no port to reach
    ],
)
def test_exposed_addresses(modes, listen_host, exposed):
    assert toolid_checks.exposed_addresses(modes, listen_host) == exposed


def test_the_refusal_names_both_ways_out():
    problem = toolid_checks.open_proxy_problem(["regular"], "0.0.0.0", None)
    assert "proxyauth" in problem and "toolid_open_proxy=true" in problem
    assert toolid_checks.open_proxy_problem(["regular"], "0.0.0.0", "u:p") == ""
    assert toolid_checks.open_proxy_problem(["regular"], "127.0.0.1", None) == ""


def test_listening_beyond_loopback_is_refused_as_it_is_set():
    toolid = ToolId()
    with taddons.context(toolid) as tctx:
        tctx.configure(toolid, listen_host="127.0.0.1")
        with pytest.raises(exceptions.OptionsError, match=r"refusing to listen on 0\.0\.0\.0"):
            tctx.configure(toolid, listen_host="0.0.0.0")
        tctx.configure(toolid, listen_host="0.0.0.0", toolid_open_proxy=True)


def test_a_value_mitmproxy_cannot_convert_is_one_error_line(caplog):
    """Left to mitmproxy, the conversion error would leave the addon unloaded, silently."""
    opts = options.Options()
    opts.set("toolid_max_event_bytes=abc", "toolid_mode=observe", defer=True)
    with caplog.at_level(logging.ERROR), taddons.context(ToolId(), options=opts) as tctx:
        assert tctx.options.toolid_mode == "observe"
        assert tctx.options.toolid_max_event_bytes > 0
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].startswith("toolid: toolid_max_event_bytes:"), errors
    assert "abc" in errors[0]


def test_deferred_values_of_every_kind_are_applied():
    opts = options.Options()
    opts.set("toolid_hosts=a.example", "toolid_hosts=b.example", "toolid_open_proxy", defer=True)
    with taddons.context(ToolId(), options=opts) as tctx:
        assert tctx.options.toolid_hosts == ["a.example", "b.example"]
        assert tctx.options.toolid_open_proxy is True
