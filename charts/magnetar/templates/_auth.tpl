{{- /* Names of internal identity's Secrets (auth-key-secret.yaml, operator-deployment.yaml). */ -}}
{{- define "magnetar.auth.keySecret" -}}
{{- .Values.auth.existingSecret | default (printf "%s-auth-key" (include "magnetar.fullname" .)) -}}
{{- end -}}
{{- define "magnetar.auth.tokenPrefix" -}}{{ include "magnetar.fullname" . }}-token{{- end -}}
