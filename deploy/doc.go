// Package deploy holds what toolsvc is deployed with — the Kubernetes
// kustomize base and overlay, the local observability stack for Docker
// Compose, the Grafana dashboard and the Prometheus alert rules — and the
// tests that keep them honest: Kubernetes manifests are rendered with
// kustomize and decoded strictly into the upstream API types, and every
// metric the dashboard and alerts query must be one the service exposes.
package deploy
