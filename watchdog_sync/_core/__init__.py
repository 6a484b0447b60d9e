"""core: budgets, deadline scopes, the one watchdog thread, errors, durations, config, events, redaction.

The lowest part: it imports nothing else of the package.
"""
