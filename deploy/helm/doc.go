// Package helm holds extauthz's Helm chart (directory extauthz). Its tests render the chart
// with Helm's own engine, in process, under several sets of values, lint it, and decode every
// object strictly into the Kubernetes API's Go types.
package helm
