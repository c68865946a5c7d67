"""Shared by the Python tests: the repository's scripts (bench/, bench/probes/) loaded as modules."""

import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def load_script():
    """load_script("bench/merge_baseline.py") -> the script as a module (its main guard not run)."""

    def load(relpath):
        path = ROOT / relpath
        spec = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod

    return load
