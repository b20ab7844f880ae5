"""toolid.signing: which requests carry a signature over their bytes."""

from __future__ import annotations

import pytest
from botocore.auth import SigV4Auth, SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from hypothesis import given
from hypothesis import strategies as st

from toolid.signing import HEADERS, signature_of

CREDENTIALS = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
URL = "https://bedrock-runtime.us-east-1.amazonaws.com/model/anthropic.claude-v2/invoke"


def signed_headers(body: bytes = b'{"messages": []}') -> dict[str, str]:
    request = AWSRequest("POST", URL, data=body, headers={"content-type": "application/json"})
    SigV4Auth(CREDENTIALS, "bedrock", "us-east-1").add_auth(request)
    return dict(request.headers.items())


def test_botocore_sigv4_is_recognised():
    headers = signed_headers()
    assert headers["Authorization"].startswith("AWS4-HMAC-SHA256 ")
    assert signature_of(headers) == "SigV4"
    assert signature_of(list(headers.items())) == "SigV4"  # pairs, as a multidict gives them


def test_botocore_presigned_url_is_recognised():
    request = AWSRequest("POST", URL, data=b"{}")
    SigV4QueryAuth(CREDENTIALS, "bedrock", "us-east-1", expires=60).add_auth(request)
    assert "X-Amz-Signature=" in request.url
    query = request.url.split("?", 1)[1]
    assert signature_of({}, query) == "SigV4"
    assert signature_of({}, "/model/x/invoke?" + query) == "SigV4"  # a path with its query


EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
MESSAGE_SIGNATURES = "HTTP Message Signatures"


@pytest.mark.parametrize(
    ("headers", "scheme"),
    [
        ({"authorization": "AWS4-HMAC-SHA256 Credential=A/2026/r/s/aws4_request, S"}, "SigV4"),
        ({"AUTHORIZATION": "aws4-ecdsa-p256-sha256 Credential=A"}, "SigV4a"),
        ({"Authorization": "AWS AKIAIOSFODNN7EXAMPLE:frJIUN8DYpKDtOLCwo//yllqDzg="}, "SigV2"),
        ({"Authorization": "TC3-HMAC-SHA256 Credential=a/b, SignedHeaders=h, Signature=s"}, "TC3"),
        ({"Authorization": "ACS3-HMAC-SHA256 Credential=a,SignedHeaders=h,Signature=s"}, "ACS3"),
        ({"Authorization": "bce-auth-v1/ak/2026-01-01T00:00:00Z/1800/host/abc"}, "bce-auth-v1"),
        (
            {"Authorization": "HMAC-SHA256 Credential=a, SignedHeaders=h, Signature=s"},
            "HMAC-SHA256",
        ),
        ({"Authorization": "GOOG4-HMAC-SHA256 Credential=a, Signature=s"}, "GOOG4"),
        ({"Authorization": "Custom-Sig keyId=a, Signature=abc"}, "Custom-Sig"),
        ({"x-amz-content-sha256": EMPTY_SHA256}, "SigV4"),
        (
            {"Signature-Input": 'sig1=("@method");keyid="k"', "Signature": "sig1=:a:"},
            MESSAGE_SIGNATURES,
        ),
        ({"Signature": 'keyId="k",algorithm="hmac-sha256",signature="abc"'}, MESSAGE_SIGNATURES),
    ],
)
def test_signature_schemes(headers, scheme):
    assert signature_of(headers) == scheme


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer ABSKQmVkcm9ja0FQSUtleS1example"},  # a Bedrock API key
        {"authorization": "Basic dXNlcjpwYXNz"},
        {"x-api-key": "sk-ant-..."},
        {"api-key": "azure-key"},
        {"x-amz-content-sha256": "UNSIGNED-PAYLOAD"},
        {"Signature": "not a signature header of any scheme"},
        {"content-type": "application/json", "x-amz-date": "20260101T000000Z"},
    ],
)
def test_unsigned_requests(headers):
    assert signature_of(headers) is None
    assert signature_of(headers, "/v1/chat/completions?api-version=2024-06-01") is None


@pytest.mark.parametrize(
    ("query", "scheme"),
    [
        ("X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=a&X-Amz-Signature=b", "SigV4"),
        ("x-goog-signature=abc&x-goog-algorithm=GOOG4-RSA-SHA256", "GOOG4"),
        ("AWSAccessKeyId=AKIA&Expires=1&Signature=abc", "SigV2"),
        ("?X-Amz-Signature=b", "SigV4"),
    ],
)
def test_presigned_query_strings(query, scheme):
    assert signature_of({}, query) == scheme


@pytest.mark.parametrize(
    ("query", "scheme"),
    [
        ("X-Amz-%53ignature=b", "SigV4"),  # a name spelled with an escape
        ("x-amz-algorithm=AWS4-HMAC-SHA256", "SigV4"),
        ("AWSAccessKeyId=AKIA&Signature", "SigV2"),  # a name without a value
    ],
)
def test_presigned_names_however_spelled(query, scheme):
    assert signature_of({}, query) == scheme
    assert signature_of({}, "/v1/models?" + query) == scheme


def test_query_without_signature():
    assert signature_of({}, "signature=yes") is None  # Signature alone is not SigV2
    assert signature_of({}, "/a?b=c&d") is None
    assert signature_of({}, "") is None


@given(
    st.lists(st.tuples(st.text(max_size=30), st.text(max_size=80)), max_size=6),
    st.text(max_size=80),
)
def test_never_raises(headers, query):
    result = signature_of(headers, query)
    assert result is None or isinstance(result, str)


@given(
    st.lists(
        st.tuples(
            st.sampled_from([*HEADERS, "Authorization", "content-type", "x-api-key", "Signature"]),
            st.sampled_from(
                ["AWS4-HMAC-SHA256 Credential=a", "Bearer k", "keyId=a", EMPTY_SHA256, "x"]
            ),
        ),
        max_size=5,
    )
)
def test_only_the_named_headers_count(headers):
    """A caller may pass only ``HEADERS``: the other headers never change the answer."""
    named = [(name, value) for name, value in headers if name.lower() in HEADERS]
    assert signature_of(named) == signature_of(headers)


def test_real_signature_is_recognised_for_any_body():
    assert signature_of(signed_headers(b"")) == "SigV4"
    assert signature_of(signed_headers(b'{"x": "\\u00e9"}')) == "SigV4"
