{{/*
The objects' name. It starts with "outboxrelay-" (or is "outboxrelay"),
since the alert OutboxRelayNotReady matches pods by that prefix.
*/}}
{{- define "outboxrelay.fullname" -}}
{{- $name := .Values.fullnameOverride -}}
{{- if not $name -}}
{{- if or (eq .Release.Name "outboxrelay") (hasPrefix "outboxrelay-" .Release.Name) -}}
{{- $name = .Release.Name -}}
{{- else -}}
{{- $name = printf "outboxrelay-%s" .Release.Name -}}
{{- end -}}
{{- end -}}
{{- $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
What the Deployment, the Service and the PodDisruptionBudget select by.
app.kubernetes.io/name is always "outboxrelay": the ServiceMonitor makes
it the job label the alert rules select.
*/}}
{{- define "outboxrelay.selectorLabels" -}}
app.kubernetes.io/name: outboxrelay
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "outboxrelay.labels" -}}
{{ include "outboxrelay.selectorLabels" . }}
app.kubernetes.io/version: {{ include "outboxrelay.imageTag" . | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{- define "outboxrelay.imageTag" -}}
{{- .Values.image.tag | default .Chart.AppVersion -}}
{{- end -}}

{{- define "outboxrelay.secretName" -}}
{{- .Values.secrets.existingSecret | default (include "outboxrelay.fullname" .) -}}
{{- end -}}

{{/*
The container port: the port of config.http.listen, which the probes and
the Service reach through the port's name.
*/}}
{{- define "outboxrelay.httpPort" -}}
{{- $listen := required "config.http.listen is required: the probes and /metrics are served there (\":8080\")" .Values.config.http.listen -}}
{{- $port := regexFind "[0-9]+$" $listen -}}
{{- if not $port -}}
{{- fail (printf "config.http.listen %q ends in no port; write host:port or :port, e.g. \":8080\"" $listen) -}}
{{- end -}}
{{- $port -}}
{{- end -}}
