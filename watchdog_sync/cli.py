"""The ``watchdog-sync`` command."""

from __future__ import annotations

import argparse
import sys
import time
from typing import List, Optional

from ._errors import DeadlineExceeded
from ._scope import current_budget, deadline

__all__ = ["main"]


def _demo(args: argparse.Namespace) -> int:
    print("A legacy loop that swallows every Exception, run inside deadline(1.0):")
    started = time.monotonic()
    swallowed = 0
    try:
        with deadline(1.0, stage="legacy-loop"):
            while True:
                try:
                    current_budget().sleep(10)
                except Exception:
                    swallowed += 1
    except DeadlineExceeded as exc:
        print(f"  stopped after {time.monotonic() - started:.2f}s: {exc}")
        print(f"  exceptions the loop swallowed: {swallowed}")
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="watchdog-sync", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="show what watchdog_sync saves you from")
    demo.set_defaults(run=_demo)
    args = parser.parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
