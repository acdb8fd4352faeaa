"""How the testbed starts each upstream component (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, Kueue, the JobSet controller, Metacontroller, nfd-master) as a process of a
`Testbed`, with the flags and configuration running outside a cluster needs."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import requests
import yaml

from hooks.queue.kueue_config import merged_configuration
from kubeapi import Obj, load_yaml_documents
from testbed import build, certs, crds
from testbed.nodes import node_object, register_node

if TYPE_CHECKING:
    from testbed.harness import Testbed

KUEUE_NAMESPACE = "kueue-system"
# Kueue reads its metrics certificate from this fixed path when internal cert management is off.
KUEUE_METRICS_CERTS = Path("/etc/kueue/metrics/certs")
# The chain's Kueue Configuration fragment; the testbed's Kueue runs with it merged in.
KUEUE_FRAGMENT = (
    Path(__file__).resolve().parent.parent / "manifests" / "kueue" / "configuration.yaml"
)
KUEUE_STOCK_CONFIG = "config/components/manager/controller_manager_config.yaml"
"""Kueue's own Configuration, what its release manifests install."""
FRAMEWORKS_RUN_HERE = ("batch/job", "jobset.x-k8s.io/jobset")
"""The job frameworks Kueue integrates on the emulated testbed: of Kueue's stock
`integrations.frameworks`, those whose CRDs the testbed installs (Jobs are built in; JobSet's
CRD and its real controller come with Kueue). The others' CRDs are absent, and their webhooks
would refuse Pods and Deployments. No Job controller runs emulated, so a Job, a JobSet's child
Jobs included, makes no Pods."""
CONTROL_PLANE_NODE = "testbed-control-plane"
FRONT_PROXY_CLIENT = "front-proxy-client"


def http_ok(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False


def start_etcd(bed: Testbed, binary: Path, timeout: float) -> None:
    port = bed.state.ports["etcd"]
    url = f"http://127.0.0.1:{port}"
    bed.spawn(
        "etcd",
        [
            str(binary),
            f"--data-dir={bed.root / 'etcd'}",
            f"--listen-client-urls={url}",
            f"--advertise-client-urls={url}",
            f"--listen-peer-urls=http://127.0.0.1:{bed.state.ports['etcd_peer']}",
            "--unsafe-no-fsync=true",  # test data: durability buys nothing, fsync costs a lot
            "--quota-backend-bytes=4294967296",
        ],
    )

    def healthy() -> bool:
        try:
            return bool(requests.get(f"{url}/health", timeout=2).json().get("health") == "true")
        except (requests.RequestException, ValueError):
            return False

    bed.wait_ready("etcd", healthy, timeout)


def apiserver_network_flags(bed: Testbed) -> list[str]:
    c = bed.certs
    if not bed.state.real_nodes:
        return [
            "--bind-address=127.0.0.1",
            # No default route on these machines: without this the server refuses to start.
            "--advertise-address=127.0.0.1",
            "--endpoint-reconciler-type=none",
        ]
    front_proxy = certs.issue(bed.root / "certs", FRONT_PROXY_CLIENT, FRONT_PROXY_CLIENT)
    return [
        # Loopback for the host's clients, the bridge for the nodes and their Pods.
        "--bind-address=0.0.0.0",
        f"--advertise-address={bed.network.host_ip}",  # the `kubernetes` Service's endpoint
        "--kubelet-preferred-address-types=InternalIP",
        f"--kubelet-client-certificate={c.admin_crt}",
        f"--kubelet-client-key={c.admin_key}",
        f"--kubelet-certificate-authority={c.ca_crt}",
        # Webhooks and aggregated APIs at their Pods' addresses: the host runs no kube-proxy.
        "--enable-aggregator-routing=true",
        # The front proxy: aggregated API servers (Kueue's visibility API) trust requests the
        # API server forwards with this client certificate and these headers; without it
        # they answer 403, and clients whose discovery must be complete (Metacontroller
        # v1.5.20) stop altogether.
        f"--proxy-client-cert-file={front_proxy[0]}",
        f"--proxy-client-key-file={front_proxy[1]}",
        f"--requestheader-client-ca-file={c.ca_crt}",
        f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
    ]


POD_SECURITY_DEFAULT = "baseline"
"""The Pod Security level the real-node cluster enforces where a namespace sets none: the level
many clusters enforce by default, so the install is proven where it is not `privileged`."""


def admission_config(bed: Testbed) -> list[str]:
    """With real nodes, Pod Security admission enforces `baseline` in every namespace that does
    not say otherwise (kube-system exempt, as clusters that enforce a default keep it); the
    chain's namespaces carry their own levels (manifests/namespace.yaml)."""
    if not bed.state.real_nodes:
        return []
    path = bed.root / "admission.yaml"
    config = {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "AdmissionConfiguration",
        "plugins": [
            {
                "name": "PodSecurity",
                "configuration": {
                    "apiVersion": "pod-security.admission.config.k8s.io/v1",
                    "kind": "PodSecurityConfiguration",
                    "defaults": {
                        "enforce": POD_SECURITY_DEFAULT,
                        "enforce-version": "latest",
                        "audit": POD_SECURITY_DEFAULT,
                        "audit-version": "latest",
                        "warn": POD_SECURITY_DEFAULT,
                        "warn-version": "latest",
                    },
                    "exemptions": {
                        "usernames": [],
                        "runtimeClasses": [],
                        "namespaces": ["kube-system"],
                    },
                },
            }
        ],
    }
    path.write_text(yaml.safe_dump(config))
    return [f"--admission-control-config-file={path}"]


AUDIT_POLICY: Obj = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "verbs": ["create", "update", "patch", "delete", "deletecollection"]},
        {"level": "None"},
    ],
}
"""Writes only, at Metadata level (who, verb, object, answer; no bodies): what a benchmark
counting the control plane's writes needs, at the least cost to the server."""


