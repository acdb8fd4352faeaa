"""The chain installed once per session from the shipped manifests (hook requests recorded),
and a throwaway namespace for tests that create Pods or Instances."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from kubeapi import Kube, KubeError, Obj, wait_for
from testbed.harness import Testbed
from testbed.install import Installed, install


@pytest.fixture(scope="session")
def chain(testbed: Testbed) -> Iterator[Installed]:
    yield install(testbed, capture=testbed.root / "captured")


@contextmanager
def scratch_namespace(testbed: Testbed, prefix: str) -> Iterator[str]:
    """A new namespace, ready for Pods, deleted afterwards."""
    kube = testbed.kube
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    # The ServiceAccount admission plugin needs the namespace's default account first.
    wait_for(lambda: kube.get("v1", "ServiceAccount", "default", name), 60, "the default SA")
    try:
        yield name
    finally:
        kube.delete("v1", "Namespace", name)


def create_in_new_namespace(kube: Kube, obj: Obj, timeout: float = 60) -> Obj:
    """Create `obj` in a namespace made a moment ago. Kueue's Pod webhook looks the namespace up
    in its own informer cache and answers 404 "Namespace ... not found" until that cache has
    seen it (seconds on a loaded machine); any client must retry then, and so does the test."""

    def attempt() -> Obj | None:
        try:
            return kube.create(obj)
        except KubeError as err:
            if err.status == 404 and "Namespace" in str(err) and "not found" in str(err):
                return None
            raise

    created: Obj = wait_for(attempt, timeout, "the webhook to know the new namespace")
    return created
