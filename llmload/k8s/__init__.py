"""Kubernetes manifests for llmload, built in one place: ``llmload k8s render`` prints them for a run, and the
kustomize base and overlays under ``k8s/`` are generated from the same builders (``python -m
llmload.k8s.generate``), so the two never drift (docs/kubernetes.md)."""
