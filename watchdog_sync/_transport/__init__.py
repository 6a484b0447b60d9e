"""transport: Session (requests/urllib3), guard_stream, stream_sse and its framing.

Imports the core and the retry part's classification.
"""
