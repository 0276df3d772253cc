// Package kubernetes holds extauthz's Kubernetes manifests: a kustomize base, the overlays of
// its two modes (memory, redis) and an mTLS component. Its tests render them with kustomize's
// own engine (krusty) and decode every object strictly into the Kubernetes API's Go types.
package kubernetes
