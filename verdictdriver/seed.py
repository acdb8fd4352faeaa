"""The settings singleton, created by the verdict driver on its first start.

The chain's Settings CRD and its `default` object cannot go out in one `kubectl apply`: the
object is refused (`no matches for kind "Settings"`) while its CRD is not yet established. As
upstream's worker does, the one credentialed controller of the install creates it instead,
seeded from `GPUSTACK_<UPPER_SNAKE>` variables, on its first start only: it never updates an
existing object, so an admin's later edits stay. Until the CRD is served it retries.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping

from chain.apis import CHAIN_API, SETTINGS, SETTINGS_NAME
from chain.settings import seeded_spec
from kubeapi import Kube, KubeError, Obj

log = logging.getLogger(__name__)


def singleton(env: Mapping[str, str]) -> Obj:
    return {
        "apiVersion": CHAIN_API,
        "kind": SETTINGS,
        "metadata": {
            "name": SETTINGS_NAME,
            "labels": {"app.kubernetes.io/part-of": "gpustack-chain"},
        },
        "spec": seeded_spec(env),
    }


def ensure_settings(kube: Kube, env: Mapping[str, str]) -> bool:
    """Create the singleton unless it exists; True when this call created it. KubeError 404
    while the CRD is not served yet."""
    if kube.get(CHAIN_API, SETTINGS, SETTINGS_NAME) is not None:
        return False
    try:
        kube.create(singleton(env))
    except KubeError as err:
        if err.status == 409:  # another replica was first
            return False
        raise
    log.info("created the settings singleton %s with %s", SETTINGS_NAME, singleton(env)["spec"])
    return True


def seed_in_background(kube: Kube, env: Mapping[str, str], retry: float = 2.0) -> threading.Thread:
    """`ensure_settings` from a thread of its own, retrying until it lands."""

    def loop() -> None:
        while True:
            try:
                ensure_settings(kube, env)
                return
            except (KubeError, OSError) as err:
                log.info("settings singleton not created yet (%s); retrying", err)
                kube.forget_discovery()  # the CRD may have been established since
                time.sleep(retry)

    thread = threading.Thread(target=loop, name="settings-seed", daemon=True)
    thread.start()
    return thread
