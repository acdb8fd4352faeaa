"""A Metacontroller hook's request, read into small typed views: the schemas, `BadRequest` (the
field a 400 names), and the decorator, composite and customize requests.

A Metacontroller hook must never answer 200 to a request it did not understand: a 200 without
`attachments`/`children` makes Metacontroller delete every object the hook owns. So whatever
cannot be read here is a `BadRequest` naming the offending field, which the transport
(`hooks.transport`) answers with a 400; Metacontroller keeps what exists and retries.

Hooks read only the objects inside the `attachments`/`children`/`related` maps, never the map
keys: hook versions v1 and v2 differ only in those keys, so one hook serves both.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonschema

Obj = dict[str, Any]

_OBJECT_MAP = {
    # "<Kind>.<apiVersion>" -> {"<name> or <ns>/<name>": object}
    "type": "object",
    "additionalProperties": {
        "type": ["object", "null"],
        "additionalProperties": {"$ref": "#/$defs/kubeObject"},
    },
}

DECORATOR_REQUEST_SCHEMA: Obj = {
    "type": "object",
    "required": ["object"],
    "properties": {
        "controller": {"type": "object"},
        "object": {"$ref": "#/$defs/kubeObject"},
        "attachments": _OBJECT_MAP,
        "related": _OBJECT_MAP,
        "finalizing": {"type": "boolean"},
    },
    "$defs": {
        "kubeObject": {
            "type": "object",
            "required": ["apiVersion", "kind", "metadata"],
            "properties": {
                "apiVersion": {"type": "string", "minLength": 1},
                "kind": {"type": "string", "minLength": 1},
                "metadata": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": {"type": "string", "minLength": 1},
                        "namespace": {"type": "string"},
                        "labels": {
                            "type": ["object", "null"],
                            "additionalProperties": {"type": "string"},
                        },
                        "annotations": {
                            "type": ["object", "null"],
                            "additionalProperties": {"type": "string"},
                        },
                    },
                },
            },
        }
    },
}

COMPOSITE_REQUEST_SCHEMA: Obj = {
    "type": "object",
    "required": ["parent"],
    "properties": {
        "controller": {"type": "object"},
        "parent": {"$ref": "#/$defs/kubeObject"},
        "children": _OBJECT_MAP,
        "related": _OBJECT_MAP,
        "finalizing": {"type": "boolean"},
    },
    "$defs": DECORATOR_REQUEST_SCHEMA["$defs"],
}

CUSTOMIZE_REQUEST_SCHEMA: Obj = {
    "type": "object",
    "required": ["parent"],
    "properties": {
        "controller": {"type": "object"},
        "parent": {"$ref": "#/$defs/kubeObject"},
    },
    "$defs": DECORATOR_REQUEST_SCHEMA["$defs"],
}


class BadRequest(Exception):
    """The request does not have the shape the hook needs; `field` is a JSON path into it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message

    @classmethod
    def at(cls, prefix: str, err: ValueError) -> BadRequest:
        """A domain reader's `<field>: <message>` error, its field placed under `prefix`."""
        where, _, message = str(err).partition(": ")
        return cls(f"{prefix}.{where}" if prefix else where, message)


def validate(body: Any, schema: Obj) -> Obj:
    """Check `body` against `schema`; raise BadRequest naming the first bad field."""
    if not isinstance(body, dict):
        raise BadRequest("$", "the request body must be a JSON object")
    validator = jsonschema.Draft202012Validator(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(body))
    if error is not None:
        raise BadRequest(error.json_path, error.message)
    return body


def _group_key(obj: Obj) -> str:
    return f"{obj.get('kind', '')}.{obj.get('apiVersion', '')}"


@dataclass(frozen=True)
class ObjectMap:
    """The objects of one request map, grouped by `<Kind>.<apiVersion>`, keys forgotten."""

    groups: Mapping[str, tuple[Obj, ...]] = field(default_factory=dict)

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> ObjectMap:
        groups: dict[str, tuple[Obj, ...]] = {}
        for group, objects in (raw or {}).items():
            groups[group] = tuple((objects or {}).values())
        return cls(groups)

    def of(self, kind: str, api_version: str) -> tuple[Obj, ...]:
        return self.groups.get(f"{kind}.{api_version}", ())

    def __iter__(self) -> Iterator[Obj]:
        for objects in self.groups.values():
            yield from objects


