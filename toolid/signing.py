"""Is a request signed over its bytes? Then no byte of it may change, and neither may its answer.

A signature that covers the body (or the headers toolid would touch) turns any change into a
rejection: AWS SigV4 (Bedrock through boto3, the AWS SDKs, Claude Code and Codex with their
Bedrock providers) signs the body's SHA-256 and the Host, so a rewritten id means 403
``InvalidSignatureException``. The answer to such a request passes unchanged too: ids encoded
for the client would come back in the next request, which is signed again, and could never be
restored. ``signature_of`` names the scheme of a request's signature, from its headers and
query string only (never reading a secret's value beyond its scheme); None means unsigned.
Sans I/O: no mitmproxy here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Final
from urllib.parse import parse_qsl

# Authorization schemes that sign the request (names as the log line gives them). Each comes
# from its provider's signing documentation; all but Baidu's spell the parameters
# Credential=..., SignedHeaders=..., Signature=... and sign the payload's hash.
_SCHEMES: Final[tuple[tuple[re.Pattern[str], str], ...]] = (
    (re.compile(r"AWS4-HMAC-SHA256\b", re.I), "SigV4"),  # AWS Signature Version 4
    (re.compile(r"AWS4-ECDSA-P256-SHA256\b", re.I), "SigV4a"),  # multi-region SigV4
    (re.compile(r"AWS [^\s:]+:", re.I), "SigV2"),  # AWS Signature Version 2 (legacy)
    (re.compile(r"GOOG4-(?:HMAC|RSA)-SHA256\b", re.I), "GOOG4"),  # Google Cloud Storage V4
    (re.compile(r"TC3-HMAC-SHA256\b", re.I), "TC3"),  # Tencent Cloud (Hunyuan)
    (re.compile(r"ACS3-HMAC-SHA256\b", re.I), "ACS3"),  # Alibaba Cloud
    (re.compile(r"bce-auth-v1/", re.I), "bce-auth-v1"),  # Baidu AI Cloud (Qianfan)
    (re.compile(r"HMAC-SHA256\s+Credential=", re.I), "HMAC-SHA256"),  # Volcengine (Ark)
)
# Any other Authorization scheme with a Signature parameter signs something of the request.
_SIGNATURE_PARAMETER: Final = re.compile(r"[\s,]Signature=", re.I)
_SCHEME: Final = re.compile(r"[A-Za-z0-9._~+/-]+")
# Query parameters of presigned URLs: AWS SigV4, Google V4, AWS SigV2.
_PRESIGNED: Final = (
    ("x-amz-signature", "SigV4"),
    ("x-amz-algorithm", "SigV4"),
    ("x-goog-signature", "GOOG4"),
)
# A hash of the payload that a SigV4 request sends (its value is signed, and the service
# checks the body against it); these values say the payload is not hashed.
_UNHASHED_PAYLOAD: Final = frozenset(
    {
        "unsigned-payload",
        "streaming-unsigned-payload-trailer",
    }
)

type Headers = Mapping[str, str] | Iterable[tuple[str, str]]

#: The headers ``signature_of`` reads (lower case): a request with none of them is signed, if
#: at all, in its query string. A caller may pass only these.
HEADERS: Final = frozenset(
    {"authorization", "x-amz-content-sha256", "signature-input", "signature"}
)


def signature_of(headers: Headers, query: str = "") -> str | None:
    """The scheme of the signature a request carries over its bytes, or None.

    ``headers``: the request's headers (a mapping or (name, value) pairs, names in any case);
    ``query``: its query string, or its path with the query string. Looks at
    ``Authorization`` (SigV4 and the other schemes above, or any with a ``Signature=``
    parameter), ``x-amz-content-sha256`` (a hashed payload), HTTP Message Signatures
    (RFC 9421 ``Signature-Input``, and the draft's ``Signature: keyId=...``) and presigned
    query strings (``X-Amz-Signature``, ``X-Goog-Signature``, SigV2's ``Signature`` with
    ``AWSAccessKeyId``)."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    found: str | None = None
    for name, value in pairs:
        lowered = name.lower()
        if lowered == "authorization":
            scheme = _scheme_of(value)
            if scheme is not None:
                return scheme
        elif lowered == "x-amz-content-sha256":
            if value.strip().lower() not in _UNHASHED_PAYLOAD:
                found = found or "SigV4"
        elif lowered == "signature-input" or (lowered == "signature" and "keyid=" in value.lower()):
            found = found or "HTTP Message Signatures"
    return found or _presigned(query)


def _scheme_of(authorization: str) -> str | None:
    value = authorization.strip()
    for pattern, name in _SCHEMES:
        if pattern.match(value):
            return name
    if _SIGNATURE_PARAMETER.search(value):
        scheme = _SCHEME.match(value)
        return scheme.group(0) if scheme else "signature"
    return None


def _presigned(query: str) -> str | None:
    if "?" in query:
        query = query.split("?", 1)[1]
    if not query:
        return None
    lowered = query.lower()
    # Every presigned parameter's name holds one of these words: a query string without them
    # (and without a %-escape, which could spell them) has none of those parameters.
    if "signature" not in lowered and "algorithm" not in lowered and "%" not in lowered:
        return None
    names = {name.lower() for name, _ in parse_qsl(query, keep_blank_values=True)}
    for name, scheme in _PRESIGNED:
        if name in names:
            return scheme
    if "signature" in names and "awsaccesskeyid" in names:
        return "SigV2"
    return None
