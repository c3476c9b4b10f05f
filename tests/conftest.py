"""Shared pytest fixtures: the pagoda binary and the default model.

PAGODA_BIN overrides the binary (default: build/pagoda); PAGODA_MODEL overrides the model
(default: the file scripts/fetch-model caches and prints).
"""
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def pagoda_bin():
    path = pathlib.Path(os.environ.get("PAGODA_BIN", ROOT / "build" / "pagoda"))
    if not path.exists():
        pytest.fail(f"{path} not built; run `make build`")
    return str(path)


@pytest.fixture(scope="session")
def model_path():
    env = os.environ.get("PAGODA_MODEL")
    if env:
        return env
    out = subprocess.run([str(ROOT / "scripts" / "fetch-model")], check=True,
                         capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def run_pagoda(pagoda_bin):
    """run_pagoda(*args, input=None, check=True) -> CompletedProcess (bytes stdout/stderr)."""
    def run(*args, input=None, check=True):
        p = subprocess.run([pagoda_bin, *map(str, args)], input=input, capture_output=True)
        if check and p.returncode != 0:
            raise AssertionError(f"pagoda {' '.join(map(str, args))} exited {p.returncode}:\n"
                                 f"{p.stderr.decode(errors='replace')}")
        return p
    return run
