"""Real harnesses, unmodified, bound from outside: lm-evaluation-harness and dspy on the FaultGateway.

lm-eval (its ``api`` extra) runs a 4-sample local task (``dataset_path: json`` with local
``data_files``; no hub access: ``HF_HUB_OFFLINE=1``, ``HF_DATASETS_OFFLINE=1``) with
``--model local-chat-completions`` under ``watchdog-sync run --request-timeout``; dspy's
default engine (HTTP over raw sockets, a thread pool of its own) runs ``harness_dspy.py``
under ``watchdog-sync run --sockets --threads --deadline`` and with the same options in code.
Each harness runs in a child process, as a runner starts it.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import time
from typing import Dict, Iterator, List, Tuple

import pytest

from watchdog_sync.testing import FaultGateway

pytestmark = pytest.mark.timeout(180)

HERE = pathlib.Path(__file__).resolve().parent
PYTHON = sys.executable
GATEWAY_TEXT = "Hello from the watchdog_sync fault gateway."
DSPY_ANSWER = "[[ ## answer ## ]]\nhello\n\n[[ ## completed ## ]]"
SAMPLES = 4


@pytest.fixture(scope="module")
def gateway() -> Iterator[FaultGateway]:
    with FaultGateway() as gw:
        yield gw


@pytest.fixture
def task(tmp_path: pathlib.Path) -> pathlib.Path:
    """A generate_until task of 4 samples whose right answer is the gateway's own text."""
    folder = tmp_path / "task"
    folder.mkdir()
    data = folder / "data.jsonl"
    data.write_text(
        "".join(
            json.dumps({"question": f"Say hello {n}", "answer": GATEWAY_TEXT}) + "\n"
            for n in range(SAMPLES)
        )
    )
    (folder / "tiny_gateway.yaml").write_text(
        "task: tiny_gateway\n"
        "dataset_path: json\n"
        "dataset_kwargs:\n"
        "  data_files:\n"
        f"    test: {data}\n"
        "test_split: test\n"
        "output_type: generate_until\n"
        'doc_to_text: "{{question}}"\n'
        'doc_to_target: "{{answer}}"\n'
        "generation_kwargs:\n"
        "  until: []\n"
        "  max_gen_toks: 32\n"
        "metric_list:\n"
        "  - metric: exact_match\n"
        "    aggregation: mean\n"
        "    higher_is_better: true\n"
    )
    return folder


def _environment(tmp_path: pathlib.Path) -> Dict[str, str]:
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_HOME=str(tmp_path / "hf"),
        DSPY_CACHEDIR=str(tmp_path / "dspy"),
        LITELLM_LOCAL_MODEL_COST_MAP="true",  # no fetch of litellm's model list
        PYTHONPATH=os.pathsep.join(p for p in (str(HERE.parent), env.get("PYTHONPATH")) if p),
    )
    return env


def _run(command: List[str], tmp_path: pathlib.Path) -> Tuple[int, str, str, float]:
    started = time.monotonic()
    done = subprocess.run(
        command, env=_environment(tmp_path), capture_output=True, text=True, timeout=150
    )
    return done.returncode, done.stdout, done.stderr, time.monotonic() - started


def _lm_eval(base_url: str, task: pathlib.Path) -> List[str]:
    model_args = f"model=m,base_url={base_url}/chat/completions,num_concurrent=1,max_retries=3"
    return [
        PYTHON,
        "-m",
        "lm_eval",
        "--model",
        "local-chat-completions",
        "--model_args",
        model_args + ",tokenizer_backend=none",
        "--tasks",
        "tiny_gateway",
        "--include_path",
        str(task),
        "--apply_chat_template",
    ]


def _run_options(*options: str) -> List[str]:
    return [PYTHON, "-m", "watchdog_sync.cli", "run", *options, "--"]


def _exact_match(stdout: str) -> float:
    row = re.search(r"\|tiny_gateway\|.*\|exact_match\|[^|]*\|\s*([0-9.]+)\|", stdout)
    assert row is not None, stdout[-2000:]
    return float(row.group(1))


def test_lm_eval_recovers_a_silent_request_with_every_sample_right(
    gateway: FaultGateway, task: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """silent_then_ok: the silent request ends at 3 s, lm-eval's own retry gets the answer."""
    base = gateway.base_url("silent_then_ok")
    status, out, err, elapsed = _run(
        _run_options("--request-timeout", "3") + _lm_eval(base, task), tmp_path
    )
    assert status == 0, err[-3000:]
    assert _exact_match(out) == 1.0
    assert len(gateway.requests_seen(base)) == SAMPLES + 1  # one retry, no more
    assert elapsed < 60


def test_lm_eval_on_a_dripping_body_ends_with_a_clear_timeout(
    gateway: FaultGateway, task: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """slow_drip: 3 attempts of 3 s each, then the run stops with the request timeout."""
    base = gateway.base_url("slow_drip")
    status, _, err, elapsed = _run(
        _run_options("--request-timeout", "3") + _lm_eval(base, task), tmp_path
    )
    assert status != 0
    assert "the request did not finish within its request timeout (3." in err
    assert len(gateway.requests_seen(base)) == 3
    assert elapsed < 45  # well before a minute, start-up and lm-eval's backoff included


def test_dspy_under_run_ends_at_the_deadline(gateway: FaultGateway, tmp_path: pathlib.Path) -> None:
    """no_headers: the unmodified script ends at the run's deadline, DeadlineExceeded, 124."""
    base = gateway.base_url("no_headers")
    command = _run_options("--sockets", "--threads", "--deadline", "10")
    status, out, err, elapsed = _run(
        [*command, PYTHON, str(HERE / "harness_dspy.py"), base], tmp_path
    )
    assert status == 124, err[-3000:]
    assert "DeadlineExceeded: deadline of" in err.strip().splitlines()[-1]
    assert 9.5 <= elapsed < 10 + 3
    assert "score" not in out


def test_dspy_with_instrument_in_code_ends_at_the_deadline(
    gateway: FaultGateway, tmp_path: pathlib.Path
) -> None:
    base = gateway.base_url("no_headers")
    status, out, err, _ = _run([PYTHON, str(HERE / "harness_dspy.py"), base, "3"], tmp_path)
    assert status == 0, err[-3000:]
    seconds = float(out.split("DeadlineExceeded after ")[1].split()[0])
    assert 2.9 <= seconds < 3 + 1.5


def test_dspy_unbound_still_answers_when_the_gateway_does(
    gateway: FaultGateway, tmp_path: pathlib.Path
) -> None:
    """The options change nothing for a run that goes well: every example right."""
    base = gateway.base_url("ok", text=DSPY_ANSWER)
    command = _run_options("--sockets", "--threads", "--deadline", "60")
    status, out, err, _ = _run([*command, PYTHON, str(HERE / "harness_dspy.py"), base], tmp_path)
    assert status == 0, err[-3000:]
    assert "score 100.0" in out
