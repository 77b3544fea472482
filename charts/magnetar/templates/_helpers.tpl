{{/*
Names, labels, images and the checks that JSON schema cannot express.
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "magnetar.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/*
The prefix of every object name: fullnameOverride, else the release name when it contains the
chart name, else "<release>-<chart name>". Truncated to 40 characters so that the longest derived
names ("<fullname>-broker-headless", "<fullname>-etcd-headless", a StatefulSet's
controller-revision-hash label) stay within Kubernetes' 63-character limits.
*/}}
{{- define "magnetar.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "magnetar.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* "magnetar-0.1.0", the value of the helm.sh/chart label. */}}
{{- define "magnetar.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Selector labels of one component; immutable on StatefulSets and Deployments, so they never hold
the version. Call with (dict "ctx" $ "component" "etcd").
*/}}
{{- define "magnetar.selectorLabels" -}}
app.kubernetes.io/name: {{ include "magnetar.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The standard labels of every object the chart creates. Call like magnetar.selectorLabels. */}}
{{- define "magnetar.labels" -}}
{{ include "magnetar.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
helm.sh/chart: {{ include "magnetar.chart" .ctx }}
{{- end -}}

{{/* The tag of every Magnetar image: image.tag, else the chart's appVersion. */}}
{{- define "magnetar.imageTag" -}}
{{- .Values.image.tag | default .Chart.AppVersion -}}
{{- end -}}

{{/* The server image (etcd, bookies, brokers). */}}
{{- define "magnetar.image" -}}
{{- printf "%s:%s" .Values.image.repository (include "magnetar.imageTag" .) -}}
{{- end -}}

{{/* The operator image (same tag as the server image). */}}
{{- define "magnetar.operatorImage" -}}
{{- printf "%s:%s" .Values.operator.image.repository (include "magnetar.imageTag" .) -}}
{{- end -}}

{{/* The Spark image (topic exports, retention sweeps): spark.image.tag, else the Magnetar tag. */}}
{{- define "magnetar.sparkImage" -}}
{{- printf "%s:%s" .Values.spark.image.repository (.Values.spark.image.tag | default (include "magnetar.imageTag" .)) -}}
{{- end -}}

{{/* The Spark drivers' service account: spark.serviceAccount, else <fullname>-spark. */}}
{{- define "magnetar.spark.serviceAccount" -}}
{{- .Values.spark.serviceAccount | default (printf "%s-spark" (include "magnetar.fullname" .)) -}}
{{- end -}}

{{/* Object names. */}}
{{- define "magnetar.etcd.fullname" -}}{{ include "magnetar.fullname" . }}-etcd{{- end -}}
{{- define "magnetar.etcd.headless" -}}{{ include "magnetar.fullname" . }}-etcd-headless{{- end -}}
{{- define "magnetar.operator.fullname" -}}{{ include "magnetar.fullname" . }}-operator{{- end -}}
{{- define "magnetar.bookie.fullname" -}}{{ include "magnetar.fullname" . }}-bookie{{- end -}}
{{- define "magnetar.broker.fullname" -}}{{ include "magnetar.fullname" . }}-broker{{- end -}}
{{- define "magnetar.uninstall.fullname" -}}{{ include "magnetar.fullname" . }}-uninstall{{- end -}}
{{- define "magnetar.cleanup.fullname" -}}{{ include "magnetar.fullname" . }}-cleanup{{- end -}}

{{/* The metadata store URL brokers and bookies are given: etcd's client Service. */}}
{{- define "magnetar.metadataUrl" -}}
{{- printf "etcd://%s.%s.svc:2379" (include "magnetar.etcd.fullname" .) .Release.Namespace -}}
{{- end -}}

{{/*
The broker pool's settings (MAGNETAR_BROKER_CONFIG, JSON): metadata store, bind address and
ledger quorums from the chart, then the load manager's brokers.loadBalancer, then brokers.config
on top.
*/}}
{{- define "magnetar.brokerConfig" -}}
{{- $config := dict
  "metadataUrl" (include "magnetar.metadataUrl" .)
  "bindAddress" "0.0.0.0"
  "managedLedgerDefaultEnsembleSize" (int .Values.cluster.ensembleSize)
  "managedLedgerDefaultWriteQuorum" (int .Values.cluster.writeQuorum)
  "managedLedgerDefaultAckQuorum" (int .Values.cluster.ackQuorum)
-}}
{{- $config = merge (deepCopy (.Values.brokers.loadBalancer | default dict)) $config -}}
{{- $config = merge (deepCopy (.Values.brokers.config | default dict)) $config -}}
{{- toJson $config -}}
{{- end -}}

{{/*
The PodDisruptionBudget API: policy/v1 where served (Kubernetes >= 1.21), else policy/v1beta1
(Kubernetes 1.20). Against a cluster Helm knows both "policy/v1/PodDisruptionBudget" and
"policy/v1" from discovery; `helm template` and `helm lint` know only group versions, and the
policy/v1 group version holds nothing but PodDisruptionBudget, so it is asked too.
*/}}
{{- define "magnetar.pdb.apiVersion" -}}
{{- if or (.Capabilities.APIVersions.Has "policy/v1/PodDisruptionBudget") (.Capabilities.APIVersions.Has "policy/v1") -}}
policy/v1
{{- else -}}
policy/v1beta1
{{- end -}}
{{- end -}}

{{/*
The HorizontalPodAutoscaler API: autoscaling/v2 where served (Kubernetes >= 1.23), else
autoscaling/v2beta2 (Kubernetes 1.20-1.22); the same fields in both for what the chart sets.
*/}}
{{- define "magnetar.hpa.apiVersion" -}}
{{- if .Capabilities.APIVersions.Has "autoscaling/v2/HorizontalPodAutoscaler" -}}
autoscaling/v2
{{- else -}}
autoscaling/v2beta2
{{- end -}}
{{- end -}}

{{/*
The pod placement and security of every pod the chart creates.
Call with (dict "ctx" $ "affinity" <affinity dict>).
*/}}
{{- define "magnetar.podPlacement" -}}
securityContext:
  {{- toYaml .ctx.Values.podSecurityContext | nindent 2 }}
{{- with .ctx.Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .ctx.Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
Checks across values that values.schema.json cannot express; rendering fails with the reason.
*/}}
{{- define "magnetar.validate" -}}
{{- $c := .Values.cluster -}}
{{- if gt (int $c.ackQuorum) (int $c.writeQuorum) -}}
{{- fail (printf "cluster.ackQuorum (%d) must not exceed cluster.writeQuorum (%d)" (int $c.ackQuorum) (int $c.writeQuorum)) -}}
{{- end -}}
{{- if gt (int $c.writeQuorum) (int $c.ensembleSize) -}}
{{- fail (printf "cluster.writeQuorum (%d) must not exceed cluster.ensembleSize (%d)" (int $c.writeQuorum) (int $c.ensembleSize)) -}}
{{- end -}}
{{- if gt (int $c.ensembleSize) (int .Values.bookies.replicas) -}}
{{- fail (printf "cluster.ensembleSize (%d) needs at least that many bookies, but bookies.replicas is %d" (int $c.ensembleSize) (int .Values.bookies.replicas)) -}}
{{- end -}}
{{- $as := .Values.brokers.autoscaling -}}
{{- if $as.enabled -}}
{{- if gt (int $as.minReplicas) (int $as.maxReplicas) -}}
{{- fail (printf "brokers.autoscaling.minReplicas (%d) must not exceed brokers.autoscaling.maxReplicas (%d)" (int $as.minReplicas) (int $as.maxReplicas)) -}}
{{- end -}}
{{- if or (lt (int .Values.brokers.replicas) (int $as.minReplicas)) (gt (int .Values.brokers.replicas) (int $as.maxReplicas)) -}}
{{- fail (printf "brokers.replicas (%d) pins the pool outside brokers.autoscaling's %d..%d: with autoscaling on it is only the starting size, which the autoscaler would change at once; set it within the range" (int .Values.brokers.replicas) (int $as.minReplicas) (int $as.maxReplicas)) -}}
{{- end -}}
{{- if not (dig "requests" "cpu" "" (.Values.brokers.resources | default dict)) -}}
{{- fail "brokers.autoscaling needs brokers.resources.requests.cpu: the autoscaler measures CPU utilization against the brokers' CPU request, and without one it cannot scale the pool" -}}
{{- end -}}
{{- if eq (int .Values.operator.replicas) 0 -}}
{{- fail "brokers.autoscaling needs the operator (operator.replicas 1): it creates the broker StatefulSet the autoscaler scales" -}}
{{- end -}}
{{- end -}}
{{- if and .Values.tls.enabled (not .Values.tls.existingSecret) -}}
{{- fail "tls.enabled needs tls.existingSecret: a Secret with tls.crt, tls.key and ca.crt (e.g. a cert-manager Certificate's)" -}}
{{- end -}}
{{- end -}}
