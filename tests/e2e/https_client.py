"""Subprocess client for the HTTPS end-to-end test.

Usage: python https_client.py '{"chat": "<base url>", "responses": "...", "anthropic": "..."}'

Runs a two-turn tool loop per API with the SDK's *default* HTTP client, so the proxy and
the CA come only from the environment (HTTPS_PROXY, SSL_CERT_FILE), as for a real agent.
Prints a JSON object: api -> {call_ids, item_ids, seen, final_text}.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve()
# tests/ (for e2e), tests/support (for standin), the repo root
sys.path[:0] = [str(HERE.parents[1]), str(HERE.parents[1] / "support"), str(HERE.parents[2])]

from e2e.helpers import sdk_loop  # noqa: E402


def main() -> None:
    job = json.loads(sys.argv[1])
    out = {}
    for api, base_url in job.items():
        result = sdk_loop(api, base_url, default_client=True)
        out[api] = {
            "call_ids": result.call_ids,
            "item_ids": result.item_ids,
            "seen": result.seen,
            "final_text": result.final_text,
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
