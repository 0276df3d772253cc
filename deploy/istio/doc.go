// Package istio holds the Istio example: extauthz as a mesh ext_authz provider
// (meshconfig.yaml), an AuthorizationPolicy with action CUSTOM, an EnvoyFilter limiting the
// headers its Check carries to those the service reads, and an EnvoyFilter adding the
// rate-limit filter with descriptors for the hot-param rules. Its tests decode each into
// Istio's and Envoy's own API types, strictly.
package istio
