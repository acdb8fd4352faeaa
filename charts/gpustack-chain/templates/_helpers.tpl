{{/* The project's image: repository and tag (the chart's appVersion when no tag is set). */}}
{{- define "gpustack-chain.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end }}

{{/* The standard labels of every object the chart renders (never of a Pod template or a
selector, which would then change with every chart version). */}}
{{- define "gpustack-chain.labels" -}}
{{- $chart := printf "%s-%s" .Chart.Name .Chart.Version }}
helm.sh/chart: {{ $chart | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
