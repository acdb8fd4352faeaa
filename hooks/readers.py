"""What several hooks read out of a request the same way: the chain's settings (from the
singleton as parent or as a related object) and the pool an InstanceType stands for. Each field a
reader cannot use is a `BadRequest` naming its full path."""

from __future__ import annotations

from chain.apis import CHAIN_API, SETTINGS, SETTINGS_NAME
from chain.pools import PoolIdentity
from chain.settings import Settings
from hooks.request import BadRequest, DecoratorRequest, Obj, object_path


def pool_identity(obj: Obj, where: str) -> PoolIdentity:
    """The pool an InstanceType (at JSON path `where`) stands for; a field of the wrong type
    is a 400 naming it."""
    try:
        return PoolIdentity.of_spec(obj.get("spec"), "spec")
    except ValueError as err:
        raise BadRequest.at(where, err) from None


def read_settings(obj: Obj | None, path: str) -> Settings:
    """Settings from a Settings object's spec (defaults when there is no object).

    `Settings.from_spec` names the bad field as `spec.<name>: ...`; that becomes a BadRequest
    whose field is the full path into the request, so the 400 says exactly what to fix.
    """
    if obj is None:
        return Settings()
    try:
        return Settings.from_spec(obj.get("spec"))
    except ValueError as err:
        field, _, message = str(err).partition(": ")
        raise BadRequest(f"{path}.{field}", message) from err


def parent_settings(request: DecoratorRequest) -> Settings | None:
    """The settings of a controller whose parent is the Settings singleton; None when the parent
    is another Settings object (only the singleton carries the chain's settings, and any other
    owns nothing). BadRequest when the parent is not a Settings at all."""
    parent = request.object
    if parent["kind"] != SETTINGS or parent["apiVersion"] != CHAIN_API:
        raise BadRequest("$.object.kind", f"expected a {CHAIN_API} Settings, got {parent['kind']}")
    if parent["metadata"]["name"] != SETTINGS_NAME:
        return None
    return read_settings(parent, "$.object")


def related_settings(request: DecoratorRequest) -> Settings:
    """The chain settings among the related objects; defaults when the singleton is absent."""
    for obj in request.related.of(SETTINGS, CHAIN_API):
        if obj["metadata"]["name"] == SETTINGS_NAME:
            return read_settings(obj, object_path("related", obj))
    return Settings()
