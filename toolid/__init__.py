"""toolid: safe, reversible tool-call ids between AI agents and LLM servers.

The public face: ``encode`` / ``decode`` (wire format v1) and the rewriting entry
points used by the mitmproxy addon. Nothing here imports mitmproxy.
"""

from toolid.codec import PROFILES, Profile, decode, encode, passes

__all__ = ["PROFILES", "Profile", "decode", "encode", "passes"]
__version__ = "0.1.0"
