"""The deployment manifests, rendered and checked offline: kustomize through the real kubectl, and
a schema for the prometheus-operator kinds (PodMonitor, PrometheusRule), which the Kubernetes
schemas that kubernetes-validate ships do not know.

The schemas below are the part of prometheus-operator's CRDs (monitoring.coreos.com/v1) that
cronwarden's manifests use, with the CRDs' own patterns and no other field allowed: a misspelled
or misplaced field would otherwise be dropped by the API server, and a PodMonitor that silently
scrapes nothing looks exactly like a healthy one until the day its alert should have fired.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import yaml

BIN = Path(sys.executable).parent
MONITORING_GROUP = "monitoring.coreos.com"


def run_tool(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """A tool installed beside the virtualenv's Python (kubectl, hadolint)."""
    return subprocess.run(
        [str(BIN / name), *args], capture_output=True, text=True, timeout=120, check=False
    )


def render(path: Path) -> list[dict[str, Any]]:
    result = run_tool("kubectl", "kustomize", str(path))
    assert result.returncode == 0, f"kustomize failed on {path}: {result.stderr}"
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def _object(properties: dict[str, Any], *, required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


_STRING = {"type": "string", "minLength": 1}
_STRINGS = {"type": "array", "items": _STRING}
_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}
# prometheus-operator's Duration.
_DURATION = {
    "type": "string",
    "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?"
    r"(([0-9]+)s)?(([0-9]+)ms)?)$",
}
_METADATA = _object(
    {"name": _STRING, "namespace": _STRING, "labels": _LABELS, "annotations": _LABELS},
    required=("name",),
)
_LABEL_SELECTOR = _object(
    {
        "matchLabels": _LABELS,
        "matchExpressions": {
            "type": "array",
            "items": _object(
                {
                    "key": _STRING,
                    "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                    "values": _STRINGS,
                },
                required=("key", "operator"),
            ),
        },
    }
)
_POD_MONITOR_SPEC = _object(
    {
        "selector": _LABEL_SELECTOR,
        "namespaceSelector": _object({"any": {"type": "boolean"}, "matchNames": _STRINGS}),
        "jobLabel": _STRING,
        "podTargetLabels": _STRINGS,
        "podMetricsEndpoints": {
            "type": "array",
            "minItems": 1,
            "items": _object(
                {
                    "port": _STRING,
                    "path": {"type": "string", "pattern": "^/"},
                    "scheme": {"enum": ["http", "https"]},
                    "interval": _DURATION,
                    "scrapeTimeout": _DURATION,
                    "honorLabels": {"type": "boolean"},
                },
                required=("port",),
            ),
        },
    },
    required=("selector", "podMetricsEndpoints"),
)
_RULE = {
    **_object(
        {
            "alert": _STRING,
            "record": _STRING,
            "expr": {"type": ["string", "integer"]},
            "for": _DURATION,
            "keep_firing_for": _DURATION,
            "labels": _LABELS,
            "annotations": _LABELS,
        },
        required=("expr",),
    ),
    "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
}
_PROMETHEUS_RULE_SPEC = _object(
    {
        "groups": {
            "type": "array",
            "minItems": 1,
            "items": _object(
                {
                    "name": _STRING,
                    "interval": _DURATION,
                    "rules": {"type": "array", "minItems": 1, "items": _RULE},
                },
                required=("name", "rules"),
            ),
        }
    },
    required=("groups",),
)
MONITORING_SCHEMAS: dict[str, dict[str, Any]] = {
    kind: _object(
        {
            "apiVersion": {"const": f"{MONITORING_GROUP}/v1"},
            "kind": {"const": kind},
            "metadata": _METADATA,
            "spec": spec,
        },
        required=("apiVersion", "kind", "metadata", "spec"),
    )
    for kind, spec in (("PodMonitor", _POD_MONITOR_SPEC), ("PrometheusRule", _PROMETHEUS_RULE_SPEC))
}


def monitoring_problems(doc: dict[str, Any]) -> list[str]:
    """What breaks a monitoring.coreos.com object against the schema of its kind; an unknown
    kind is a problem itself, never skipped."""
    where = f"{doc['kind']}/{doc['metadata']['name']}"
    schema = MONITORING_SCHEMAS.get(doc["kind"])
    if schema is None:
        return [f"{where}: no schema for this kind"]
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(doc), key=lambda e: str(e.json_path))
    return [f"{where}: {error.json_path}: {error.message}" for error in errors]
