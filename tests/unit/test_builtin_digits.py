"""builtin:digits is kubetrain's own copy of scikit-learn's digits: the same arrays, without sklearn."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from kubetrain.data.builtin import load_builtin


def test_the_shipped_digits_are_sklearns() -> None:
    from sklearn.datasets import load_digits

    raw = load_builtin("builtin:digits")
    bunch = load_digits()
    assert raw.x_train.shape == (1797, 8, 8) and raw.x_train.dtype == np.float32
    np.testing.assert_array_equal(raw.x_train.reshape(1797, 64), bunch.data.astype(np.float32))
    np.testing.assert_array_equal(raw.y_train, bunch.target)
    assert raw.num_classes == 10


def test_loading_the_digits_imports_no_sklearn() -> None:
    # The launcher image has no scikit-learn: the download step must not need it.
    code = "import sys; from kubetrain.data.builtin import load_builtin; load_builtin('builtin:digits'); "
    code += "print('sklearn' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
