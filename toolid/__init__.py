"""toolid: safe, reversible tool-call ids between AI agents and LLM servers.

A sans-I/O library (nothing here imports mitmproxy or opens a socket): hand it bytes, get
bytes back with what changed.

- ``rewrite_request``: restore the upstream's own ids in a request body;
- ``rewrite_response``: give a buffered response's tool calls safe client ids;
- ``ResponseStream``: the same for an event stream fed in pieces;
- ``ResponsesConnection``: both ways, message by message, on one Responses WebSocket;
- ``encode`` / ``decode``: wire format v1 for one id (docs/wire-format.md);
- ``Taken``, ``Rewritten``, ``Change``, ``RULE_SETS``: what those take and give.
"""

from toolid.codec import PROFILES, Profile, decode, encode, passes
from toolid.decide import Change
from toolid.occurrence import Taken
from toolid.positions import Api
from toolid.rewrite import ResponseStream, Rewritten, rewrite_request, rewrite_response, taken_ids
from toolid.rules import RULE_SETS, RuleSet
from toolid.websocket import ResponsesConnection

__all__ = [
    "PROFILES",
    "RULE_SETS",
    "Api",
    "Change",
    "Profile",
    "ResponseStream",
    "ResponsesConnection",
    "Rewritten",
    "RuleSet",
    "Taken",
    "decode",
    "encode",
    "passes",
    "rewrite_request",
    "rewrite_response",
    "taken_ids",
]
__version__ = "0.1.0"
