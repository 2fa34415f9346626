{{/*
Labels of every object: Helm's own (the chart, the release, the app version), which the
comparison with config/ leaves out.
*/}}
{{- define "snigate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ include "snigate.tag" . | trunc 63 | quote }}
{{- end }}

{{/*
The controller's labels, also its Deployment's selector: the same as config/controller, and
without the release, because a selector cannot change on upgrade and the chart is installed
once per cluster anyway.
*/}}
{{- define "snigate.selectorLabels" -}}
app.kubernetes.io/name: snigate
app.kubernetes.io/component: controller
{{- end }}

{{- define "snigate.tag" -}}
{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The controller's image, which the provisioned data planes run too. */}}
{{- define "snigate.image" -}}
{{ required "image.repository is required" .Values.image.repository }}:{{ include "snigate.tag" . }}
{{- end }}

{{/* The controller's ServiceAccount as a Kubernetes username. */}}
{{- define "snigate.serviceAccountUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:snigate
{{- end }}

{{/* A CEL list literal of strings; refuses what would need escaping. */}}
{{- define "snigate.celList" -}}
[{{ range $i, $s := . }}{{ if $i }}, {{ end }}{{ if regexMatch "['\\\\]" $s }}{{ fail (printf "admissionPolicies: %q: quotes and backslashes are not allowed in a username or group" $s) }}{{ end }}'{{ $s }}'{{ end }}]
{{- end }}
