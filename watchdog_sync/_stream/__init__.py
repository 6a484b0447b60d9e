"""stream: guard_stream (a reader thread per stream), socket-backed streams read by their consumers, stream_sse, framing.

Imports the core and the http part (stream_sse sends through Session).
"""
