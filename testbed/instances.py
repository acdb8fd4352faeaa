"""Instance helpers the e2e tests and the demo share: an Instance object, creating it once the
webhook knows its InstanceType, waiting for it to run, and an SSH key pair in a Secret with the
client command that logs in from `main` over the Pod's loopback."""

from __future__ import annotations

import base64
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from kubeapi import Kube, KubeError, Obj, wait_for

WORKER = "worker.gpustack.ai/v1alpha1"
KEY_SECRET_PRIVATE = "id_ed25519"

# The client in `main`: the private key from the Secret (in $LAB_KEY), then the login over the
# Pod's loopback, retried while sshd starts. The session prints what only `main` has (its marker
# file), who it runs as and the environment it was given; then DONE, and `main` idles.
SSH_CLIENT = (
    'umask 077; echo "main only" > /tmp/main-marker; printf "%s\\n" "$LAB_KEY" > /tmp/key; '
    "for attempt in $(seq 60); do "
    "ssh -q -i /tmp/key -p 2222 -o BatchMode=yes -o StrictHostKeyChecking=no "
    "-o UserKnownHostsFile=/dev/null root@127.0.0.1 "
    "'echo MARKER=$(cat /tmp/main-marker); echo SESSION_UID=$(id -u); env' && break; "
    "sleep 1; done; echo DONE=1; sleep 3600"
)


def ssh_namespace(name: str) -> Obj:
    """A tenant namespace that may run SSH-enabled Instances: their `sshd` sidecar enters `main`
    with SYS_ADMIN and SYS_PTRACE, which Pod Security's `baseline` and `restricted` refuse, so the
    namespace allows `privileged` Pods (docs/instances.md, "SSH and Pod Security")."""
    labels = {"pod-security.kubernetes.io/enforce": "privileged"}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def instance(
    name: str, namespace: str, instance_type: str, image: str, command: str, **spec: Any
) -> Obj:
    return {
        "apiVersion": WORKER,
        "kind": "Instance",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "instanceType": instance_type,
            "image": image,
            "command": ["sh", "-c", command],
            **spec,
        },
    }


def ssh_key_secret(name: str, namespace: str) -> Obj:
    """A fresh ed25519 pair: `authorized_keys` for the sidecar, the private key for a client."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "data": {
            "authorized_keys": base64.b64encode(public + b"\n").decode(),
            KEY_SECRET_PRIVATE: base64.b64encode(private).decode(),
        },
    }


# What a testbed node can host beside the chain (the unit spec's defaults ask for a server's).
SMALL = {"cpu": "100m", "ram": "256Mi", "localStorage": "1Gi"}


def ssh_client_instance(
    name: str, namespace: str, instance_type: str, image: str, secret: str, cards: int
) -> Obj:
    """An SSH-enabled Instance whose `main` logs in to its own sidecar (`SSH_CLIENT`)."""
    key = {"secretKeyRef": {"name": secret, "key": KEY_SECRET_PRIVATE}}
    return instance(
        name,
        namespace,
        instance_type,
        image,
        SSH_CLIENT,
        resources={"accelerator": str(cards), **SMALL},
        env=[{"name": "LAB_KEY", "valueFrom": key}],
        ssh={"enabled": True, "authorizedKeysSecret": secret},
    )


def create_instance(kube: Kube, obj: Obj, timeout: float = 120) -> Obj:
    """Create, retrying while the Instance webhook does not know the InstanceType yet (its
    catalog follows the InstanceTypes within moments; a fresh install takes a little longer)."""

    def attempt() -> Obj | None:
        try:
            return kube.create(obj)
        except KubeError as error:
            if "is not known to the webhook yet" in error.message:
                return None
            raise

    return wait_for(attempt, timeout, "the Instance webhook to know the InstanceType")


def instance_status(kube: Kube, name: str, namespace: str) -> Obj:
    found = kube.get(WORKER, "Instance", name, namespace) or {}
    return dict(found.get("status") or {})


def running_instance(kube: Kube, name: str, namespace: str, timeout: float = 240) -> Obj:
    """The status once the Instance runs with its cards named."""

    def ready() -> Obj | None:
        status = instance_status(kube, name, namespace)
        return status if status.get("phase") == "Running" and status.get("accelerators") else None

    return wait_for(ready, timeout, f"the Instance {name} to run with its card")


def logged_env(log: str) -> dict[str, str]:
    """NAME=value lines of a container's output."""
    return dict(line.split("=", 1) for line in log.splitlines() if "=" in line)
