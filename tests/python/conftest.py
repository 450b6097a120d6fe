"""Shared set-up of the Python package's tests (tests/python/, run by CTest through pytest; see
tests/python/CMakeLists.txt). PYTHONPATH points at the build's python/ tree and TFM_CLI at the tfm executable."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="session")
def tfm_cli():
    path = os.environ.get("TFM_CLI", os.path.join(ROOT, "build", "tfm"))
    if not os.path.exists(path):
        pytest.skip(f"no tfm executable at {path} (set TFM_CLI)")
    return path


def rel_err(a, ref):
    """max|a − ref| / max|ref| (denominator 1 for an all-zero reference): tests/parity's measure."""
    import numpy as np
    a, ref = np.asarray(a, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    if ref.size == 0:
        return 0.0
    scale = float(np.max(np.abs(ref)))
    return float(np.max(np.abs(a - ref))) / (scale if scale > 0 else 1.0)


sys.modules.setdefault("tfm_test_util", sys.modules[__name__])
