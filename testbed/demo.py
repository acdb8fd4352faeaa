"""The main job: bring up the real control plane and show what runs on it.

Later stages of the chain (pools, queues, views, verdicts) are added here as they land; for now it
starts the testbed, shows each component and the APIs it serves, and tears it down again.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from testbed import build
from testbed.harness import Testbed


def _api_groups(bed: Testbed) -> list[str]:
    groups = bed.kube.request("GET", "/apis")["groups"]
    wanted = ("kueue.x-k8s.io", "metacontroller.k8s.io", "nfd.k8s-sigs.io")
    return [
        f"{g['name']} {g['preferredVersion']['version']}" for g in groups if g["name"] in wanted
    ]


def main(root: Path | None = None) -> int:
    took = build.ensure()
    print(
        "build: " + ", ".join(f"{k} {'reused' if v == 0 else f'{v:.0f}s'}" for k, v in took.items())
    )
    run_root = Path(tempfile.mkdtemp(prefix="gpustack-demo-")) if root is None else root
    bed = Testbed(run_root)
    bed.up()
    try:
        pins = build.versions()
        version = bed.kube.request("GET", "/version")
        print(f"\ntestbed up in {run_root}")
        print(f"kube-apiserver reports {version['gitVersion']} at {bed.server}")
        print("\ncomponent                  state                 pinned version")
        wanted = {
            "etcd": "etcd",
            "kube-apiserver": "kubernetes",
            "kube-controller-manager": "kubernetes",
            "kueue": "kueue",
            "metacontroller": "metacontroller",
            "nfd-master": "nfd",
        }
        for name, state in bed.status().items():
            print(f"{name:26} {state:21} {pins[wanted[name]]['version']}")
        print("\nAPI groups served:")
        for line in _api_groups(bed):
            print(f"  {line}")
        print(f"\nKUBECONFIG={bed.kubeconfig}")
    finally:
        bed.down()
    print("testbed stopped")
    return 0
