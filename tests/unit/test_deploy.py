"""The deployment files, checked offline: there is no Docker engine and no cluster here.

The Dockerfile is linted by hadolint, docker-compose.yml is parsed and cross-checked, and the
Kubernetes manifests are rendered by the real kubectl (its built-in kustomize) and validated
against Kubernetes' own schemas, prometheus-operator's kinds against a schema of theirs
(tests/support/manifests.py). Each check is also shown to fail on a broken input.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import tomllib
from datetime import timedelta
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from cronwarden.activities.jobs import import_job_modules
from cronwarden.config import Settings
from cronwarden.monitor import db_alert
from cronwarden.schedules.model import ScheduleDefinition, parse_schedule_text
from tests.support.locks import CHECKOV_VENV, RUNTIME_LOCK, closure, read_lock
from tests.support.manifests import MONITORING_GROUP, monitoring_problems, render, run_tool
from tests.support.releases import copy_manifests, release_job, render_release

REPO_ROOT = Path(__file__).resolve().parents[2]
KUBERNETES = REPO_ROOT / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.37.0"  # the newest schema set kubernetes-validate ships
MIGRATOR = "cronwarden_migrator"
RUNTIME = "cronwarden_runtime"


# --- Dockerfile -------------------------------------------------------------------------------


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    logical: list[str] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    return [(i.split(None, 1)[0].upper(), i.split(None, 1)[1]) for i in logical]


def test_the_dockerfile_lints_clean() -> None:
    result = run_tool("hadolint", str(REPO_ROOT / "Dockerfile"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_rejects_a_careless_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get install curl\nCMD cronwarden\n")
    result = run_tool("hadolint", str(bad))
    assert result.returncode != 0
    assert "DL3007" in result.stdout  # `latest`


def test_the_image_runs_cronwarden_as_a_non_root_user_without_dev_dependencies() -> None:
    steps = dockerfile_instructions(REPO_ROOT / "Dockerfile")
    stages = [i for i, (op, _) in enumerate(steps) if op == "FROM"]
    assert len(stages) >= 2, "multi-stage: build, then a runtime stage"
    runtime = steps[stages[-1] :]
    users = [arg for op, arg in runtime if op == "USER"]
    assert users, "the runtime stage sets a USER"
    assert users[-1].split(":")[0] not in {"0", "root"}
    assert [arg for op, arg in runtime if op == "ENTRYPOINT"] == ['["cronwarden"]']
    installs = " ".join(arg for op, arg in steps if op == "RUN" and "pip install" in arg)
    assert "[" not in installs, "no extras: no dev tools, no embedded servers"
    ignored = (REPO_ROOT / ".dockerignore").read_text().split()
    assert {".venv", "tests", ".git"} <= set(ignored)


def test_the_lock_pins_every_runtime_dependency_at_the_version_the_tests_ran_with() -> None:
    pins = read_lock(RUNTIME_LOCK)
    declared = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for dependency in map(Requirement, declared):
        name = canonicalize_name(dependency.name)
        assert name in pins, f"{name} is not pinned in requirements.lock"
        assert dependency.specifier.contains(pins[name]), (name, pins[name])
    # Complete and nothing more: exactly what `pip install .` pulls in, at the tested versions.
    assert set(pins) == closure(declared)
    for pinned, version in pins.items():
        assert metadata.version(pinned) == version, pinned
    steps = dockerfile_instructions(REPO_ROOT / "Dockerfile")
    installs = [arg for op, arg in steps if op == "RUN" and "pip install" in arg]
    assert any("-r requirements.lock" in i and "--no-deps ." in i for i in installs), installs


# --- docker-compose.yml -----------------------------------------------------------------------


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
    return data


def compose_problems(doc: dict[str, Any]) -> list[str]:
    """What makes a compose file unusable: a dependency on an undefined service, an image that is
    not pinned to a version, a bind mount whose source is not in the repository."""
    services: dict[str, Any] = doc["services"]
    problems = []
    for name, svc in services.items():
        depends = svc.get("depends_on", [])
        for dep in depends if isinstance(depends, list) else depends.keys():
            if dep not in services:
                problems.append(f"{name} depends on undefined service {dep}")
        image = svc.get("image")
        if "build" not in svc:
            if not image:
                problems.append(f"{name} has neither image nor build")
            else:
                tag = image.rsplit("/", 1)[-1].partition(":")[2]
                if "@sha256:" not in image and (
                    not tag or tag == "latest" or not any(c.isdigit() for c in tag)
                ):
                    problems.append(f"{name}: image {image} is not pinned to a version")
        for volume in svc.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith(".") and not (REPO_ROOT / source).exists():
                problems.append(f"{name}: mount source {source} does not exist")
    return problems


def dsn_user(env: dict[str, str]) -> str | None:
    return urlsplit(env["CRONWARDEN_DATABASE_URL"]).username


def test_the_compose_file_references_only_defined_services_pinned_images_and_real_files() -> None:
    doc = compose()
    assert compose_problems(doc) == []
    assert {"postgres", "temporal", "temporal-ui", "migrate", "schedules-apply"} <= set(
        doc["services"]
    )
    assert {"worker", "monitor"} <= set(doc["services"])


def test_the_compose_check_catches_a_dangling_dependency_and_an_unpinned_image() -> None:
    doc = compose()
    doc["services"]["worker"]["depends_on"]["tempral"] = {"condition": "service_healthy"}
    doc["services"]["temporal-ui"]["image"] = "temporalio/ui:latest"
    doc["services"]["postgres"]["image"] = "postgres"
    assert compose_problems(doc) == [
        "postgres: image postgres is not pinned to a version",
        "temporal-ui: image temporalio/ui:latest is not pinned to a version",
        "worker depends on undefined service tempral",
    ]


def test_the_compose_worker_scales_and_drains_and_only_migrate_is_the_migrator() -> None:
    services = compose()["services"]
    worker = services["worker"]
    assert "container_name" not in worker and "ports" not in worker  # --scale worker=N
    graceful = float(worker["environment"]["CRONWARDEN_GRACEFUL_SHUTDOWN_SECONDS"])
    assert float(worker["stop_grace_period"].removesuffix("s")) > graceful
    assert worker["command"][:1] == ["worker"] and "--health-port" in worker["command"]
    assert services["monitor"]["command"] == ["monitor", "--metrics-port", "9101"]
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ("worker", "monitor", "schedules-apply"):
        assert services[name]["depends_on"]["migrate"] == {
            "condition": "service_completed_successfully"
        }
        assert dsn_user(services[name]["environment"]) == RUNTIME, name
    assert dsn_user(services["migrate"]["environment"]) == MIGRATOR
    init_scripts = [v.split(":")[0] for v in services["postgres"]["volumes"]]
    assert "./deploy/sql/roles.sql" in init_scripts


def test_the_compose_stack_checks_postgres_over_tcp_retries_one_shots_and_binds_loopback() -> None:
    services = compose()["services"]
    check = " ".join(services["postgres"]["healthcheck"]["test"])
    assert "pg_isready" in check and "-h 127.0.0.1" in check
    long_running = {"worker", "monitor"}
    one_shots = {n for n, svc in services.items() if "build" in svc and n not in long_running}
    assert one_shots == {"migrate", "schedules-apply"}
    one_shots |= {"temporal-schema", "temporal-namespace"}
    awaited = {
        dep
        for svc in services.values()
        for dep, cond in (svc.get("depends_on") or {}).items()
        if cond.get("condition") == "service_completed_successfully"
    }
    assert awaited <= one_shots
    for name in one_shots:
        assert services[name]["restart"] == "on-failure", name
    published = [(n, p) for n, svc in services.items() for p in svc.get("ports", [])]
    assert {n for n, _ in published} == {"temporal-ui", "monitor"}
    for name, port in published:
        assert str(port).startswith("127.0.0.1:"), (name, port)


def test_the_compose_stack_runs_maintained_temporal_images_and_waits_for_the_namespace() -> None:
    services = compose()["services"]
    images = {svc["image"].partition(":")[0] for svc in services.values() if "image" in svc}
    assert "temporalio/auto-setup" not in images  # deprecated upstream
    assert {"temporalio/server", "temporalio/admin-tools"} <= images
    # Nothing of cronwarden's talks to Temporal before the namespace is registered and served:
    # the first boot's race between the worker and the namespace's registration.
    script = (REPO_ROOT / "deploy" / "compose" / "temporal-namespace.sh").read_text()
    assert "namespace create" in script and "workflow list --namespace default" in script
    for name in ("schedules-apply", "worker", "monitor"):
        assert services[name]["depends_on"]["temporal-namespace"] == {
            "condition": "service_completed_successfully"
        }, name
        assert "temporal" not in services[name]["depends_on"], name
    assert services["temporal"]["depends_on"]["temporal-schema"] == {
        "condition": "service_completed_successfully"
    }


# --- Kubernetes -------------------------------------------------------------------------------


def schema_problems(docs: list[dict[str, Any]]) -> list[str]:
    problems = []
    for doc in docs:
        # prometheus-operator's kinds against their schema here; any other kind unknown to
        # kubernetes-validate raises, rather than passing unchecked.
        if doc["apiVersion"].partition("/")[0] == MONITORING_GROUP:
            problems += monitoring_problems(doc)
            continue
        try:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{doc['kind']}/{doc['metadata']['name']}: {exc.message}")
    return problems


WORKLOADS = {"Deployment", "StatefulSet", "Job"}


def by_name(docs: list[dict[str, Any]], kind: str, prefix: str) -> dict[str, Any]:
    [found] = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].startswith(prefix)]
    return found


def pod_specs(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in docs if d["kind"] in WORKLOADS
    }


def containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", []), *pod["containers"]]


def secret_file(pod: dict[str, Any], container: dict[str, Any], name: str) -> str | None:
    """The Secret key a container's `<name>_FILE` reads, through the volume mounted there."""
    path = next(
        (v.get("value") for v in container.get("env", []) if v["name"] == f"{name}_FILE"), None
    )
    if path is None:
        return None
    mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
    volume_name = mounts[str(Path(path).parent)]
    volume = next(v for v in pod["volumes"] if v["name"] == volume_name)
    [item] = [i for i in volume["secret"]["items"] if i["path"] == Path(path).name]
    return f"{volume['secret']['secretName']}/{item['key']}"


