"""Fixtures: the binary, and a rig (supervisor and broker) of each kind."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Generator, Iterator

import pytest
from harness import Rig, build_binary


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Generator[None, Any, None]:
    """Remember each phase's outcome on the item, for the fixtures' teardown."""
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


def _failed(request: pytest.FixtureRequest) -> bool:
    rep = getattr(request.node, "rep_call", None)
    return rep is None or bool(rep.failed)


@pytest.fixture(scope="session")
def binary(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The saga-supervisor binary: $SAGA_BIN, or built from this checkout."""
    return build_binary(tmp_path_factory.mktemp("bin"))


@pytest.fixture(params=["embedded", "mosquitto"])
def rig(request: pytest.FixtureRequest, binary: str, tmp_path: Path) -> Iterator[Rig]:
    """A ready supervisor on each kind of broker."""
    r = Rig(binary, str(request.param), tmp_path)
    try:
        yield r
    finally:
        r.close(_failed(request))


@pytest.fixture
def embedded(request: pytest.FixtureRequest, binary: str, tmp_path: Path) -> Iterator[Rig]:
    """A ready supervisor on its embedded broker only."""
    r = Rig(binary, "embedded", tmp_path)
    try:
        yield r
    finally:
        r.close(_failed(request))
