package manifest

import (
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
)

// Kubernetes returns a Decoder of the kinds the manifests and the chart render: the
// Kubernetes API's own types, and the Prometheus Operator's ServiceMonitor and PrometheusRule.
func Kubernetes() *Decoder {
	d := NewDecoder()
	d.Register("v1", "Namespace", &corev1.Namespace{})
	d.Register("v1", "ServiceAccount", &corev1.ServiceAccount{})
	d.Register("v1", "ConfigMap", &corev1.ConfigMap{})
	d.Register("v1", "Secret", &corev1.Secret{})
	d.Register("v1", "Service", &corev1.Service{})
	d.Register("v1", "Pod", &corev1.Pod{})
	d.Register("apps/v1", "Deployment", &appsv1.Deployment{})
	d.Register("policy/v1", "PodDisruptionBudget", &policyv1.PodDisruptionBudget{})
	d.Register("autoscaling/v2", "HorizontalPodAutoscaler", &autoscalingv2.HorizontalPodAutoscaler{})
	d.Register("networking.k8s.io/v1", "NetworkPolicy", &networkingv1.NetworkPolicy{})
	d.Register("monitoring.coreos.com/v1", "ServiceMonitor", &monitoringv1.ServiceMonitor{})
	d.Register("monitoring.coreos.com/v1", "PrometheusRule", &monitoringv1.PrometheusRule{})
	return d
}
