"""Every webhook answer is counted by decision and by the rule that refused
(`gpustack_webhook_decisions_total`): an AdmissionReview answer is an HTTP 200 whatever it says,
so only this counter tells a denial from an admission."""

from __future__ import annotations

from typing import Any

from hooks.instancetype.app import app as instancetype_app
from hooks.metrics import decision
from tests.unit.hooks.admission.helpers import GPU, catalog, client, post, review
from tests.unit.hooks.admission.test_pods import pod

SL = GPU + ".sliced"


def counted(web: Any, app: str, route: str, verdict: str, rule: str) -> float:
    text = web.get("/metrics").get_data(as_text=True)
    wanted = (
        f'gpustack_webhook_decisions_total{{app="{app}",decision="{verdict}",'
        f'route="{route}",rule="{rule}"}}'
    )
    for line in text.splitlines():
        if line.startswith(wanted + " "):
            return float(line.split()[-1])
    return 0.0


def test_pod_answers_are_counted_by_decision_and_rule() -> None:
    web = client()
    route = "/mutate-pods"
    before = {
        key: counted(web, "admission", route, *key)
        for key in (("denied", "one-family"), ("allowed", ""), ("retry", "pool-unknown"))
    }
    two_families = pod({GPU: "1"}, {SL: "1", SL + ".memory-percentage": "50"})
    status, answer = post(web, route, review(two_families))
    assert status == 200 and answer["response"]["allowed"] is False
    assert (
        counted(web, "admission", route, "denied", "one-family")
        == before[("denied", "one-family")] + 1
    )
    post(web, route, review(pod({"cpu": "1"})))
    assert counted(web, "admission", route, "allowed", "") == before[("allowed", "")] + 1
    # A MiB slice while the pool has not reported its card memory: a refusal that goes away.
    unknown = client(catalog())
    post(unknown, route, review(pod({SL: "1", SL + ".memory-mib": "1024"})))
    assert (
        counted(web, "admission", route, "retry", "pool-unknown")
        == before[("retry", "pool-unknown")] + 1
    )


def test_instancetype_refusals_name_their_rule() -> None:
    web = instancetype_app.test_client()
    route = "/validate"
    before = counted(web, "instancetype", route, "denied", "instancetype-immutable")
    old = {"metadata": {"name": "t"}, "spec": {"acceleratorGroup": "nvidia-t4"}}
    new = {"metadata": {"name": "t"}, "spec": {"acceleratorGroup": "nvidia-l4"}}
    status, answer = post(web, route, review(new, "UPDATE", old, resource="instancetypes"))
    assert status == 200 and answer["response"]["allowed"] is False
    assert counted(web, "instancetype", route, "denied", "instancetype-immutable") == before + 1


def test_a_plain_refusal_without_rules_counts_as_other() -> None:
    plain = {"response": {"allowed": False, "status": {"code": 422}}}
    assert decision(plain) == ("denied", ("other",))
    assert decision({"response": {"allowed": True, "patch": "W10="}}) == ("patched", ())
