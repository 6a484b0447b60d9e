"""httpx: HTTPXTransport, httpx_client, their event streams, and instrument() over both clients.

Imports the core, the retry part, the http and the stream parts; httpx itself only lazily.
"""