@pytest.fixture(scope="module", params=["base", "example"])
def rendered(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return render(KUBERNETES if request.param == "base" else KUBERNETES / "example")


def test_the_manifests_render_and_validate_against_the_kubernetes_schemas(
    rendered: list[dict[str, Any]],
) -> None:
    kinds = sorted(d["kind"] for d in rendered)
    assert {
        "Namespace",
        "ServiceAccount",
        "ConfigMap",
        "Deployment",
        "StatefulSet",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "Job",
    } <= set(kinds)
    assert schema_problems(rendered) == []


def test_a_broken_manifest_fails_rendering_or_validation(tmp_path: Path) -> None:
    base = tmp_path / "base"
    shutil.copytree(KUBERNETES / "base", base)
    worker = base / "worker.yaml"
    worker.write_text(worker.read_text().replace("replicas: 3", "replicas: three"))
    problems = schema_problems(render(base))
    assert len(problems) == 1 and problems[0].startswith("Deployment/cronwarden-worker:")
    (base / "monitor.yaml").unlink()
    result = run_tool("kubectl", "kustomize", str(base))
    assert result.returncode != 0 and "monitor.yaml" in result.stderr


def test_every_pod_runs_locked_down_without_a_service_account_token(
    rendered: list[dict[str, Any]],
) -> None:
    assert (
        by_name(rendered, "ServiceAccount", "cronwarden")["automountServiceAccountToken"] is False
    )
    for name, pod in pod_specs(rendered).items():
        assert pod["automountServiceAccountToken"] is False, name
        assert pod["serviceAccountName"] == "cronwarden", name
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for c in containers(pod):
            assert c["securityContext"] == {
                "allowPrivilegeEscalation": False,
                "readOnlyRootFilesystem": True,
                "capabilities": {"drop": ["ALL"]},
            }, f"{name}/{c['name']}"
            assert {"requests", "limits"} <= set(c["resources"]), f"{name}/{c['name']}"
            mounts = {m["name"] for m in c.get("volumeMounts", [])}
            # The settings check that the TLS files they name exist: mount them wherever read.
            assert "temporal-tls" in mounts, f"{name}/{c['name']}"


def test_secrets_reach_the_pods_as_files_and_the_migrator_dsn_only_the_migrate_step(
    rendered: list[dict[str, Any]],
) -> None:
    seen = {}
    for name, pod in pod_specs(rendered).items():
        assert pod["enableServiceLinks"] is False, name
        for c in containers(pod):
            where = f"{name}/{c['name']}"
            for var in c.get("env", []):
                assert "valueFrom" not in var, f"{where}: {var['name']} from a Secret as env"
            assert all("secretRef" not in s for s in c.get("envFrom", [])), where
            seen[where] = secret_file(pod, c, "CRONWARDEN_DATABASE_URL")
    [job] = [name for name in pod_specs(rendered) if name.startswith("cronwarden-release-")]
    assert seen.pop(f"{job}/migrate") == "cronwarden-database/migrator-url"
    assert set(seen.values()) == {"cronwarden-database/runtime-url"}, seen


def command_line(container: dict[str, Any]) -> str:
    """What a container runs, as one line: its command (the image's entrypoint, `cronwarden`,
    when none is given) and its args."""
    return " ".join(container.get("command", ["cronwarden"]) + container.get("args", []))


def test_the_release_job_migrates_and_applies_and_no_long_running_pod_does_either(
    rendered: list[dict[str, Any]],
) -> None:
    pods = pod_specs(rendered)
    [job] = [name for name in pods if name.startswith("cronwarden-release-")]
    assert set(pods) == {"cronwarden-worker", "cronwarden-monitor", job}
    # The release's Job migrates, then applies: once per release.
    [migrate] = pods[job]["initContainers"]
    assert migrate["args"] == ["migrate"]
    [apply] = pods[job]["containers"]
    assert apply["args"][:2] == ["schedules", "apply"]
    assert "--force" not in apply["args"]
    # A new worker polls only once the migration landed.
    [wait] = pods["cronwarden-worker"]["initContainers"]
    assert wait["args"] == ["migrate", "--check", "--wait", "10m"]
    # No pod of the worker or the monitor migrates or applies: a pod recreated later (a drain,
    # an old pod of a rollout) would apply its file again, and a monitor that must migrate
    # before it runs cannot start while Postgres is down. The monitor's wait for the migration
    # lets it start whatever the check says (tests/integration/test_monitor_start.py runs it).
    for name in ("cronwarden-worker", "cronwarden-monitor"):
        for c in containers(pods[name]):
            line = command_line(c)
            assert "schedules apply" not in line, f"{name}/{c['name']}"
            assert re.search(r"cronwarden migrate(?! --check)", line) is None, f"{name}/{c['name']}"
    [monitor_wait] = pods["cronwarden-monitor"]["initContainers"]
    assert "cronwarden migrate --check --wait 10m" in command_line(monitor_wait)
    assert "exit 0" in command_line(monitor_wait)


def configmaps_used(pod: dict[str, Any]) -> set[str]:
    used = {
        source["configMapRef"]["name"]
        for c in containers(pod)
        for source in c.get("envFrom", [])
        if "configMapRef" in source
    }
    return used | {v["configMap"]["name"] for v in pod.get("volumes", []) if "configMap" in v}


def test_the_configmap_names_carry_a_content_hash_so_a_change_rolls_the_pods(
    tmp_path: Path,
) -> None:
    base = tmp_path / "base"
    shutil.copytree(KUBERNETES / "base", base)
    before = render(base)
    settings = by_name(before, "ConfigMap", "cronwarden-settings")["metadata"]["name"]
    assert settings != "cronwarden-settings"  # a hash suffix
    worker_before = pod_specs(before)["cronwarden-worker"]
    assert settings in configmaps_used(worker_before)
    rendered_maps = {d["metadata"]["name"] for d in before if d["kind"] == "ConfigMap"}
    for name, pod in pod_specs(before).items():
        assert configmaps_used(pod) <= rendered_maps, name
    env = base / "settings.env"
    runs = "CRONWARDEN_MAX_CONCURRENT_RUNS="
    changed = env.read_text().replace(f"{runs}10", f"{runs}7")
    assert changed != env.read_text()
    env.write_text(changed)
    after = render(base)
    renamed = by_name(after, "ConfigMap", "cronwarden-settings")["metadata"]["name"]
    assert renamed != settings
    # A new name in the pod template is a new template: the Deployments roll.
    for deployment in ("cronwarden-worker", "cronwarden-monitor"):
        assert renamed in configmaps_used(pod_specs(after)[deployment]), deployment
        assert settings not in configmaps_used(pod_specs(after)[deployment]), deployment


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return copy_manifests(tmp_path)


NIGHTLY = "schedules:\n  - {id: nightly, job: reconcile, cron: '0 2 * * *'}\n"


def test_a_second_release_changes_only_fields_kubectl_apply_may_change(tree: Path) -> None:
    first = render_release(tree, tag="1.0.0", schedules="schedules: []\n")
    second = render_release(tree, tag="1.1.0", schedules=NIGHTLY)
    # The one object with an immutable pod template, the release's Job, is a new object under
    # a new name: `kubectl apply -k` of the second release needs no delete first.
    for docs in (first, second):
        assert {d["kind"] for d in docs}.isdisjoint({"CronJob", "Pod"})
    assert release_job(first)["metadata"]["name"] == "cronwarden-release-1.0.0"
    assert release_job(second)["metadata"]["name"] == "cronwarden-release-1.1.0"
    # The new image changes the monitor's template (its rollout migrates) and the workers'
    # (their new pods wait for that migration).
    for deployment in ("cronwarden-monitor", "cronwarden-worker"):
        before = workload(first, deployment)["spec"]["template"]
        after = workload(second, deployment)["spec"]["template"]
        assert before != after, deployment
    # The monitor's volume claims cannot change once created: a release keeps them as they are.
    assert (
        workload(first, "cronwarden-monitor")["spec"]["volumeClaimTemplates"]
        == workload(second, "cronwarden-monitor")["spec"]["volumeClaimTemplates"]
    )
    for pod in pod_specs(second).values():
        assert {c["image"] for c in containers(pod)} == {"cronwarden:1.1.0"}
    # The release's Job applies the release's file; no worker mounts it.
    applied = by_name(second, "ConfigMap", "cronwarden-schedules")["metadata"]["name"]
    assert configmaps_used(release_job(second)["spec"]["template"]["spec"]) >= {applied}
    assert applied not in configmaps_used(pod_specs(second)["cronwarden-worker"])
    assert applied != by_name(first, "ConfigMap", "cronwarden-schedules")["metadata"]["name"]
    # Old workers stop only once a new one is ready, so a release that cannot migrate leaves
    # the old workers running. The monitors are replaced one at a time, the next only once the
    # new one is ready: one of the two always runs, the old one if the new one cannot start.
    strategy = by_name(second, "Deployment", "cronwarden-worker")["spec"]["strategy"]
    assert strategy["rollingUpdate"]["maxUnavailable"] == 0
    monitors = by_name(second, "StatefulSet", "cronwarden-monitor")["spec"]
    assert monitors["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 1},
    }
    assert monitors["replicas"] == 2


def workload(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    [found] = [d for d in docs if d["kind"] in WORKLOADS and d["metadata"]["name"] == name]
    return found


def test_a_drain_evicts_one_worker_at_a_time_and_never_the_last_monitor(
    rendered: list[dict[str, Any]],
) -> None:
    workers = by_name(rendered, "PodDisruptionBudget", "cronwarden-worker")["spec"]
    assert workers["maxUnavailable"] == 1
    # A worker that is not ready (Postgres or Temporal away) runs nothing: evicting it costs
    # nothing, and blocking the drain would hold a node for the length of the outage.
    assert workers["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    # A monitor that is not ready (Postgres away) is the one thing that pages that outage: one
    # is evicted only while another is ready, so a drain during the outage waits.
    monitors = by_name(rendered, "PodDisruptionBudget", "cronwarden-monitor")["spec"]
    assert monitors["minAvailable"] == 1 and "maxUnavailable" not in monitors
    assert monitors.get("unhealthyPodEvictionPolicy", "IfHealthyBudget") == "IfHealthyBudget"
    for name, budget in (("cronwarden-worker", workers), ("cronwarden-monitor", monitors)):
        labels = workload(rendered, name)["spec"]["template"]["metadata"]["labels"]
        assert budget["selector"]["matchLabels"].items() <= labels.items(), name


def test_the_two_monitors_never_share_a_node(rendered: list[dict[str, Any]]) -> None:
    template = workload(rendered, "cronwarden-monitor")["spec"]["template"]
    [spread] = template["spec"]["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["maxSkew"] == 1
    # Honoured, not preferred: ScheduleAnyway puts both on one node when the scheduler likes
    # that node better, and that node's drain or failure takes both.
    assert spread["whenUnsatisfiable"] == "DoNotSchedule"
    assert spread["labelSelector"]["matchLabels"].items() <= template["metadata"]["labels"].items()


def test_the_monitor_keeps_its_database_alert_state_and_its_name_when_its_pod_is_recreated(
    rendered: list[dict[str, Any]],
) -> None:
    """The "cannot reach the database" alert has no database to live in: its state is a file
    under TMPDIR, and its page's dedup key is the host name. Both must outlive the pod, or an
    alert opened before a drain is never resolved."""
    # Where the monitor keeps that state: under the temporary directory, named by the database.
    dsn = "postgresql://cronwarden_runtime:secret@db:5432/app"
    assert db_alert.default_state_file(dsn).parent == Path(tempfile.gettempdir())
    monitors = workload(rendered, "cronwarden-monitor")
    # A StatefulSet's pod keeps its name (the host name) and its claims when it is recreated;
    # a Deployment's replacement gets a new name and fresh volumes.
    assert monitors["kind"] == "StatefulSet"
    assert monitors["spec"]["podManagementPolicy"] == "Parallel"  # both start, ready or not
    claims = {c["metadata"]["name"]: c["spec"] for c in monitors["spec"]["volumeClaimTemplates"]}
    [monitor] = monitors["spec"]["template"]["spec"]["containers"]
    tmpdir = {e["name"]: e.get("value") for e in monitor["env"]}["TMPDIR"]
    mounts = {m["mountPath"]: m["name"] for m in monitor["volumeMounts"]}
    assert tmpdir in mounts and mounts[tmpdir] in claims, (tmpdir, mounts)
    assert claims[mounts[tmpdir]]["accessModes"] == ["ReadWriteOnce"]
    # Kept when the StatefulSet is scaled down or deleted: a monitor brought back finds it.
    assert monitors["spec"]["persistentVolumeClaimRetentionPolicy"] == {
        "whenDeleted": "Retain",
        "whenScaled": "Retain",
    }


def test_everything_lives_in_a_namespace_that_enforces_the_restricted_level(
    rendered: list[dict[str, Any]],
) -> None:
    [namespace] = [d for d in rendered if d["kind"] == "Namespace"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    for doc in rendered:
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == namespace["metadata"]["name"], doc["kind"]


def test_the_network_policy_opens_only_the_probe_ports_and_the_servers_ports(
    rendered: list[dict[str, Any]],
) -> None:
    policy = by_name(rendered, "NetworkPolicy", "cronwarden")["spec"]
    assert policy["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "cronwarden"}
    assert set(policy["policyTypes"]) == {"Ingress", "Egress"}
    [ingress] = policy["ingress"]
    assert {p["port"] for p in ingress["ports"]} == {8080, 9101}
    egress = {(p["port"], p["protocol"]) for rule in policy["egress"] for p in rule["ports"]}
    assert egress == {(53, "UDP"), (53, "TCP"), (7233, "TCP"), (5432, "TCP"), (443, "TCP")}
    pods = [
        d["spec"]["template"]["metadata"]["labels"]
        for d in rendered
        if d["kind"] in {"Deployment", "StatefulSet"}
    ]
    assert all(policy["podSelector"]["matchLabels"].items() <= labels.items() for labels in pods)


def test_the_worker_probes_its_health_port_and_outlives_its_graceful_timeout(
    rendered: list[dict[str, Any]],
) -> None:
    deployment = by_name(rendered, "Deployment", "cronwarden-worker")
    assert deployment["spec"]["replicas"] >= 3
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pod = deployment["spec"]["template"]["spec"]
    [worker] = pod["containers"]
    assert worker["args"] == ["worker"]
    port = {p["name"]: p["containerPort"] for p in worker["ports"]}["health"]
    assert {"name": "CRONWARDEN_HEALTH_PORT", "value": str(port)} in worker["env"]
    assert worker["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert worker["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert drain_problems(rendered) == []
    assert {c["topologyKey"] for c in pod["topologySpreadConstraints"]} == {
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
    }
    assert pod["initContainers"][0]["args"][:2] == ["migrate", "--check"]
    budget = by_name(rendered, "PodDisruptionBudget", "cronwarden-worker")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()


# What a worker needs after its graceful time before SIGKILL: the runs still going are cancelled,
# roll back and release their leases, and the pool closes.
DRAIN_MARGIN_SECONDS = 30


def longest_job_timeout(schedule_file: str) -> timedelta:
    """The longest run a worker may have to drain: the longest `timeout` of the file; for a file
    with no entry, the default, which the first entry added without one gets."""
    entries = (yaml.safe_load(schedule_file) or {}).get("schedules") or []
    default: timedelta = ScheduleDefinition.model_fields["timeout"].default
    return max((ScheduleDefinition.model_validate(e).timeout for e in entries), default=default)


def drain_problems(docs: list[dict[str, Any]]) -> list[str]:
    """Where a rendered release would cut runs off on a rollout, drain or scale-down: a graceful
    shutdown shorter than the longest job timeout (the run is cancelled, which spends one of its
    attempts), or a grace period that does not outlive the graceful shutdown (SIGKILL, and the
    run's lease held until its TTL)."""
    settings = by_name(docs, "ConfigMap", "cronwarden-settings")["data"]
    graceful = float(
        settings.get(
            "CRONWARDEN_GRACEFUL_SHUTDOWN_SECONDS",
            Settings.model_fields["graceful_shutdown_seconds"].default,
        )
    )
    grace = workload(docs, "cronwarden-worker")["spec"]["template"]["spec"][
        "terminationGracePeriodSeconds"
    ]
    schedules = by_name(docs, "ConfigMap", "cronwarden-schedules")["data"]["schedules.yaml"]
    longest = longest_job_timeout(schedules).total_seconds()
    problems = []
    if graceful < longest:
        problems.append(f"graceful shutdown {graceful:g} s < the longest job timeout {longest:g} s")
    if grace < graceful + DRAIN_MARGIN_SECONDS:
        problems.append(
            f"terminationGracePeriodSeconds {grace} < graceful shutdown {graceful:g} s "
            f"+ {DRAIN_MARGIN_SECONDS} s"
        )
    return problems


def overlays() -> list[Path]:
    """Every directory under deploy/kubernetes that renders on its own (not a component)."""
    found = []
    for kustomization in sorted(KUBERNETES.rglob("kustomization.yaml")):
        if yaml.safe_load(kustomization.read_text())["kind"] == "Kustomization":
            found.append(kustomization.parent)
    return found


def test_every_overlay_drains_its_workers_for_longer_than_its_longest_job_timeout() -> None:
    assert {KUBERNETES, KUBERNETES / "base", KUBERNETES / "example"} <= set(overlays())
    for overlay in overlays():
        assert drain_problems(render(overlay)) == [], overlay


def test_the_drain_check_catches_a_job_timeout_or_a_graceful_shutdown_raised_alone(
    tree: Path,
) -> None:
    hour = "schedules:\n  - {id: hourly, job: reconcile, cron: '0 * * * *', timeout: 40m}\n"
    assert drain_problems(render_release(tree, tag="1.0.0", schedules=hour)) == [
        "graceful shutdown 900 s < the longest job timeout 2400 s"
    ]
    settings = tree / "base" / "settings.env"
    raised = settings.read_text().replace("SHUTDOWN_SECONDS=900", "SHUTDOWN_SECONDS=2400")
    settings.write_text(raised)
    assert drain_problems(render_release(tree, tag="1.0.1", schedules=hour)) == [
        "terminationGracePeriodSeconds 930 < graceful shutdown 2400 s + 30 s"
    ]
    worker = tree / "base" / "worker.yaml"
    worker.write_text(
        worker.read_text().replace("GracePeriodSeconds: 930", "GracePeriodSeconds: 2430")
    )
    assert drain_problems(render_release(tree, tag="1.0.2", schedules=hour)) == []


def test_the_monitor_runs_two_replicas_scraped_on_its_metrics_port(
    rendered: list[dict[str, Any]],
) -> None:
    deployment = by_name(rendered, "StatefulSet", "cronwarden-monitor")
    assert deployment["spec"]["replicas"] == 2
    template = deployment["spec"]["template"]
    [monitor] = template["spec"]["containers"]
    assert monitor["args"] == ["monitor", "--metrics-port", "9101"]
    # Liveness never depends on the database; readiness does.
    assert monitor["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert monitor["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    annotations = template["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == "9101"
    assert annotations["prometheus.io/path"] == "/metrics"


def test_the_workers_are_scraped_on_their_health_port(rendered: list[dict[str, Any]]) -> None:
    template = by_name(rendered, "Deployment", "cronwarden-worker")["spec"]["template"]
    [worker] = template["spec"]["containers"]
    health = {p["name"]: p["containerPort"] for p in worker["ports"]}["health"]
    env = {e["name"]: e.get("value") for e in worker.get("env", [])}
    assert env["CRONWARDEN_HEALTH_PORT"] == str(health)
    annotations = template["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(health)
    assert annotations["prometheus.io/path"] == "/metrics"


def test_a_rollback_is_a_release_of_its_own_that_forces_the_previous_file(tree: Path) -> None:
    previous = render_release(tree, tag="1.0.0", schedules="schedules: []\n")
    render_release(tree, tag="1.1.0", schedules=NIGHTLY)
    rolled_back = render_release(
        tree, tag="1.0.0-rollback1", schedules="schedules: []\n", rollback=True
    )
    job = release_job(rolled_back)
    # A new Job (the previous release's may still exist, and would not run again) ...
    assert job["metadata"]["name"] == "cronwarden-release-1.0.0-rollback1"
    # ... applying the previous release's file, forced past the newer one applied since, and
    # deleting what only the newer one listed.
    [apply] = job["spec"]["template"]["spec"]["containers"]
    [before] = release_job(previous)["spec"]["template"]["spec"]["containers"]
    assert apply["args"] == [*before["args"], "--force", "--prune"]
    assert "--prune" not in before["args"]
    schedules = by_name(rolled_back, "ConfigMap", "cronwarden-schedules")["metadata"]["name"]
    assert schedules == by_name(previous, "ConfigMap", "cronwarden-schedules")["metadata"]["name"]


def test_the_release_job_fails_at_once_on_a_refusal_and_retries_anything_else(
    rendered: list[dict[str, Any]],
) -> None:
    job = release_job(rendered)
    spec = job["spec"]
    assert spec["template"]["spec"]["restartPolicy"] == "Never"  # podFailurePolicy needs it
    [rule] = spec["podFailurePolicy"]["rules"]
    # Exit 2 is the CLI's "invalid input": a superseded file, a bad schedule file. Retrying
    # cannot change the answer.
    assert rule["action"] == "FailJob"
    assert rule["onExitCodes"] == {
        "containerName": "schedules-apply",
        "operator": "In",
        "values": [2],
    }
    assert spec["backoffLimit"] >= 1
    # A name kubectl accepts for a Job whose pods carry it as a label value.
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", job["metadata"]["name"])
    assert len(job["metadata"]["name"]) <= 63


def test_the_release_job_applies_the_mounted_schedule_file(
    rendered: list[dict[str, Any]],
) -> None:
    pod = release_job(rendered)["spec"]["template"]["spec"]
    [apply] = pod["containers"]
    mount = {m["name"]: m["mountPath"] for m in apply["volumeMounts"]}["schedules"]
    assert Path(apply["args"][2]).parent == Path(mount)
    schedules = by_name(rendered, "ConfigMap", "cronwarden-schedules")
    volume = next(v for v in pod["volumes"] if v["name"] == "schedules")
    assert volume["configMap"]["name"] == schedules["metadata"]["name"]
    # The file applied is a valid schedule file, with no demo job in the example.
    parse_schedule_text(schedules["data"][Path(apply["args"][2]).name], import_job_modules([]))


def test_the_build_backend_is_pinned() -> None:
    build = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["build-system"]
    for requirement in map(Requirement, build["requires"]):
        [spec] = requirement.specifier
        assert spec.operator == "==", requirement


# --- checkov ----------------------------------------------------------------------------------

CHECKOV = CHECKOV_VENV / "bin" / "checkov"
CHECKOV_SKIPS = REPO_ROOT / "deploy" / "checkov-skips.yaml"


def checkov_failures(path: Path, framework: str) -> set[str]:
    """The ids of the checks checkov fails on `path`, offline."""
    assert CHECKOV.exists(), f"{CHECKOV} is missing: rebuild the virtualenv with make"
    result = subprocess.run(
        [str(CHECKOV), "-f", str(path), "--framework", framework, "-o", "json", "--skip-download"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode in (0, 1), result.stderr  # 1: some check failed
    reports = json.loads(result.stdout)
    failed = set()
    for report in reports if isinstance(reports, list) else [reports]:
        for check in report.get("results", {}).get("failed_checks", []):
            failed.add(check["check_id"])
    return failed


def rendered_to(tmp_path: Path, source: Path, name: str) -> Path:
    out = tmp_path / f"{name}.yaml"
    out.write_text(yaml.safe_dump_all(render(source)))
    return out


def test_checkov_fails_only_the_checks_listed_with_their_reason(tmp_path: Path) -> None:
    skips: dict[str, str] = yaml.safe_load(CHECKOV_SKIPS.read_text())
    for check, reason in skips.items():
        assert len(reason.split()) >= 10, f"{check} is listed without a real reason"
    failed = {
        target: checkov_failures(path, framework)
        for target, path, framework in (
            ("base", rendered_to(tmp_path, KUBERNETES, "base"), "kubernetes"),
            ("example", rendered_to(tmp_path, KUBERNETES / "example", "example"), "kubernetes"),
            ("Dockerfile", REPO_ROOT / "Dockerfile", "dockerfile"),
        )
    }
    unlisted = {t: sorted(ids - set(skips)) for t, ids in failed.items() if ids - set(skips)}
    assert unlisted == {}, "checkov failures missing from deploy/checkov-skips.yaml"
    # A listed check that no longer fails anywhere is stale: drop it from the file.
    assert set(skips) <= set().union(*failed.values())


def test_checkov_catches_a_careless_manifest(tmp_path: Path) -> None:
    careless = rendered_to(tmp_path, KUBERNETES, "base")
    text = careless.read_text().replace("allowPrivilegeEscalation: false", "privileged: true")
    careless.write_text(text)
    assert {"CKV_K8S_16", "CKV_K8S_20"} <= checkov_failures(careless, "kubernetes")
