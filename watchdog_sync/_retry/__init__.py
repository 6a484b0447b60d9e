"""retry: the single retry owner (RetryPolicy, retry_call), RetryBudget and classify().

Imports only the core.
"""
