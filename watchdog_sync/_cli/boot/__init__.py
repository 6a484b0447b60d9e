"""The directory ``watchdog-sync run`` puts first on ``PYTHONPATH``: its ``sitecustomize``."""
