{{/*
The names are fixed, as in deploy/ (kustomize): the Lease, the webhook configuration and
Secret and the Services are named in the config and in the RBAC's resourceNames, and one hub
runs one dispatcher (its ClusterRole is cluster-wide). Only the namespace is the release's.
*/}}
{{- define "dispatcher.namespace" -}}
{{- default .Release.Namespace .Values.namespace.name -}}
{{- end -}}

{{/* Labels every object carries: deploy/'s own, then Helm's. */}}
{{- define "dispatcher.labels" -}}
app.kubernetes.io/name: dispatcher
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* The controller pods (also the Services' selector): the same as deploy/'s, so a helm
release can take over a kustomize install (a Deployment's selector is immutable). */}}
{{- define "dispatcher.selector" -}}
app.kubernetes.io/name: dispatcher
app.kubernetes.io/component: controller
{{- end -}}

{{- define "dispatcher.multikueue" -}}
{{- $mode := default "dispatch" .Values.config.mode -}}
{{- if eq $mode "multikueue-dispatcher" }}true{{ else if ne $mode "dispatch" }}{{ fail (printf "config.mode must be dispatch or multikueue-dispatcher, not %q" $mode) }}{{ end -}}
{{- end -}}

{{- define "dispatcher.shared" -}}
{{- if eq .Values.hub.mode "shared" }}true{{ else if ne .Values.hub.mode "dedicated" }}{{ fail (printf "hub.mode must be dedicated or shared, not %q" .Values.hub.mode) }}{{ end -}}
{{- end -}}

{{/* Outside /etc/dispatcher: a mount inside the read-only ConfigMap volume cannot be made. */}}
{{- define "dispatcher.certDir" -}}/etc/dispatcher-webhook/certs{{- end -}}

{{/*
The config file: .Values.config with the keys the chart owns set (see values.yaml).
*/}}
{{- define "dispatcher.config" -}}
{{- $ns := include "dispatcher.namespace" . -}}
{{- $config := deepCopy .Values.config -}}
{{- $hub := get $config "hub" | default dict -}}
{{- $_ := set $hub "kubeconfig" "in-cluster.kubeconfig" -}}
{{- $_ = set $hub "mode" .Values.hub.mode -}}
{{- $_ = set $config "hub" $hub -}}
{{- $leader := get $config "leaderElection" | default dict -}}
{{- $_ = set $leader "namespace" $ns -}}
{{- $_ = set $config "leaderElection" $leader -}}
{{- $fleet := get $config "fleet" | default dict -}}
{{- $_ = set $fleet "secretNamespace" $ns -}}
{{- $_ = set $config "fleet" $fleet -}}
{{- if and (include "dispatcher.shared" .) .Values.certManager.enabled -}}
{{- $webhook := get $config "webhook" | default dict -}}
{{- $_ = set $webhook "certDir" (include "dispatcher.certDir" .) -}}
{{- $_ = set $config "webhook" $webhook -}}
{{- end -}}
{{- if and (gt (int .Values.replicas) 1) (not (dig "enabled" true $leader)) -}}
{{- fail "replicas > 1 needs config.leaderElection.enabled: true (two controllers acting at once would dispatch twice)" -}}
{{- end -}}
{{- toYaml $config -}}
{{- end -}}

{{- define "dispatcher.serverPort" -}}{{ dig "server" "port" 8080 .Values.config }}{{- end -}}
{{- define "dispatcher.webhookPort" -}}{{ dig "webhook" "port" 9443 .Values.config }}{{- end -}}
{{- define "dispatcher.webhookSecret" -}}{{ dig "webhook" "secretName" "dispatcher-webhook-cert" .Values.config }}{{- end -}}
{{- define "dispatcher.webhookService" -}}{{ dig "webhook" "serviceName" "dispatcher-webhook" .Values.config }}{{- end -}}
{{- define "dispatcher.webhookConfiguration" -}}{{ dig "webhook" "configurationName" "dispatcher" .Values.config }}{{- end -}}
{{- define "dispatcher.leaseName" -}}{{ dig "leaderElection" "name" "dispatcher" .Values.config }}{{- end -}}
