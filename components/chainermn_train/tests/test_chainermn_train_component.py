"""`chainermn_train`'s own tests (the hub's tests/ beside the component): what its body hands to the library."""

import pytest

from kubetrain.components import chainermn_train
from tests.component_body import run_body, sentinels


def test_the_body_hands_every_input_to_train_chainermn_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    inputs = sentinels(chainermn_train)
    called, returned = run_body(
        chainermn_train, "kubetrain.kfp_runtime.frameworks.train_chainermn", monkeypatch, inputs
    )
    assert called == inputs and returned
