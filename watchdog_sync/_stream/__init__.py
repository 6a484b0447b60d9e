"""stream: the stream engine: guard_stream, its channel, the body reader, the shared reader, stream_sse, framing.

Imports the core and the http part (stream_sse sends through Session).
"""