def audit_flags(bed: Testbed) -> list[str]:
    """The audit log's flags when the testbed was asked for one: a JSON line per write served."""
    if not bed.audit:
        return []
    policy = bed.root / "audit-policy.yaml"
    policy.write_text(yaml.safe_dump(AUDIT_POLICY))
    return [
        f"--audit-policy-file={policy}",
        f"--audit-log-path={bed.audit_log}",
        "--audit-log-format=json",
        "--audit-log-mode=blocking",
    ]


def start_apiserver(bed: Testbed, binary: Path, timeout: float) -> None:
    c = bed.certs
    port = bed.state.ports["apiserver"]
    bed.spawn(
        "kube-apiserver",
        [
            str(binary),
            f"--etcd-servers=http://127.0.0.1:{bed.state.ports['etcd']}",
            *apiserver_network_flags(bed),
            f"--secure-port={port}",
            f"--tls-cert-file={c.serving_crt}",
            f"--tls-private-key-file={c.serving_key}",
            f"--client-ca-file={c.ca_crt}",
            "--authorization-mode=Node,RBAC",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            f"--service-account-issuer=https://127.0.0.1:{port}",
            f"--service-account-key-file={c.sa_pub}",
            f"--service-account-signing-key-file={c.sa_key}",
            "--max-requests-inflight=2000",
            "--max-mutating-requests-inflight=1000",
            *admission_config(bed),
            *audit_flags(bed),
        ],
    )
    bed.wait_ready("kube-apiserver", lambda: bed.https_ok(f"{bed.server}/readyz"), timeout)


def start_kcm(bed: Testbed, binary: Path, timeout: float) -> None:
    c = bed.certs
    port = bed.state.ports["kcm"]
    bed.spawn(
        "kube-controller-manager",
        [
            str(binary),
            *controller_flags(bed, port),
            # With real nodes, everything a cluster runs (node lifecycle, Deployments,
            # DaemonSets, Jobs, EndpointSlices, the root CA publisher, ...). Emulated, the
            # API-level ones only; the ClusterRole aggregation among them, so the chain's tenant
            # roles reach `view`/`edit`/`admin` (tests/e2e/test_tenant_roles.py).
            "--controllers="
            + (
                "*"
                if bed.state.real_nodes
                else ",".join(
                    (
                        "namespace",
                        "garbagecollector",
                        "serviceaccount",
                        "serviceaccount-token",
                        "clusterrole-aggregation",
                        *bed.controllers,
                    )
                )
            ),
            f"--cluster-signing-cert-file={c.ca_crt}",
            f"--cluster-signing-key-file={c.ca_key}",
            f"--root-ca-file={c.ca_crt}",
            f"--service-account-private-key-file={c.sa_key}",
            "--use-service-account-credentials=false",
        ],
    )
    bed.wait_ready(
        "kube-controller-manager",
        lambda: bed.https_ok(f"https://127.0.0.1:{port}/healthz"),
        timeout,
    )
    # The service-account controller creating `default` proves the controllers run.
    bed.wait_ready(
        "kube-controller-manager",
        lambda: bed.kube.get("v1", "ServiceAccount", "default", "default"),
        timeout,
    )


