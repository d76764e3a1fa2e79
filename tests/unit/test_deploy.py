"""The deployment files, checked offline: there is no Docker engine and no cluster here.

The Dockerfile is linted by hadolint, docker-compose.yml is parsed and cross-checked, and the
Kubernetes manifests are rendered by the real kubectl (its built-in kustomize) and validated
against Kubernetes' own schemas. Each check is also shown to fail on a broken input.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from activities.jobs import import_job_modules
from schedules.model import parse_schedule_text

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
KUBERNETES = REPO_ROOT / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.37.0"  # the newest schema set kubernetes-validate ships
MIGRATOR = "cronwarden_migrator"
RUNTIME = "cronwarden_runtime"


def run_tool(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / name), *args], capture_output=True, text=True, timeout=120, check=False
    )


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


def lock_pins(text: str) -> dict[str, str]:
    """requirements.lock as {canonical name: version}; every line must be `name==version`."""
    pins: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        req = Requirement(line)
        [spec] = req.specifier
        assert spec.operator == "==" and not req.extras and req.marker is None, line
        pins[canonicalize_name(req.name)] = spec.version
    return pins


def runtime_closure(requirements: list[str]) -> set[str]:
    """The installed distributions `requirements` pull in, markers evaluated, no extras."""
    seen: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in seen or (req.marker is not None and not req.marker.evaluate({"extra": ""})):
            continue
        seen.add(name)
        todo.extend(Requirement(r) for r in metadata.requires(name) or [])
    return seen


def test_the_lock_pins_every_runtime_dependency_at_the_version_the_tests_ran_with() -> None:
    pins = lock_pins((REPO_ROOT / "requirements.lock").read_text())
    declared = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for dependency in map(Requirement, declared):
        name = canonicalize_name(dependency.name)
        assert name in pins, f"{name} is not pinned in requirements.lock"
        assert dependency.specifier.contains(pins[name]), (name, pins[name])
    # Complete and nothing more: exactly what `pip install .` pulls in, at the tested versions.
    assert set(pins) == runtime_closure(declared)
    for pinned, version in pins.items():
        assert metadata.version(pinned) == version, pinned
    steps = dockerfile_instructions(REPO_ROOT / "Dockerfile")
    installs = [arg for op, arg in steps if op == "RUN" and "pip install" in arg]
    assert any("-r requirements.lock" in i and "--no-deps ." in i for i in installs), installs


def test_the_lock_refuses_an_open_range() -> None:
    with pytest.raises(AssertionError):
        lock_pins("temporalio>=1.35\n")


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


# --- Kubernetes -------------------------------------------------------------------------------


def render(path: Path) -> list[dict[str, Any]]:
    result = run_tool("kubectl", "kustomize", str(path))
    assert result.returncode == 0, f"kustomize failed on {path}: {result.stderr}"
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def schema_problems(docs: list[dict[str, Any]]) -> list[str]:
    problems = []
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{doc['kind']}/{doc['metadata']['name']}: {exc.message}")
    return problems


def by_name(docs: list[dict[str, Any]], kind: str, prefix: str) -> dict[str, Any]:
    [found] = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].startswith(prefix)]
    return found


def pod_specs(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        d["metadata"]["name"]: d["spec"]["template"]["spec"]
        for d in docs
        if d["kind"] in {"Deployment", "Job"}
    }


def containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", []), *pod["containers"]]


def env_secret_key(container: dict[str, Any], name: str) -> str | None:
    for var in container.get("env", []):
        if var["name"] == name:
            return str(var["valueFrom"]["secretKeyRef"]["key"])
    return None


@pytest.fixture(scope="module", params=["base", "example"])
def rendered(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return render(KUBERNETES if request.param == "base" else KUBERNETES / "example")


def test_the_manifests_render_and_validate_against_the_kubernetes_schemas(
    rendered: list[dict[str, Any]],
) -> None:
    kinds = sorted(d["kind"] for d in rendered)
    assert {"ServiceAccount", "ConfigMap", "Deployment", "Job", "PodDisruptionBudget"} <= set(kinds)
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


def test_only_the_migrate_job_gets_the_migrator_dsn(rendered: list[dict[str, Any]]) -> None:
    for name, pod in pod_specs(rendered).items():
        for c in containers(pod):
            key = env_secret_key(c, "CRONWARDEN_DATABASE_URL")
            expected = "migrator-url" if name == "cronwarden-migrate" else "runtime-url"
            assert key == expected, f"{name}/{c['name']}"


def test_every_pod_that_connects_to_the_database_first_waits_for_the_migrations(
    rendered: list[dict[str, Any]],
) -> None:
    connecting = {
        name
        for name, pod in pod_specs(rendered).items()
        if any(env_secret_key(c, "CRONWARDEN_DATABASE_URL") for c in pod["containers"])
    }
    assert connecting == {
        "cronwarden-migrate",
        "cronwarden-worker",
        "cronwarden-monitor",
        "cronwarden-schedules-apply",
    }
    for name in connecting - {"cronwarden-migrate"}:
        [first, *_] = pod_specs(rendered)[name].get("initContainers") or [{"args": []}]
        assert first["args"][:3] == ["migrate", "--check", "--wait"], name
        assert float(first["args"][3]) > 0, name
        assert env_secret_key(first, "CRONWARDEN_DATABASE_URL") == "runtime-url", name


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


def test_finished_jobs_expire_and_a_drain_evicts_one_worker_at_a_time(
    rendered: list[dict[str, Any]],
) -> None:
    for job in ("cronwarden-migrate", "cronwarden-schedules-apply"):
        assert by_name(rendered, "Job", job)["spec"]["ttlSecondsAfterFinished"] == 600, job
    budget = by_name(rendered, "PodDisruptionBudget", "cronwarden-worker")
    assert budget["spec"]["maxUnavailable"] == 1


def test_the_example_namespace_enforces_the_restricted_pod_security_level() -> None:
    [namespace] = [d for d in render(KUBERNETES / "example") if d["kind"] == "Namespace"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


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
    settings = by_name(rendered, "ConfigMap", "cronwarden-settings")["data"]
    graceful = float(settings["CRONWARDEN_GRACEFUL_SHUTDOWN_SECONDS"])
    assert pod["terminationGracePeriodSeconds"] > graceful
    assert {c["topologyKey"] for c in pod["topologySpreadConstraints"]} == {
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
    }
    [wait] = pod["initContainers"]
    assert wait["args"][:2] == ["migrate", "--check"]
    budget = by_name(rendered, "PodDisruptionBudget", "cronwarden-worker")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_the_monitor_runs_two_replicas_scraped_on_its_metrics_port(
    rendered: list[dict[str, Any]],
) -> None:
    deployment = by_name(rendered, "Deployment", "cronwarden-monitor")
    assert deployment["spec"]["replicas"] == 2
    template = deployment["spec"]["template"]
    [monitor] = template["spec"]["containers"]
    assert monitor["args"] == ["monitor", "--metrics-port", "9101"]
    annotations = template["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == "9101"
    assert annotations["prometheus.io/path"] == "/metrics"


def test_the_schedule_apply_job_applies_the_mounted_schedule_file(
    rendered: list[dict[str, Any]],
) -> None:
    job = by_name(rendered, "Job", "cronwarden-schedules-apply")["spec"]["template"]["spec"]
    [apply] = job["containers"]
    assert apply["args"][:2] == ["schedules", "apply"]
    mount = {m["name"]: m["mountPath"] for m in apply["volumeMounts"]}["schedules"]
    assert Path(apply["args"][2]).parent == Path(mount)
    schedules = by_name(rendered, "ConfigMap", "cronwarden-schedules")
    volume = next(v for v in job["volumes"] if v["name"] == "schedules")
    assert volume["configMap"]["name"] == schedules["metadata"]["name"]
    settings = by_name(rendered, "ConfigMap", "cronwarden-settings")["data"]
    registry = import_job_modules(settings["CRONWARDEN_JOBS"].split(","))
    # The file the Job will apply is a valid schedule file for the image's jobs.
    parse_schedule_text(schedules["data"][Path(apply["args"][2]).name], registry)
