"""The ``watchdog-sync`` command: ``main(argv)`` runs it in-process and returns its exit code."""

from ._cli.main import main

__all__ = ["main"]

if __name__ == "__main__":
    raise SystemExit(main())