@dataclass(frozen=True)
class DecoratorRequest:
    object: Obj
    attachments: ObjectMap
    related: ObjectMap
    finalizing: bool

    @classmethod
    def parse(cls, body: Any) -> DecoratorRequest:
        valid = validate(body, DECORATOR_REQUEST_SCHEMA)
        return cls(
            object=valid["object"],
            attachments=ObjectMap.parse(valid.get("attachments")),
            related=ObjectMap.parse(valid.get("related")),
            finalizing=bool(valid.get("finalizing", False)),
        )


@dataclass(frozen=True)
class CompositeRequest:
    """A CompositeController's sync request: the parent, the children it owns, its related
    objects."""

    parent: Obj
    children: ObjectMap
    related: ObjectMap
    finalizing: bool

    @classmethod
    def parse(cls, body: Any) -> CompositeRequest:
        valid = validate(body, COMPOSITE_REQUEST_SCHEMA)
        return cls(
            parent=valid["parent"],
            children=ObjectMap.parse(valid.get("children")),
            related=ObjectMap.parse(valid.get("related")),
            finalizing=bool(valid.get("finalizing", False)),
        )


def object_path(map_name: str, obj: Obj) -> str:
    """JSON path of an object inside a request map, built from the object itself.

    The map keys differ between hook versions v1 and v2 (`name` vs `ns/name`); naming the
    object by its group key and name reads the same under both.
    """
    meta = obj.get("metadata") or {}
    return f"$.{map_name}['{_group_key(obj)}']['{meta.get('name', '')}']"


_SHALLOW_SCHEMA: Obj = {
    **DECORATOR_REQUEST_SCHEMA,
    "properties": {
        **DECORATOR_REQUEST_SCHEMA["properties"],
        "attachments": {"type": "object"},
        "related": {"type": "object"},
    },
}


def _check_map(body: Mapping[str, Any], map_name: str) -> None:
    """Check each entry's apiVersion, kind and metadata.name. The pools hook relates one object
    per node, so the common case calls nothing and builds nothing per entry (no JSON path);
    `_entry_problem` spells the path and the field only for the entry that fails."""
    groups = body.get(map_name)
    if groups is None:
        return
    for group, objects in groups.items():
        if objects is None:
            continue
        if not isinstance(objects, dict):
            raise BadRequest(f"$.{map_name}['{group}']", "expected a map of objects")
        for key, obj in objects.items():
            # `type(x) is T`: exact JSON types; a str subclass cannot come out of a decode.
            if type(obj) is dict:
                api_version = obj.get("apiVersion")
                kind = obj.get("kind")
                meta = obj.get("metadata")
                if type(api_version) is str and api_version and type(kind) is str and kind:
                    name = meta.get("name") if type(meta) is dict else None
                    if type(name) is str and name:
                        continue
            raise _entry_problem(f"$.{map_name}['{group}']['{key}']", obj)


def _entry_problem(path: str, obj: Any) -> BadRequest:
    """The BadRequest for a map entry `_check_map` refused: its first bad field."""
    if not isinstance(obj, dict):
        return BadRequest(path, "expected an object")
    for key_field in ("apiVersion", "kind"):
        value = obj.get(key_field)
        if not isinstance(value, str) or not value:
            return BadRequest(f"{path}.{key_field}", "expected a non-empty string")
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return BadRequest(f"{path}.metadata", "expected an object")
    return BadRequest(f"{path}.metadata.name", "expected a non-empty string")


def parse_shallow(body: Any) -> DecoratorRequest:
    """A `DecoratorRequest` checked deeply for the parent and shallowly for the map entries.

    `DecoratorRequest.parse` runs the JSON schema over every object of every map. A hook that
    relates thousands of objects (the pools hook relates one summary per node) would spend
    about nine times the `json.loads` of the body there; this checks each map entry's
    apiVersion, kind and metadata.name by hand instead, and leaves the objects' own fields to
    the code that reads them.
    """
    valid = validate(body, _SHALLOW_SCHEMA)
    _check_map(valid, "attachments")
    _check_map(valid, "related")
    return DecoratorRequest(
        object=valid["object"],
        attachments=ObjectMap.parse(valid.get("attachments")),
        related=ObjectMap.parse(valid.get("related")),
        finalizing=bool(valid.get("finalizing", False)),
    )


def customize_parent(body: Any) -> Obj:
    """A customize request's parent (checked against the customize schema)."""
    parent: Obj = validate(body, CUSTOMIZE_REQUEST_SCHEMA)["parent"]
    return parent
