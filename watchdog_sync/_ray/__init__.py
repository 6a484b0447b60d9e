"""ray: deadlines that cross Ray tasks and actor calls, and run_sample at cluster scale.

Above ``_propagate`` (whose wall-clock deadline carrying it reuses) and ``_sample``
(whose ``run_sample`` each sample runs under); only the public ``watchdog_sync.ray``
imports it. Ray itself is imported inside the functions (``lazy.py``), never when
``watchdog_sync`` or ``watchdog_sync.ray`` is.
"""
