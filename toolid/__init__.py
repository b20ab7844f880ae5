"""toolid: safe, reversible tool-call ids between AI agents and LLM servers.

A sans-I/O library (nothing here imports mitmproxy or opens a socket): hand it bytes, get
bytes back with what changed.

- ``rewrite_request``: restore the upstream's own ids in a request body;
- ``rewrite_response``: give a buffered response's tool calls safe client ids;
- ``ResponseStream``: the same for an event stream fed in pieces;
- ``check_pairing``: the pairing problems of a request's history (a result whose call is
  gone, a call without its result, ...), with the texts strict APIs answer them with;
- ``encode`` / ``decode``: wire format v1 for one id (docs/wire-format.md);
- ``Taken``, ``Rewritten``, ``Change``, ``RULE_SETS``: what those take and give.
"""

from toolid.codec import PROFILES, Profile, decode, encode, passes
from toolid.decide import Change
from toolid.occurrence import Taken
from toolid.pairing import check_request as check_pairing
from toolid.positions import Api
from toolid.rewrite import ResponseStream, Rewritten, rewrite_request, rewrite_response, taken_ids
from toolid.rules import RULE_SETS, RuleSet

__all__ = [
    "PROFILES",
    "RULE_SETS",
    "Api",
    "Change",
    "Profile",
    "ResponseStream",
    "Rewritten",
    "RuleSet",
    "Taken",
    "check_pairing",
    "decode",
    "encode",
    "passes",
    "rewrite_request",
    "rewrite_response",
    "taken_ids",
]
__version__ = "0.1.0"
