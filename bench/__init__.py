"""toolid benchmark harness: the TARGETS' time ratios (proxy and library), first-event latency,
scaling, pass-through, memory; with the native accelerator and as pure Python, side by side.

Run it with ``scripts/bench`` (or ``python -m bench``); ``--help`` lists the options.

- ``workloads``: the request/response bodies and SSE streams (deterministic, stdlib only).
- ``upstream``: a fast asyncio HTTP/1.1 server that serves the canned responses pre-rendered
  (streams in 16 KiB chunks; the stand-in's HTTP framing, ``standin.wire``).
- ``client``: an asyncio raw-socket load client (keep-alive, Content-Length and chunked).
- ``proxy``: starts ``mitmdump`` (with and without the addon, with and without the native
  accelerator) and reads its memory.
- ``library``: times ``toolid.body`` / ``toolid.stream`` against ``json.loads`` / ``bytes.find``.
- ``run``: the command line, both modes, the table (the TARGETS first) and the JSON report.
- ``scaleout`` (``python -m bench.scaleout``): one proxy process against N behind HAProxy.
- ``haproxy``: installs and runs HAProxy with ``deploy/haproxy.cfg`` (also for the e2e test).
- ``sidebyside`` (``python -m bench.sidebyside``): versions of toolid (trees holding ``toolid/``
  and ``addons/``) against each other and plain mitmdump on one proxy workload, request by
  request.
- ``profile`` (``python -m bench.profile``): where a proxy row's time goes inside a real
  ``mitmdump`` (Linux ``perf``, per Python function of the addon's hooks).

Nothing here asserts anything about speed; PASS/MISS next to a target is information.

The responses are rendered by the e2e tests' stand-in, ``tests/support/standin`` (importing
``bench`` puts ``tests/support`` on the import path).
"""

import sys
from pathlib import Path

_SUPPORT = str(Path(__file__).resolve().parents[1] / "tests" / "support")
if _SUPPORT not in sys.path:
    sys.path.insert(0, _SUPPORT)