def controller_flags(bed: Testbed, port: int) -> list[str]:
    """What kube-controller-manager and kube-scheduler share: the admin kubeconfig for
    everything, no leader election, HTTPS health on a loopback port."""
    c = bed.certs
    return [
        f"--kubeconfig={bed.kubeconfig}",
        f"--authentication-kubeconfig={bed.kubeconfig}",
        f"--authorization-kubeconfig={bed.kubeconfig}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--tls-cert-file={c.serving_crt}",
        f"--tls-private-key-file={c.serving_key}",
    ]


def start_scheduler(bed: Testbed, binary: Path, timeout: float) -> None:
    port = bed.state.ports["scheduler"]
    bed.spawn("kube-scheduler", [str(binary), *controller_flags(bed, port)])
    bed.wait_ready(
        "kube-scheduler", lambda: bed.https_ok(f"https://127.0.0.1:{port}/healthz"), timeout
    )


def kueue_config(bed: Testbed) -> Obj:
    """The Configuration the testbed's Kueue runs with: what running outside a cluster
    needs, plus the chain's shipped fragment (feature gates, resource transformations)."""
    config = kueue_base_config(bed, bed.state.ports)
    if KUEUE_FRAGMENT.is_file():
        config = merged_configuration(config, load_yaml_documents(KUEUE_FRAGMENT)[0])
    return settings_merged(config, bed.kueue_settings)


def settings_merged(config: Obj, settings: Obj) -> Obj:
    """`config` with `settings` set on top: a mapping merges into a mapping, key by key,
    anything else replaces (what a user's edit of one field of the Configuration does)."""
    out = dict(config)
    for key, value in settings.items():
        here = out.get(key)
        if isinstance(value, dict) and isinstance(here, dict):
            out[key] = settings_merged(here, value)
        else:
            out[key] = value
    return out


def kueue_base_config(bed: Testbed, p: dict[str, int]) -> Obj:
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        **kueue_stock_tuning(),
        "namespace": KUEUE_NAMESPACE,
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {
            "port": p["kueue_webhook"],
            "host": "127.0.0.1",
            "certDir": str(bed.root / "kueue-webhook-certs"),
        },
        "metrics": {"bindAddress": f"127.0.0.1:{p['kueue_metrics']}"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{p['kueue_health']}"},
        "integrations": {"frameworks": kueue_frameworks()},
        # No kubelet runs Pods here: an admitted Workload never becomes PodsReady, and
        # waitForPodsReady (on by default since 0.19) would evict it after 30 minutes.
        "featureGates": {"VisibilityOnDemand": False, "DisableWaitForPodsReady": True},
    }


def start_kueue(bed: Testbed, binary: Path, timeout: float) -> None:
    c = bed.certs
    _serving_pair(bed, "kueue-webhook-certs")  # the certDir of kueue_config
    KUEUE_METRICS_CERTS.mkdir(parents=True, exist_ok=True)
    for src, dst in ((c.serving_crt, "tls.crt"), (c.serving_key, "tls.key")):
        shutil.copy(src, KUEUE_METRICS_CERTS / dst)
    config = bed.root / "kueue-config.yaml"
    config.write_text(yaml.safe_dump(kueue_config(bed)))
    bed.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NAMESPACE}})
    _run_manager(bed, "kueue", binary, config, "kueue_health", timeout)
    for hook_config in crds.kueue_webhooks(bed):
        bed.kube.apply(hook_config)


def start_jobset(bed: Testbed, binary: Path, timeout: float) -> None:
    """The JobSet controller, as its release runs it but on the host: its stock Configuration
    with internal cert management off and its webhook server on 127.0.0.1 with the testbed's
    serving certificate (as Kueue's); then its webhook configurations, pointed at it."""
    certdir = _serving_pair(bed, "jobset-webhook-certs")
    p = bed.state.ports
    config = {
        **crds.jobset_stock_config(),
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"port": p["jobset_webhook"], "host": "127.0.0.1", "certDir": str(certdir)},
        "metrics": {"bindAddress": f"127.0.0.1:{p['jobset_metrics']}", "certDir": str(certdir)},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{p['jobset_health']}"},
    }
    path = bed.root / "jobset-config.yaml"
    path.write_text(yaml.safe_dump(config))
    _run_manager(bed, "jobset", binary, path, "jobset_health", timeout)
    for hook_config in crds.jobset_webhooks(bed):
        bed.kube.apply(hook_config)


