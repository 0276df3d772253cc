{{- define "extauthz.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "extauthz.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "extauthz.selectorLabels" -}}
app.kubernetes.io/name: {{ include "extauthz.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The helm test pod's labels: not the server's, so that no selector of the chart picks it. */}}
{{- define "extauthz.testSelectorLabels" -}}
app.kubernetes.io/name: {{ include "extauthz.name" . }}-test
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "extauthz.labels" -}}
{{ include "extauthz.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The config file: the user's settings, then what the chart owns; the Service's names
join the user's admin.hosts. */}}
{{- define "extauthz.config" -}}
{{- $own := dict "grpc_addr" (printf ":%d" (int .Values.ports.grpc)) "admin_addr" (printf ":%d" (int .Values.ports.admin)) "rules_file" "/etc/extauthz/rules/rules.yaml" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- $admin := deepCopy (default (dict) $cfg.admin) -}}
{{- $svc := include "extauthz.fullname" . -}}
{{- $names := list $svc (printf "%s.%s" $svc .Release.Namespace) (printf "%s.%s.svc" $svc .Release.Namespace) (printf "%s.%s.svc.cluster.local" $svc .Release.Namespace) -}}
{{- $_ := set $admin "hosts" (concat (default (list) $admin.hosts) $names | uniq) -}}
{{- $_ := set $cfg "admin" $admin -}}
{{- toYaml (merge $own $cfg) -}}
{{- end -}}

{{/* The image: pinned by digest when one is given, else by tag (the appVersion by default). */}}
{{- define "extauthz.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* The divisor of the Redis fallback's local counts: redis.replicas, else the most replicas
that can run (the autoscaler's maximum, or replicaCount). */}}
{{- define "extauthz.redisReplicas" -}}
{{- if .Values.redis.replicas -}}
{{- .Values.redis.replicas -}}
{{- else if .Values.autoscaling.enabled -}}
{{- .Values.autoscaling.maxReplicas -}}
{{- else -}}
{{- .Values.replicaCount -}}
{{- end -}}
{{- end -}}
