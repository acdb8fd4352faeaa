"""The catalog file the webhooks read instead of the API (they hold no credentials).

The ConfigMap `gpustack-system/gpustack-admission-catalog`, written by the InstanceType hook's
catalog decorator, is mounted into a webhook Pod and named by `GPUSTACK_ADMISSION_CATALOG`. The
file is re-read whenever its modification time changes (the kubelet swaps a mounted ConfigMap in
place). No file, or an unreadable one, reads as the parser's empty value, so a webhook keeps
answering with defaults rather than failing.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

import yaml

from chain.catalog import catalog_items, is_settings
from chain.settings import Settings

CATALOG_ENV = "GPUSTACK_ADMISSION_CATALOG"

T = TypeVar("T")

log = logging.getLogger("hooks.catalog")


def load_document(text: str) -> object:
    """The catalog file's document: JSON as the writer renders it, else YAML (hand-made).

    JSON first, because YAML 1.1 refuses some characters JSON carries raw."""
    try:
        return json.loads(text)
    except ValueError:
        return yaml.safe_load(text)


class WatchedFile(Generic[T]):
    """`parse` of the file's document, read again whenever the file's modification time
    changes; `empty` while there is no readable file."""

    def __init__(self, path: str, parse: Callable[[object], T], empty: T) -> None:
        self.path = path
        self.parse = parse
        self.empty = empty
        self._stamp: int | None = None
        self._value = empty

    def __call__(self) -> T:
        try:
            stamp = os.stat(self.path).st_mtime_ns
        except OSError as err:
            if self._stamp is not None:
                log.warning("catalog %s unreadable: %s", self.path, err)
            self._stamp, self._value = None, self.empty
            return self._value
        if stamp != self._stamp:
            try:
                with open(self.path, encoding="utf-8") as handle:
                    self._value = self.parse(load_document(handle.read()))
            except (OSError, ValueError, yaml.YAMLError) as err:
                log.warning("catalog %s unreadable, treated as empty: %s", self.path, err)
                self._value = self.empty
            self._stamp = stamp
        return self._value


def catalog_source(
    parse: Callable[[object], T],
    empty: T,
    env: Mapping[str, str] | None = None,
    variable: str = CATALOG_ENV,
) -> Callable[[], T]:
    """What the catalog file the environment's `variable` names says, through `parse`; `empty`
    when none is named."""
    path = (os.environ if env is None else env).get(variable, "")
    if not path:
        return lambda: empty
    return WatchedFile(path, parse, empty)


def catalog_settings(document: object) -> Settings:
    """The Settings singleton of a catalog document; defaults when it holds none or a bad one."""
    for item in catalog_items(document):
        if item is not None and is_settings(item):
            try:
                return Settings.from_spec(item.get("spec"))
            except ValueError as err:
                log.warning("catalog settings unreadable, defaults used: %s", err)
    return Settings()
