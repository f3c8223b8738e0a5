import json
import os
import pathlib

import pytest


def _models_dir() -> pathlib.Path:
    d = os.environ.get("INFOKV_MODELS_DIR")
    if not d:
        raise RuntimeError("INFOKV_MODELS_DIR is not set (ctest sets it from the CMake cache variable)")
    return pathlib.Path(d)


@pytest.fixture(scope="session")
def model_path() -> str:
    p = _models_dir() / "stories260K" / "stories260K.gguf"
    if not p.is_file():
        raise FileNotFoundError(f"test model missing: {p}")  # fail loudly, never skip
    return str(p)


@pytest.fixture(scope="session")
def reference() -> dict:
    p = _models_dir() / "stories260K" / "reference.json"
    if not p.is_file():
        raise FileNotFoundError(f"reference missing: {p}")
    return json.loads(p.read_text())


@pytest.fixture(scope="session")
def model(model_path):
    import infokv
    m = infokv.Model(model_path)
    yield m
    m.close()
