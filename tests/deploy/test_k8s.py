"""deploy/k8s: every manifest against the Kubernetes JSON schemas (kubernetes-validate, strict,
offline), the NetworkAttachmentDefinition against its own schema, the kustomization rendered
by kubectl, and the properties a DPDK pod depends on."""

from __future__ import annotations

import copy
import json
import os
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.deploy.helpers import (
    DEPLOY,
    DPDK_CAPABILITIES,
    SCHEMAS,
    load_settings,
    require_tool,
    run,
    yaml_documents,
)

kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="PyPI kubernetes-validate ships the Kubernetes schemas"
)

K8S = DEPLOY / "k8s"
#: The oldest Kubernetes these manifests claim, and the newest schemas the validator has.
VERSIONS = ("1.28.0", kubernetes_validate.latest_version())
#: Kinds that are not Kubernetes API objects of the core schemas: checked separately.
OWN_SCHEMA_KINDS = {"NetworkAttachmentDefinition", "Kustomization"}
MANIFESTS = sorted(K8S.rglob("*.yaml"))


def documents() -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    for path in MANIFESTS:
        for doc in yaml_documents(path):
            name = doc.get("metadata", {}).get("name", path.stem)
            found.append((f"{path.relative_to(K8S)}:{doc['kind']}/{name}", doc))
    return found


def one(kind: str) -> dict[str, Any]:
    """The one object of this kind that the kustomization applies (k8s/node/ is not in it)."""
    matches = [
        doc for name, doc in documents() if doc["kind"] == kind and not name.startswith("node/")
    ]
    assert len(matches) == 1, f"{len(matches)} {kind} manifests"
    return matches[0]


def pod_spec() -> dict[str, Any]:
    spec: dict[str, Any] = one("Deployment")["spec"]["template"]["spec"]
    return spec


def container() -> dict[str, Any]:
    (main,) = pod_spec()["containers"]
    return dict(main)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    ("name", "doc"),
    [(n, d) for n, d in documents() if d["kind"] not in OWN_SCHEMA_KINDS],
    ids=[n for n, d in documents() if d["kind"] not in OWN_SCHEMA_KINDS],
)
def test_manifest_matches_kubernetes_schema(name: str, doc: dict[str, Any], version: str) -> None:
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        pytest.fail(f"{name} (Kubernetes {version}): {exc.message} at {list(exc.path)}")


def test_strict_validation_catches_mistakes() -> None:
    broken = copy.deepcopy(one("Deployment"))
    broken["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerport"] = 8080
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSIONS[-1], strict=True)
    broken = copy.deepcopy(one("Deployment"))
    broken["spec"]["replicas"] = "one"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSIONS[-1], strict=True)


