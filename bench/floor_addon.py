"""The floor of any addon that rewrites event streams: ``python -m bench.sidebyside --floor``.

A mitmdump script with toolid's HTTP hooks that do nothing, but for what every stream
rewriter must do: in ``responseheaders``, a response toolid would stream (``toolid.framing_of``,
as its addon asks) loses its content-length (a rewritten stream may change size) and gets a
stream callable, which passes each piece on as it came. Side by side with plain streaming
mitmdump and toolid, it shows what part of a stream row's ratio no rewriter can avoid, and so
what part is toolid's own work.
"""

from __future__ import annotations

from mitmproxy import http

from toolid import framing_of


def _as_it_came(data: bytes) -> bytes:
    return data


class Floor:
    """toolid's HTTP hooks, with nothing in them but a pass-through stream callable."""

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        pass

    def request(self, flow: http.HTTPFlow) -> None:
        pass

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        response = flow.response
        content_type = "" if response is None else response.headers.get("content-type", "")
        if response is not None and framing_of(content_type, flow.request.path) is not None:
            response.headers.pop("content-length", None)
            response.stream = _as_it_came

    def response(self, flow: http.HTTPFlow) -> None:
        pass

    def error(self, flow: http.HTTPFlow) -> None:
        pass


addons = [Floor()]
