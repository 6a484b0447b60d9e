"""The reference page names every public name and every environment variable (no Sphinx run)."""

from __future__ import annotations

import pathlib
import re
from typing import Iterable, List

import pytest

import watchdog_sync
import watchdog_sync.ray
import watchdog_sync.testing

from .internals import config_module

pytestmark = pytest.mark.timeout(10)

REFERENCE = pathlib.Path(__file__).resolve().parents[1] / "docs" / "reference.md"


def _mentions(text: str, name: str) -> bool:
    """``name`` appears as a whole name: ``Budget`` is not found inside ``RetryBudget``."""
    return re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text) is not None


def _missing(names: Iterable[str]) -> List[str]:
    text = REFERENCE.read_text(encoding="utf-8")
    return sorted(name for name in names if not _mentions(text, name))


def _config_variables() -> List[str]:
    return sorted(
        value
        for key, value in vars(config_module).items()
        if key.startswith("ENV_") and isinstance(value, str)
    )


def test_every_public_name_is_in_the_reference() -> None:
    assert _missing(watchdog_sync.__all__) == []


def test_every_testing_name_is_in_the_reference() -> None:
    assert _missing(watchdog_sync.testing.__all__) == []


def test_every_ray_name_is_in_the_reference() -> None:
    assert _missing(f"watchdog_sync.ray.{name}" for name in watchdog_sync.ray.__all__) == []


def test_every_environment_variable_of_config_is_in_the_reference() -> None:
    variables = _config_variables()
    assert len(variables) >= 4  # the config module still names its variables ENV_*
    assert _missing(variables) == []


def test_a_name_counts_only_whole() -> None:
    assert _mentions("see `RetryBudget`", "RetryBudget")
    assert not _mentions("see `RetryBudget`", "Budget")
    assert _mentions("watchdog_sync.__version__:", "__version__")
