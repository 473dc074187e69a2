"""`download_dataset`'s own tests (the hub's tests/ beside the component): what its body hands to the library."""

import pytest

from kubetrain.components import download_dataset
from tests.component_body import run_body, sentinels


def test_the_body_hands_every_input_to_the_download_step_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    inputs = sentinels(download_dataset)
    step = "kubetrain.kfp_runtime.download_step.download_dataset_step"
    called, _ = run_body(download_dataset, step, monkeypatch, inputs)
    assert called == inputs