def _serving_pair(bed: Testbed, folder: str) -> Path:
    """A folder under the run folder holding the testbed's serving pair as `tls.crt` and
    `tls.key`, the names controller-runtime's webhook server reads."""
    certdir = bed.root / folder
    certdir.mkdir(exist_ok=True)
    shutil.copy(bed.certs.serving_crt, certdir / "tls.crt")
    shutil.copy(bed.certs.serving_key, certdir / "tls.key")
    return certdir


def _run_manager(
    bed: Testbed, name: str, binary: Path, config: Path, health_port: str, timeout: float
) -> None:
    """A controller-runtime manager (Kueue, JobSet) started with its Configuration file and the
    admin kubeconfig, waited for until its readiness probe answers."""
    bed.spawn(
        name,
        [str(binary), f"--config={config}", f"--kubeconfig={bed.kubeconfig}", "--zap-log-level=2"],
    )
    health = f"http://127.0.0.1:{bed.state.ports[health_port]}/readyz"
    bed.wait_ready(name, lambda: http_ok(health), timeout)


def start_metacontroller(bed: Testbed, binary: Path, timeout: float) -> None:
    port = bed.state.ports["metacontroller"]
    bed.spawn(
        "metacontroller",
        [
            str(binary),
            # v1.5.20 reads --client-config-path (or $KUBECONFIG), not --kubeconfig.
            f"--client-config-path={bed.kubeconfig}",
            f"--debug-addr=127.0.0.1:{port}",
            # New CRDs (ours) are picked up on the next discovery; the default 30 s is slow.
            "--discovery-interval=2s",
            "--client-go-qps=100",
            "--client-go-burst=200",
            "-v=4",
        ],
    )
    bed.wait_ready("metacontroller", lambda: http_ok(f"http://127.0.0.1:{port}/metrics"), timeout)


def start_nfd(bed: Testbed, binary: Path, timeout: float) -> None:
    port = bed.state.ports["nfd"]
    argv = [
        str(binary),
        f"-kubeconfig={bed.kubeconfig}",
        f"-port={port}",
        "-enable-leader-election=false",
        f"-config={bed.root / 'nfd-master.conf'}",
        "-v=2",
    ]
    if bed.nfd_extra_label_ns:
        argv.append(f"-extra-label-ns={','.join(bed.nfd_extra_label_ns)}")
    (bed.root / "nfd-master.conf").write_text("{}\n")
    # nfd-master annotates the Node it runs on and exits if that Node does not exist. This
    # Node hosts no workload; the chain is told to leave it alone.
    if bed.kube.get("v1", "Node", CONTROL_PLANE_NODE) is None:
        node = node_object(
            CONTROL_PLANE_NODE,
            labels={
                "node-role.kubernetes.io/control-plane": "",
                "gpustack.ai/managed": "false",
            },
        )
        node["spec"] = {
            "taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
        }
        register_node(bed.kube, node)
    bed.spawn(
        "nfd-master",
        argv,
        env={"KUBERNETES_NAMESPACE": "node-feature-discovery", "NODE_NAME": CONTROL_PLANE_NODE},
    )
    bed.kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "node-feature-discovery"},
        }
    )
    bed.wait_ready("nfd-master", lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), timeout)


def kueue_frameworks() -> list[str]:
    """Kueue's stock `integrations.frameworks`, read from the pinned module, less those the
    emulated testbed runs nothing for."""
    stock = load_yaml_documents(build.module_dir("kueue") / KUEUE_STOCK_CONFIG)[0]
    frameworks = (stock.get("integrations") or {}).get("frameworks") or []
    return [name for name in frameworks if name in FRAMEWORKS_RUN_HERE]


def kueue_stock_tuning() -> Obj:
    """The reconciler concurrency and API client rates of Kueue's stock Configuration, read from
    the pinned module. A real install runs with them; without them controller-runtime and
    client-go fall back to one Workload at a time and 20 requests per second, and the testbed's
    Kueue would be far slower than any cluster's (the admission benchmark measured it)."""
    stock = load_yaml_documents(build.module_dir("kueue") / KUEUE_STOCK_CONFIG)[0]
    return {key: stock[key] for key in ("controller", "clientConnection") if key in stock}
