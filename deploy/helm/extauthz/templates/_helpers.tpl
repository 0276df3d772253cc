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

{{- define "extauthz.labels" -}}
{{ include "extauthz.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The config file: the user's settings, then what the chart owns. */}}
{{- define "extauthz.config" -}}
{{- $own := dict "grpc_addr" (printf ":%d" (int .Values.ports.grpc)) "admin_addr" (printf ":%d" (int .Values.ports.admin)) "rules_file" "/etc/extauthz/rules/rules.yaml" -}}
{{- toYaml (merge $own (deepCopy .Values.config)) -}}
{{- end -}}
