"""What the kubelet would do for a served hook's ConfigMap volumes, done by the testbed.

There is no kubelet, so a hook the testbed serves from a Deployment would never see the files
of a mounted ConfigMap. Each ConfigMap volume of such a Deployment gets a local directory that a
small thread keeps equal to the ConfigMap (polling it), and the container's env values that
point into the volume's mountPath are pointed at that directory instead.

Like the kubelet, a file is replaced atomically (write, then rename), so a reader sees the old
or the new content and a new modification time; a key that leaves the ConfigMap, or the
ConfigMap itself, takes its file with it (an `optional` volume is an empty directory then).
"""

from __future__ import annotations

import base64
import logging
import os
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kubeapi import Kube, Obj

POLL_SECONDS = 0.5

log = logging.getLogger("testbed.projection")


@dataclass(frozen=True)
class ConfigMapVolume:
    """A ConfigMap volume of a Deployment's container, by where the kubelet would mount it."""

    namespace: str
    configmap: str
    mount_path: str
    items: Mapping[str, str] = field(default_factory=dict)
    """key -> file path, when the volume lists `items` (then only those keys are projected)."""


def configmap_volumes(deployment: Obj, container: Obj) -> dict[str, ConfigMapVolume]:
    """The container's ConfigMap volumes, by volume name."""
    pod = deployment["spec"]["template"]["spec"]
    namespace = deployment["metadata"].get("namespace", "default")
    sources = {v["name"]: v["configMap"] for v in pod.get("volumes") or [] if "configMap" in v}
    found = {}
    for mount in container.get("volumeMounts") or []:
        source = sources.get(mount["name"])
        if source is None:
            continue
        items = {item["key"]: item["path"] for item in source.get("items") or []}
        found[mount["name"]] = ConfigMapVolume(
            namespace, source["name"], mount["mountPath"].rstrip("/"), items
        )
    return found


def container_env(container: Obj, directories: Mapping[str, Path]) -> dict[str, str]:
    """The container's literal env values; a value inside a mountPath in `directories`
    (mountPath -> local directory) is moved into that directory."""
    env = {}
    for entry in container.get("env") or []:
        if "value" not in entry:
            continue  # valueFrom (the downward API, Secrets) has no testbed meaning here
        value = str(entry["value"])
        for mount_path, directory in directories.items():
            if value == mount_path or value.startswith(mount_path + "/"):
                value = str(directory) + value[len(mount_path) :]
        env[entry["name"]] = value
    return env


def projected_files(configmap: Obj | None, items: Mapping[str, str]) -> dict[str, bytes]:
    """File path (relative to the mount) -> content, as the kubelet would project it."""
    if configmap is None:
        return {}
    files = {key: text.encode() for key, text in (configmap.get("data") or {}).items()}
    for key, encoded in (configmap.get("binaryData") or {}).items():
        files[key] = base64.b64decode(encoded)
    if items:
        return {path: files[key] for key, path in items.items() if key in files}
    return files


def sync_directory(directory: Path, files: Mapping[str, bytes]) -> bool:
    """Make `directory` hold exactly `files`; True when something changed."""
    directory.mkdir(parents=True, exist_ok=True)
    changed = False
    present = {p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file()}
    for stale in present - set(files):
        (directory / stale).unlink()
        changed = True
    for name, content in files.items():
        target = directory / name
        if name in present and target.read_bytes() == content:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=".projecting-")
        with os.fdopen(handle, "wb") as out:
            out.write(content)
        os.replace(temporary, target)
        changed = True
    return changed


class Projection:
    """One ConfigMap volume kept in sync with a local directory by a daemon thread."""

    def __init__(self, kubeconfig: Path, volume: ConfigMapVolume, directory: Path) -> None:
        self.volume = volume
        self.directory = directory
        self._kube = Kube.from_kubeconfig(kubeconfig)  # its own session: used by one thread
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"projection-{volume.configmap}", daemon=True
        )

    def start(self) -> None:
        """Project once now (the hook starts with the files there), then keep following."""
        self.sync()
        self._thread.start()

    def sync(self) -> bool:
        v = self.volume
        configmap = self._kube.get("v1", "ConfigMap", v.configmap, v.namespace)
        return sync_directory(self.directory, projected_files(configmap, v.items))

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        last_error = ""
        while not self._stop.wait(POLL_SECONDS):
            if not self.directory.parent.exists():
                return  # the testbed's run folder is gone: nothing left to project for
            try:
                if self.sync():
                    log.info("projected %s/%s", self.volume.namespace, self.volume.configmap)
                last_error = ""
            except Exception as err:  # the API server may be going down; keep polling
                if str(err) != last_error:
                    log.warning("projecting %s failed: %s", self.volume.configmap, err)
                last_error = str(err)
