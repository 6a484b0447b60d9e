"""watchdog_sync.otel is opt-in: nothing imports OpenTelemetry until it is asked for."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest

pytestmark = pytest.mark.timeout(60)


def test_import_watchdog_sync_never_imports_opentelemetry() -> None:
    code = (
        "import sys, watchdog_sync, watchdog_sync.testing\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('opentelemetry'))\n"
        "assert not loaded, loaded\n"
        "ours = [m for m in sys.modules if m.startswith('watchdog_sync.') and 'telemetry' in m]\n"
        "assert not ours, ours\n"
        "print('clean')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=50, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "clean"


def test_the_instrumentor_is_registered_for_opentelemetry_instrument() -> None:
    """The entry point opentelemetry-instrument loads names our instrumentor."""
    from watchdog_sync.otel import WatchdogSyncInstrumentor

    found = [
        ep
        for ep in metadata.entry_points(group="opentelemetry_instrumentor")
        if ep.name == "watchdog_sync"
    ]
    assert len(found) == 1
    assert found[0].value == "watchdog_sync.otel:WatchdogSyncInstrumentor"
    assert found[0].load() is WatchdogSyncInstrumentor
    assert WatchdogSyncInstrumentor().instrumentation_dependencies() == ()


def test_opentelemetry_instrument_enables_it_with_no_code_change(tmp_path: object) -> None:
    """`opentelemetry-instrument python app.py` with the console exporter prints a chat span."""
    import pathlib

    app = pathlib.Path(str(tmp_path)) / "app.py"
    app.write_text(
        "import watchdog_sync as ws\n"
        "from watchdog_sync.testing import FaultGateway\n"
        "with FaultGateway() as gw:\n"
        "    with ws.ChatClient(gw.base_url('ok'), model='my-model') as c:\n"
        "        c.complete([{'role': 'user', 'content': 'hi'}])\n"
    )
    tool = pathlib.Path(sys.executable).with_name("opentelemetry-instrument")
    env = {
        "PATH": str(tool.parent),
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_SERVICE_NAME": "app",
    }
    done = subprocess.run(
        [str(tool), sys.executable, str(app)],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert '"name": "chat my-model"' in done.stdout
    assert '"gen_ai.operation.name": "chat"' in done.stdout
