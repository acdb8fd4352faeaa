"""Reading fields out of decoded JSON objects, with errors that name the field.

Objects reach us from the API server, from Metacontroller and from files people edit. A reader
that fails with `KeyError: 'count'` leaves nobody able to find the broken object, so every reader
here takes the path of what it reads and puts it into the `ValueError`.

Absent and `null` mean the same (Go's `omitempty` writes neither, `nullable` fields write null);
a required field rejects both.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

Obj = Mapping[str, object]


def at(path: str, key: str) -> str:
    """`path.key`, or just `key` at the root."""
    return f"{path}.{key}" if path else key


def as_object(value: object, path: str) -> Obj:
    if not isinstance(value, Mapping):
        raise ValueError(f"{path}: expected an object, got {describe(value)}")
    for key in value:
        if not isinstance(key, str):
            raise ValueError(f"{path}: expected string keys, got {key!r}")
    return value


def _present(obj: Obj, key: str, path: str, required: bool) -> object | None:
    value = obj.get(key)
    if value is None and required:
        raise ValueError(f"{at(path, key)}: required")
    return value


def child(obj: Obj, key: str, path: str, required: bool = False) -> Obj:
    """A nested object; `{}` when absent and not required."""
    value = _present(obj, key, path, required)
    return {} if value is None else as_object(value, at(path, key))


def string(obj: Obj, key: str, path: str, required: bool = False) -> str:
    value = _present(obj, key, path, required)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{at(path, key)}: expected a string, got {describe(value)}")
    if required and value == "":
        raise ValueError(f"{at(path, key)}: required, got an empty string")
    return value


def integer(obj: Obj, key: str, path: str, required: bool = False, minimum: int = 0) -> int:
    """A whole number not below `minimum`; JSON decoders may hand us `3.0`, which we accept."""
    value = _present(obj, key, path, required)
    if value is None:
        return 0
    return whole(value, at(path, key), minimum)


def whole(value: object, path: str, minimum: int = 0) -> int:
    # bool is an int subclass in Python; `true` is never a count.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{path}: expected an integer, got {describe(value)}")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"{path}: expected an integer, got {value!r}")
    number = int(value)
    if number < minimum:
        raise ValueError(f"{path}: expected at least {minimum}, got {number}")
    return number


def boolean(obj: Obj, key: str, path: str, required: bool = False) -> bool:
    value = _present(obj, key, path, required)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ValueError(f"{at(path, key)}: expected true or false, got {describe(value)}")
    return value


def items(obj: Obj, key: str, path: str, required: bool = False) -> Iterator[tuple[Obj, str]]:
    """The objects of a list field, each with its own path (`groups[2]`)."""
    value = _present(obj, key, path, required)
    if value is None:
        return
    where = at(path, key)
    if not isinstance(value, list):
        raise ValueError(f"{where}: expected a list, got {describe(value)}")
    for number, item in enumerate(value):
        item_path = f"{where}[{number}]"
        yield as_object(item, item_path), item_path


def strings(obj: Obj, key: str, path: str) -> tuple[str, ...]:
    """A list of strings (a container's `command`, `args`); `()` when absent."""
    value = obj.get(key)
    if value is None:
        return ()
    where = at(path, key)
    if not isinstance(value, list):
        raise ValueError(f"{where}: expected a list of strings, got {describe(value)}")
    for number, item in enumerate(value):
        if not isinstance(item, str):
            raise ValueError(f"{where}[{number}]: expected a string, got {describe(item)}")
    return tuple(value)


def string_map(obj: Obj, key: str, path: str) -> Obj:
    """A map of strings (`labels`, `annotations`); `{}` when absent."""
    found = child(obj, key, path)
    for name, value in found.items():
        if not isinstance(value, str):
            raise ValueError(f"{at(path, key)}[{name}]: expected a string, got {describe(value)}")
    return found


def integers(obj: Obj, key: str, path: str) -> tuple[int, ...] | None:
    """A list of non-negative integers, or None when absent (a nullable list)."""
    value = obj.get(key)
    if value is None:
        return None
    where = at(path, key)
    if not isinstance(value, list):
        raise ValueError(f"{where}: expected a list, got {describe(value)}")
    return tuple(whole(item, f"{where}[{number}]") for number, item in enumerate(value))


SHOWN = 40
"""The most characters of a value an error message quotes: a message is printed by kubectl and
stored in events, and a value may be megabytes long."""


def shown(text: str) -> str:
    """`text`, cut to SHOWN characters (saying how long it was) for an error message."""
    return text if len(text) <= SHOWN else f"{text[:SHOWN]}... ({len(text)} chars)"


def describe(value: object) -> str:
    """What a value is, in words, for an error message (`a list`, `the number 5`)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return f"the string {shown(value)!r}"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__
