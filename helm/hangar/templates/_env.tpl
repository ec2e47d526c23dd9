{{- define "hangar.env" -}}
- name: RAY_AUTH_MODE
  value: token
- name: RAY_worker_niceness
  value: "0"
- name: RAY_AUTH_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ .Values.ray.authTokenSecret }}
      key: token
- name: HANGAR_K8S_NAMESPACE
  value: {{ .Values.sandbox.namespace | quote }}
- name: HANGAR_K8S_RUNTIME_CLASS
  value: {{ .Values.sandbox.runtimeClassName | quote }}
{{- range .Values.secrets.env }}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ .secret }}
      key: {{ .key }}
      optional: {{ .optional | default false }}
{{- end }}
{{- end -}}
