"""A dspy evaluation as a runner writes it: 4 examples on 2 threads, dspy's default engine.

``python harness_dspy.py BASE_URL``: nothing of watchdog_sync in it (``watchdog-sync run``
binds it from outside). ``python harness_dspy.py BASE_URL SECONDS``: the in-code variant,
``instrument(sockets=True, threads=True)`` and a ``deadline(SECONDS)`` around the evaluation.
Prints ``score S after T`` or ``DeadlineExceeded after T``.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import dspy

ANSWER = "[[ ## answer ## ]]\nhello\n\n[[ ## completed ## ]]"


def metric(example: Any, prediction: Any, trace: Any = None) -> bool:
    return bool(example.answer == prediction.answer)


def evaluate(base_url: str) -> float:
    lm = dspy.LM("openai/m", api_base=base_url, api_key="sk-test", cache=False, num_retries=0)
    dspy.configure(lm=lm)
    devset = [
        dspy.Example(question=f"question {n}", answer="hello").with_inputs("question")
        for n in range(4)
    ]
    run = dspy.Evaluate(devset=devset, metric=metric, num_threads=2, display_progress=False)
    return float(run(dspy.Predict("question -> answer")).score)


def main() -> None:
    base_url = sys.argv[1]
    started = time.monotonic()
    if len(sys.argv) < 3:
        score = evaluate(base_url)
        print(f"score {score} after {time.monotonic() - started:.2f}", flush=True)
        return
    import watchdog_sync as ws

    undo = ws.instrument(sockets=True, threads=True)
    try:
        with ws.deadline(float(sys.argv[2])):
            score = evaluate(base_url)
        print(f"score {score} after {time.monotonic() - started:.2f}", flush=True)
    except ws.DeadlineExceeded:
        print(f"DeadlineExceeded after {time.monotonic() - started:.2f}", flush=True)
    finally:
        undo()


if __name__ == "__main__":
    main()
