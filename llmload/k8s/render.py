"""Assemble a deployment's manifests and write them: one multi-document YAML, or a kustomize directory."""

from __future__ import annotations

from pathlib import Path

from llmload.k8s.headless import headless
from llmload.k8s.pods import Manifest, metadata, options_config_map, results_claim
from llmload.k8s.settings import Settings
from llmload.k8s.webui import webui


def manifests(settings: Settings, *, ui: bool = False, ui_env: dict[str, str] | None = None,
              locustfile: str | None = None) -> list[Manifest]:
    """Every object of one deployment: the options ConfigMap, the results PVC, then the headless Jobs or the web
    UI; ``locustfile`` (its text) becomes the ConfigMap the UI pods mount at /app/custom/locustfile.py."""
    extra = dict(ui_env or {})
    docs: list[Manifest] = []
    if locustfile is not None:
        extra["LOCUST_LOCUSTFILE"] = "/app/custom/locustfile.py"
        docs.append({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": metadata(settings, settings.named("locustfile"), "locustfile"),
                     "data": {"locustfile.py": locustfile}})
    docs[:0] = [options_config_map(settings, extra), results_claim(settings)]
    docs.extend(webui(settings) if ui else headless(settings))
    return docs


def to_yaml(docs: list[Manifest]) -> str:
    import yaml

    return "---\n".join(yaml.safe_dump(doc, sort_keys=False, width=120) for doc in docs)


def file_name(doc: Manifest) -> str:
    return f"{doc['kind'].lower()}-{doc['metadata']['name']}.yaml"


def write_directory(directory: Path, docs: list[Manifest], *, header: str = "") -> list[Path]:
    """One file per object plus ``kustomization.yaml`` listing them (``kubectl apply -k DIR``)."""
    import yaml

    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for doc in docs:
        path = directory / file_name(doc)
        path.write_text(header + yaml.safe_dump(doc, sort_keys=False, width=120))
        written.append(path)
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                     "resources": [p.name for p in written]}
    path = directory / "kustomization.yaml"
    path.write_text(header + yaml.safe_dump(kustomization, sort_keys=False))
    return [*written, path]
