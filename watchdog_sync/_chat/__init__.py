"""chat: ChatClient, OpenAI-compatible chat completions built on the transport and retry parts."""
