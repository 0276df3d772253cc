// Package envoygateway holds the Envoy Gateway example: a SecurityPolicy sending a route's
// requests to extauthz's Check over gRPC, and an EnvoyPatchPolicy adding the rate-limit filter
// (Envoy Gateway's own rate limiting cannot call an external service; see ratelimit-patch.yaml),
// with the Helm values of Envoy Gateway's chart that enable EnvoyPatchPolicy.
// Its tests decode each object strictly into the Gateway API's, Envoy Gateway's and Envoy's
// own types.
package envoygateway
