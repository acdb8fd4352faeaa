{{/* The project's image: repository and tag (the chart's appVersion when no tag is set). */}}
{{- define "gpustack-chain.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end }}