def test_network_attachment_definition() -> None:
    nad = one("NetworkAttachmentDefinition")
    schema = json.loads((SCHEMAS / "network-attachment-definition.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(nad)
    config = json.loads(nad["spec"]["config"])
    assert config["type"] == "sriov" and config["name"] == nad["metadata"]["name"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", config["cniVersion"])
    assert "ipam" not in config, "the user-space stack owns the VF's address"
    resource = nad["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"]
    deployment = one("Deployment")
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["k8s.v1.cni.cncf.io/networks"] == nad["metadata"]["name"]
    resources = container()["resources"]
    assert resources["requests"][resource] == resources["limits"][resource] == "1"


def test_own_schema_rejects_a_broken_attachment() -> None:
    schema = json.loads((SCHEMAS / "network-attachment-definition.schema.json").read_text())
    broken = copy.deepcopy(one("NetworkAttachmentDefinition"))
    broken["spec"]["cnfig"] = broken["spec"].pop("config")
    assert not jsonschema.Draft202012Validator(schema).is_valid(broken)


def test_sriov_device_plugin_example_offers_that_resource() -> None:
    (config_map,) = yaml_documents(K8S / "node" / "sriovdp-configmap.yaml")
    resources = json.loads(config_map["data"]["config.json"])["resourceList"]
    names = {f"{r['resourcePrefix']}/{r['resourceName']}" for r in resources}
    nad = one("NetworkAttachmentDefinition")
    assert nad["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"] in names
    for resource in resources:
        assert resource["selectors"]["drivers"] == ["vfio-pci"], "DPDK takes vfio-pci VFs"


def test_kustomization_renders_and_validates() -> None:
    kustomization = yaml_documents(K8S / "kustomization.yaml")[0]
    listed = {K8S / name for name in kustomization["resources"]}
    top_level = {p for p in MANIFESTS if p.parent == K8S and p.name != "kustomization.yaml"}
    assert listed == top_level, "every top-level manifest is in the kustomization"
    kubectl = require_tool("kubectl", "Debian/Kubernetes kubectl: `kubectl kustomize`")
    proc = run([kubectl, "kustomize", str(K8S)])
    assert proc.returncode == 0, proc.stderr
    rendered = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert len(rendered) == len(listed)
    for doc in rendered:
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == kustomization["namespace"]
        assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "wsgw"
        if doc["kind"] not in OWN_SCHEMA_KINDS:
            kubernetes_validate.validate(doc, VERSIONS[-1], strict=True)
    (deployment,) = [d for d in rendered if d["kind"] == "Deployment"]
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    (override,) = kustomization["images"]
    assert image == f"{override['newName']}:{override['newTag']}"


def test_guaranteed_qos_with_exclusive_cpus() -> None:
    for spec in pod_spec()["containers"] + pod_spec().get("initContainers", []):
        requests, limits = spec["resources"]["requests"], spec["resources"]["limits"]
        assert requests == limits, f"{spec['name']}: requests must equal limits"
        assert re.fullmatch(r"[1-9]\d*", str(requests["cpu"])), "integer CPUs for the CPU manager"
        assert "memory" in requests


def test_hugepages_resources_and_volumes() -> None:
    main = container()
    requests = main["resources"]["requests"]
    sizes = sorted(k.removeprefix("hugepages-") for k in requests if k.startswith("hugepages-"))
    assert sizes == ["1Gi", "2Mi"]
    assert "memory" in requests, "the kubelet requires memory (or cpu) beside hugepages"
    media = {
        v["name"]: v["emptyDir"]["medium"]
        for v in pod_spec()["volumes"]
        if v.get("emptyDir", {}).get("medium", "").startswith("HugePages")
    }
    # With two page sizes, each volume names its size (a bare "HugePages" is refused).
    assert sorted(m.removeprefix("HugePages-") for m in media.values()) == sizes
    mounts = {m["name"]: m["mountPath"] for m in main["volumeMounts"]}
    assert "/dev/hugepages" in {mounts[name] for name in media}


def test_security_context() -> None:
    context = container()["securityContext"]
    assert context["capabilities"]["drop"] == ["ALL"]
    assert set(context["capabilities"]["add"]) == DPDK_CAPABILITIES
    assert context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert context.get("privileged", False) is False
    assert pod_spec()["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    writable = {m["mountPath"] for m in container()["volumeMounts"] if not m.get("readOnly")}
    assert {"/tmp", "/var/lib/wsgw", "/dev/shm"} <= writable


def test_no_service_links() -> None:
    """A Service named wsgw would inject WSGW_PORT=tcp://..., which the settings refuse."""
    assert pod_spec()["enableServiceLinks"] is False
    service = one("Service")
    settings_env = {
        f"{service['metadata']['name'].upper()}_PORT": "tcp://10.96.0.10:8080",
    }
    with pytest.raises(pytest.fail.Exception):
        load_settings(settings_env)


def test_probes_ports_and_service() -> None:
    main = container()
    (port,) = main["ports"]
    assert port == {"name": "http", "containerPort": 8080, "protocol": "TCP"}
    assert main["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert main["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert main["startupProbe"]["httpGet"]["path"] == "/healthz"
    service = one("Service")
    (service_port,) = service["spec"]["ports"]
    assert service_port["port"] == 8080 and service_port["targetPort"] == "http"
    labels = one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()


def test_allowed_hosts_name_the_service_and_the_pod() -> None:
    """Probes and a Prometheus scraping the pod send Host: <pod IP>:8080, clients in the
    cluster the Service's names: the API must answer them all (api.allowed_hosts)."""
    env = [e["name"] for e in container()["env"]]
    values = {e["name"]: e for e in container()["env"]}
    assert values["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    # The kubelet expands $(POD_IP) only from a variable defined earlier in the list.
    assert env.index("POD_IP") < env.index("WSGW_API__ALLOWED_HOSTS")
    raw = values["WSGW_API__ALLOWED_HOSTS"]["value"]
    service = one("Service")["metadata"]["name"]
    namespace = one("Namespace")["metadata"]["name"]
    for pod_ip, host in [("10.244.1.7", "10.244.1.7"), ("fd00:10:244::7", "[fd00:10:244::7]")]:
        settings = load_settings({"WSGW_API__ALLOWED_HOSTS": raw.replace("$(POD_IP)", pod_ip)})
        allowed = settings["api"]["allowed_hosts"]
        assert host in allowed
        assert {service, f"{service}.{namespace}.svc.cluster.local"} <= set(allowed)


def test_secret_holds_placeholders_and_feeds_the_database_url() -> None:
    secret = one("Secret")
    for key, value in secret["stringData"].items():
        assert "CHANGE-ME" in value, f"{key}: commit placeholders only"
    env = {e["name"]: e for e in container()["env"]}
    ref = env["WSGW_DB__URL"]["valueFrom"]["secretKeyRef"]
    assert ref["name"] == secret["metadata"]["name"] and ref["key"] in secret["stringData"]


def test_configmap_is_valid_gateway_settings() -> None:
    config_map = one("ConfigMap")
    volumes = {v["name"]: v for v in pod_spec()["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in container()["volumeMounts"]}
    (volume_name,) = [n for n, v in volumes.items() if "configMap" in v]
    assert volumes[volume_name]["configMap"]["name"] == config_map["metadata"]["name"]
    env = {e["name"]: e.get("value") for e in container()["env"]}
    config_path = Path(str(env["WSGW_CONFIG"]))
    assert config_path.parent == Path(mounts[volume_name])
    toml_text = config_map["data"][config_path.name]
    tomllib.loads(toml_text)
    secret_url = one("Secret")["stringData"]["db-url"]
    settings = load_settings({"WSGW_DB__URL": secret_url}, toml_text)
    assert settings["api"]["host"] == "0.0.0.0" and settings["api"]["port"] == 8080
    assert settings["dpdk"]["hugepages"] == "on"
    assert settings["host"]["allow_changes"] is False
    assert settings["db"]["url"] == secret_url


def test_start_script_derives_lcore_and_pci_allow(tmp_path: Path) -> None:
    """The container's shell: run it with a stand-in `wsgw` that prints what it was given."""
    main = container()
    assert main["command"] == ["/bin/sh", "-c"]
    (script,) = main["args"]
    resource = one("NetworkAttachmentDefinition")["metadata"]["annotations"][
        "k8s.v1.cni.cncf.io/resourceName"
    ]
    variable = "PCIDEVICE_" + re.sub(r"[^A-Z0-9]", "_", resource.upper())
    assert variable in script, f"the device plugin names the VF in {variable}"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    fake = bin_dir / "wsgw"
    fake.write_text(
        "#!/bin/sh\n"
        f'exec {sys.executable} -c "import json, os, sys; '
        "print(json.dumps({'argv': sys.argv[1:], 'env': dict(os.environ)}))\" \"$@\"\n"
    )
    fake.chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        variable: "0000:3b:02.1,0000:3b:02.2",
    }
    proc = run(["/bin/sh", "-c", script], env=env, timeout=30)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["argv"] == ["serve"]
    given = result["env"]
    assert json.loads(given["WSGW_DPDK__PCI_ALLOW"]) == ["0000:3b:02.1", "0000:3b:02.2"]
    assert given["WSGW_DPDK__LCORES"] == f"0@{max(os.sched_getaffinity(0))}"
    settings = load_settings({k: v for k, v in given.items() if k.startswith("WSGW_")})
    assert settings["dpdk"]["pci_allow"] == ["0000:3b:02.1", "0000:3b:02.2"]
    # An operator's explicit setting wins.
    proc = run(["/bin/sh", "-c", script], env={**env, "WSGW_DPDK__LCORES": "0@5"}, timeout=30)
    assert json.loads(proc.stdout)["env"]["WSGW_DPDK__LCORES"] == "0@5"
