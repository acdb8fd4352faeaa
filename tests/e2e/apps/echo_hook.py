"""A minimal DecoratorController hook for the testbed smoke test.

For each decorated ConfigMap it returns one attachment, a ConfigMap named `<parent>-echo`,
unless the parent carries the annotation `smoke.gpustack.ai/stop: "true"`. It reads the parent
only, never the keys of the attachments map, so it works whichever hook version Metacontroller
speaks.
"""

from __future__ import annotations

from typing import Any

from flask import Flask, jsonify, request

app = Flask(__name__)


@app.post("/sync")
def sync() -> Any:
    body = request.get_json(silent=True)
    if not isinstance(body, dict) or not isinstance(body.get("object"), dict):
        return jsonify({"error": "request needs an object field holding the decorated object"}), 400
    parent = body["object"]
    meta = parent.get("metadata", {})
    attachments = []
    if meta.get("annotations", {}).get("smoke.gpustack.ai/stop") != "true":
        attachments.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"{meta['name']}-echo", "namespace": meta.get("namespace")},
                "data": {"echo": parent.get("data", {}).get("say", "")},
            }
        )
    return jsonify({"labels": {"smoke.gpustack.ai/decorated": "true"}, "attachments": attachments})
