{{- define "member.namespace" -}}
{{- default .Release.Namespace .Values.namespace.name -}}
{{- end -}}

{{/* deploy/member/'s labels (component member-identity), then Helm's. */}}
{{- define "member.labels" -}}
app.kubernetes.io/name: dispatcher
app.kubernetes.io/component: member-identity
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}
