{{- define "berth.labels" -}}
app.kubernetes.io/name: berth
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
{{- define "berth.selector" -}}
app.kubernetes.io/name: berth
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
