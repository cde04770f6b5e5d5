"""The Kubernetes install as the docs write it: the shell commands of helm/loopwire/README.md
and docs/deployment.md, taken from the pages themselves, create the namespace before the
Secrets in it, render and validate with exactly the values they pass, and create every
Secret key a pod of that install reads."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from tests.paths import REPO
from tests.unit.deploy.chart import CHART, CRD_GROUP, KUBE_VERSION, of_kind

pytestmark = pytest.mark.unit

PAGES = [REPO / "helm" / "loopwire" / "README.md", REPO / "docs" / "deployment.md"]
FENCE = re.compile(r"^```(?:sh|bash|shell)\n(.*?)^```", re.M | re.S)


def commands(page: Path) -> list[list[str]]:
    """Every shell command of the page's sh blocks, in order, continuations joined and
    comment lines (the pages' alternatives, `#   --set ...`) left out."""
    out: list[list[str]] = []
    for block in FENCE.findall(page.read_text()):
        lines = [ln for ln in block.splitlines() if not ln.lstrip().startswith("#")]
        joined = re.sub(r"\\\n\s*", " ", "\n".join(lines))
        for line in joined.splitlines():
            line = line.split(" #", 1)[0].strip()
            if line:
                # a pipeline's first command is what creates (`kubectl create ns ... | apply`)
                out.append(shlex.split(line.split(" | ", 1)[0], posix=True))
    return out


@dataclass
class Install:
    namespaces: list[str] = field(default_factory=list)
    secrets: dict[tuple[str, str], set[str]] = field(default_factory=dict)  # (ns, name) -> keys
    releases: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)  # name, ns, values
    late_secrets: list[str] = field(default_factory=list)  # made before their namespace


def namespace_of(argv: list[str]) -> str:
    for flag in ("-n", "--namespace"):
        if flag in argv:
            return argv[argv.index(flag) + 1]
    return "default"


def set_path(values: dict[str, Any], dotted: str, raw: str) -> None:
    value: Any = {"true": True, "false": False}.get(raw, int(raw) if raw.isdigit() else raw)
    *parents, leaf = dotted.split(".")
    node = values
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value


def read_install(page: Path) -> Install:
    install = Install()
    for argv in commands(page):
        if argv[:1] == ["kubectl"] and "create" in argv:
            what = argv[argv.index("create") + 1:]
            if what[:1] == ["namespace"]:
                install.namespaces.append(what[1])
            elif what[:2] == ["secret", "generic"]:
                ns = namespace_of(argv)
                if ns not in install.namespaces:
                    install.late_secrets.append(f"{ns}/{what[2]}")
                keys: set[str] = set()
                for arg in argv:
                    if arg.startswith("--from-literal="):
                        keys.add(arg.split("=", 2)[1])
                    elif arg.startswith("--from-file="):
                        spec = arg.split("=", 1)[1]
                        keys.add(spec.split("=", 1)[0] if "=" in spec else Path(spec).name)
                install.secrets[(ns, what[2])] = keys
        elif argv[:3] == ["helm", "upgrade", "--install"] and argv[4] == "./helm/loopwire":
            values: dict[str, Any] = {}
            ns = namespace_of(argv)
            if "--create-namespace" in argv:
                install.namespaces.append(ns)
            for i, arg in enumerate(argv):
                if arg == "-f":
                    values = merge(values, yaml.safe_load((REPO / argv[i + 1]).read_text()))
                elif arg == "--set":
                    dotted, raw = argv[i + 1].split("=", 1)
                    set_path(values, dotted, raw)
            install.releases.append((argv[3], ns, values))
    return install


def merge(base: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in more.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def secret_keys_read(deployment: dict[str, Any]) -> set[tuple[str, str]]:
    """(Secret name, key) of every env var and volume item the pod takes from a Secret."""
    pod = deployment["spec"]["template"]["spec"]
    refs = {(e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
            for c in pod["containers"] for e in c.get("env", [])
            if "secretKeyRef" in e.get("valueFrom", {})}
    for volume in pod.get("volumes", []):
        if "secret" in volume:
            for item in volume["secret"].get("items", []):
                refs.add((volume["secret"]["secretName"], item["key"]))
    return refs


def rendered(chart: Any, values: dict[str, Any], *, name: str, namespace: str) -> list[dict[str, Any]]:
    out = chart.render(values or None, name=name, namespace=namespace)
    return [doc for template, text in sorted(out.items()) if not template.endswith("NOTES.txt")
            for doc in yaml.safe_load_all(text) if doc]


@pytest.fixture(scope="module")
def chart() -> Any:
    loaded = helm.Chart.load(CHART)
    yield loaded
    loaded.close()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_the_documented_install_renders_and_finds_every_secret_key(chart: Any, page: Path) -> None:
    install = read_install(page)
    assert install.releases, f"{page.name} documents no `helm upgrade --install loopwire ./helm/loopwire`"
    assert not install.late_secrets, f"Secrets created before their namespace: {install.late_secrets}"
    for name, ns, values in install.releases:
        objects = rendered(chart, values, name=name, namespace=ns)
        for obj in objects:
            if obj["apiVersion"] != CRD_GROUP:  # the Prometheus Operator's: test_chart_monitoring
                kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
        made_by_chart = {s: set(o.get("data", {}) | o.get("stringData", {}))
                         for s, o in of_kind(objects, "Secret").items()}
        deployments = of_kind(objects, "Deployment")
        assert deployments
        for dep_name, dep in deployments.items():
            for secret, key in secret_keys_read(dep):
                keys = install.secrets.get((ns, secret), made_by_chart.get(secret))
                assert keys is not None, f"{page.name}: {dep_name} reads Secret {secret!r}, which no command creates"
                assert key in keys, f"{page.name}: {dep_name} reads key {key!r} of {secret!r}; the docs create {keys}"


def test_the_reader_sees_a_mismatched_key(chart: Any, tmp_path: Path) -> None:
    """The check above can fail: a page whose Secret has the key `url` while the chart reads
    `redis-url` is caught."""
    page = tmp_path / "page.md"
    page.write_text("```sh\nkubectl create namespace lw\n"
                    "kubectl -n lw create secret generic r --from-literal=url=redis://x:6379/0\n"
                    "helm upgrade --install loopwire ./helm/loopwire --namespace lw \\\n"
                    "  --set redis.urlSecret.name=r\n```\n")
    install = read_install(page)
    (name, ns, values), = install.releases
    objects = rendered(chart, values, name=name, namespace=ns)
    reads = set().union(*(secret_keys_read(d) for d in of_kind(objects, "Deployment").values()))
    assert ("r", "redis-url") in reads and install.secrets[("lw", "r")] == {"url"}
