"""Compiled engine specs go to one temporary cache for the whole session (each deployment
is compiled once per test run, never into the user's home)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def aic_cache(tmp_path_factory: pytest.TempPathFactory):
    mp = pytest.MonkeyPatch()
    path = tmp_path_factory.mktemp("aic-cache")
    mp.setenv("SERVESIM_AIC_CACHE", str(path))
    yield path
    mp.undo()
