"""What every hook's fixture world builds alike: stable uids, and the hook references of the
Metacontroller controllers that send the requests."""

from __future__ import annotations

import hashlib
from typing import Any


def uid(seed: str) -> str:
    """A UUID-shaped uid that is the same in every run for the same seed."""
    digest = hashlib.sha256(seed.encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-4{digest[13:16]}-8{digest[17:20]}-{digest[20:32]}"


def hook_reference(service: str, path: str) -> dict[str, Any]:
    """A controller's hook: hook version v2, the chain's Service in gpustack-system, 10 s."""
    where = {"name": service, "namespace": "gpustack-system", "port": 80}
    return {"version": "v2", "webhook": {"service": where, "path": path, "timeout": "10s"}}
