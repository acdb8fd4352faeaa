"""The SSH sidecar image comes from the hook's configuration, never from the Instance."""

from __future__ import annotations

import copy

from chain.manufacturers import default_manufacturers
from hooks.instance.sync import sync
from hooks.request import CompositeRequest
from tests.unit.hooks.clock import NOW
from tests.unit.hooks.instance.cases import CASES


def _ssh_request() -> dict[str, object]:
    return copy.deepcopy(CASES["ssh"]["request"])


def test_the_sidecar_runs_the_configured_image_whatever_main_runs() -> None:
    answer = sync(
        CompositeRequest.parse(_ssh_request()),
        default_manufacturers(),
        "mirror.example/chain:7",
        NOW,
    )
    (pod,) = answer["children"]
    main, sshd = pod["spec"]["containers"]
    assert main["image"] == "registry.example/lab:1"
    assert sshd["image"] == "mirror.example/chain:7"
    assert sshd["command"] == ["/opt/gpustack/sshd/start"]


def test_without_a_sidecar_image_an_ssh_instance_fails_with_a_reason() -> None:
    answer = sync(CompositeRequest.parse(_ssh_request()), default_manufacturers(), "", NOW)
    assert answer["children"] == []
    assert answer["status"]["phase"] == "Failed"
    assert "GPUSTACK_SSH_SIDECAR_IMAGE" in answer["status"]["message"]
