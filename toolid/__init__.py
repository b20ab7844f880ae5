"""toolid: safe, reversible tool-call ids between AI agents and LLM servers.

A sans-I/O library (nothing here imports mitmproxy or opens a socket): hand it bytes, get
bytes back with what changed.

- ``rewrite_request``: restore the upstream's own ids in a request body;
- ``rewrite_response``: give a buffered response's tool calls safe client ids;
- ``ResponseStream``: the same for an event stream fed in pieces;
- ``ResponsesConnection``: both ways, message by message, on one Responses WebSocket;
- ``check_pairing``: the pairing problems of a request's history (a result whose call is
  gone, a call without its result, ...), with the texts strict APIs answer them with;
- ``encode`` / ``decode``: wire format v1 for one id (docs/wire-format.md);
- ``Destinations``: which id rule set a request's destination has (by its model, host and
  path), as the addon decides it; ``parse_host_rules`` / ``parse_model_rules`` read the
  options' syntax;
- ``Problem``: every problem they report (a body that passed as it came, a call and a
  result that do not pair, a history not repaired): its code, its message, ``line()``;
- ``Taken``, ``Rewritten``, ``RewrittenRequest``, ``Change``, ``RULE_SETS``,
  ``api_from_path``, ``streamed_route``, ``RECORDS``: what those take and give.

Modules the mitmproxy addon reads for its glue: ``scope`` (host patterns), ``report``
(records and summaries), ``annotate`` (the contentview), ``trace`` (ids in captured flows),
``signing`` (is a request signed over its bytes?), ``rules`` (the built-in rules its options'
help names).
"""

from toolid.apis import RECORDS, api_from_path, apis_framed_as, streamed_route
from toolid.apis.record import ApiRecord
from toolid.codec import PROFILES, Profile, decode, encode, passes
from toolid.decide import Change
from toolid.destination import (
    Destination,
    Destinations,
    HostRule,
    ModelRule,
    parse_host_rules,
    parse_model_rules,
)
from toolid.occurrence import Taken
from toolid.pairing import check_request as check_pairing
from toolid.positions import Api
from toolid.problem import Problem
from toolid.repair import Repair, Repaired, repair_request
from toolid.rewrite import (
    Framing,
    ResponseStream,
    Rewritten,
    RewrittenRequest,
    framing_of,
    rewrite_request,
    rewrite_response,
    taken_ids,
)
from toolid.rules import RULE_SETS, RuleSet
from toolid.stream import DEFAULT_MAX_EVENT_BYTES
from toolid.websocket import ResponsesConnection

__all__ = [
    "DEFAULT_MAX_EVENT_BYTES",
    "PROFILES",
    "RECORDS",
    "RULE_SETS",
    "Api",
    "ApiRecord",
    "Change",
    "Destination",
    "Destinations",
    "Framing",
    "HostRule",
    "ModelRule",
    "Problem",
    "Profile",
    "Repair",
    "Repaired",
    "ResponseStream",
    "ResponsesConnection",
    "Rewritten",
    "RewrittenRequest",
    "RuleSet",
    "Taken",
    "api_from_path",
    "apis_framed_as",
    "check_pairing",
    "decode",
    "encode",
    "framing_of",
    "parse_host_rules",
    "parse_model_rules",
    "passes",
    "repair_request",
    "rewrite_request",
    "rewrite_response",
    "streamed_route",
    "taken_ids",
]
__version__ = "0.1.0"
