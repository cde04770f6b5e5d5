"""Fixtures of the chart tests: the chart loaded once, and every scenario rendered once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import helm_python as helm
import pytest

from tests.unit.deploy.chart import CHART, SCENARIOS, load_values, render


@pytest.fixture(scope="package")
def chart() -> Iterator[helm.Chart]:
    loaded = helm.Chart.load(CHART)
    yield loaded
    loaded.close()


@pytest.fixture(scope="package")
def rendered(chart: helm.Chart) -> dict[str, list[dict[str, Any]]]:
    return {name: render(chart, load_values(name)) for name in SCENARIOS}
