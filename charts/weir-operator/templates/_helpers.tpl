{{/* Chart name, overridable. */}}
{{- define "weir-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: "<release>-<chart>", or "<release>" when it already contains the chart name. */}}
{{- define "weir-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "weir-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "weir-operator.labels" -}}
helm.sh/chart: {{ include "weir-operator.chart" . }}
{{ include "weir-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: weir
{{- end }}

{{/* Labels that select the operator pods. */}}
{{- define "weir-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "weir-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "weir-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "weir-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The operator image reference: repository@digest, or repository:tag (tag defaults to appVersion). */}}
{{- define "weir-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The default runtime image: runtime.image.* falling back to the operator image. */}}
{{- define "weir-operator.runtimeImage" -}}
{{- $repo := default .Values.image.repository .Values.runtime.image.repository }}
{{- if .Values.runtime.image.tag }}
{{- printf "%s:%s" $repo .Values.runtime.image.tag }}
{{- else if and .Values.image.digest (not .Values.runtime.image.repository) }}
{{- printf "%s@%s" $repo .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repo (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Whether leader election runs: requested, or required by more than one replica. */}}
{{- define "weir-operator.leaderElection" -}}
{{- if or .Values.leaderElection.enabled (gt (int .Values.replicas) 1) }}true{{ end }}
{{- end }}

{{/* The operator's RBAC rules on the resources of watched namespaces. Each rule says why. */}}
{{- define "weir-operator.namespacedRules" -}}
# StreamJobs: watched (list/watch/get) and edited only to add and remove the operator's
# finalizer (patch/update), so deletion can stop the job and take a savepoint first.
- apiGroups: ["weir.dev"]
  resources: ["streamjobs"]
  verbs: ["get", "list", "watch", "patch", "update"]
# Savepoints: watched to trigger manual savepoints; created (and deleted by history retention)
# for the periodic and upgrade savepoints the operator records as Savepoint objects.
- apiGroups: ["weir.dev"]
  resources: ["savepoints"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
# Status subresources: the operator writes status (lifecycle state, restore point, the
# write-ahead log of in-flight upgrades) and nothing else there.
- apiGroups: ["weir.dev"]
  resources: ["streamjobs/status", "savepoints/status"]
  verbs: ["get", "patch", "update"]
# Finalizers subresources: children carry ownerReferences with blockOwnerDeletion, which the
# OwnerReferencesPermissionEnforcement admission plugin allows only with update here.
- apiGroups: ["weir.dev"]
  resources: ["streamjobs/finalizers", "savepoints/finalizers"]
  verbs: ["update"]
# Job children: the ConfigMap with the job definition and the coordinator/worker Services,
# server-side applied (create/patch), watched for drift, and deleted when a generation is replaced.
- apiGroups: [""]
  resources: ["configmaps", "services"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
# Job children: the coordinator Deployment and the worker StatefulSet, same life cycle as above.
- apiGroups: ["apps"]
  resources: ["deployments", "statefulsets"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
# Pods: read only, to wait until every pod of an old generation is gone before the next one
# starts (never two generations at once) and to report crash loops. The operator never
# creates or deletes pods itself.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
# Events: Normal events for lifecycle steps and Warning events for failures, on StreamJobs
# and Savepoints.
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
# Secrets, no list/watch: each StreamJob's job secret `<job>-job-secret` (the control API
# token and the workers' HMAC key) is server-side applied (create/patch) when a deployment
# generation starts and read (get) to keep it within a generation and to send the token to the
# coordinator's control API; get also reads the S3 credentials Secret a StreamJob names in
# spec.s3.credentialsSecret when the operator itself inspects a restore point or disposes of
# savepoint data.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "create", "patch"]
{{- end }}
