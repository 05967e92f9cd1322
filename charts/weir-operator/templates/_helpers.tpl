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

{{/* The operator's RBAC rules on the resources of watched namespaces: exactly the verbs it uses,
each rule saying what uses it. e2e/standin/rbac_check.py compares them with the API requests the
operator makes in the stand-in scenarios and fails on a request no rule grants and on a granted
verb no request used (except the commented allow-list in e2e/standin/rbac_allowlist.yaml).
Server-side apply (PATCH) of an object that does not exist yet needs create as well as patch. */}}
{{- define "weir-operator.namespacedRules" -}}
# StreamJobs: list/watch feed the controller's cache; get re-reads a job before a status write
# (resourceVersion precondition) and reads the job a new Savepoint names when the cache does not
# have it yet; patch adds and removes the operator's finalizer.
- apiGroups: ["weir.dev"]
  resources: ["streamjobs"]
  verbs: ["get", "list", "watch", "patch"]
# Savepoints: list/watch feed the Savepoint controller and the jobs' savepoint history;
# create/patch server-side apply the periodic and upgrade Savepoints the operator records (and
# its finalizer); delete removes Savepoints of disposed data and old failed periodic attempts.
- apiGroups: ["weir.dev"]
  resources: ["savepoints"]
  verbs: ["list", "watch", "create", "patch", "delete"]
# Status subresources: server-side apply of status (lifecycle state, restore point, the
# write-ahead log of in-flight upgrades); never read through the subresource.
- apiGroups: ["weir.dev"]
  resources: ["streamjobs/status", "savepoints/status"]
  verbs: ["patch"]
# StreamJob finalizers subresource: the children and Savepoints carry an ownerReference to the
# StreamJob with blockOwnerDeletion, which the OwnerReferencesPermissionEnforcement admission
# plugin allows only with update here (an admission check, not a request the operator makes).
- apiGroups: ["weir.dev"]
  resources: ["streamjobs/finalizers"]
  verbs: ["update"]
# Job children: the ConfigMap with the job definition and the coordinator/worker Services,
# server-side applied (create/patch) on every deployment; garbage collected with the job.
- apiGroups: [""]
  resources: ["configmaps", "services"]
  verbs: ["create", "patch"]
# Job children: the coordinator Deployment and worker StatefulSet, server-side applied
# (create/patch), watched (list/watch) for pod readiness and drift, deleted (foreground) when a
# deployment generation is replaced, the job is suspended or stops.
- apiGroups: ["apps"]
  resources: ["deployments", "statefulsets"]
  verbs: ["list", "watch", "create", "patch", "delete"]
{{- if .Values.networkPolicies.enabled }}
# Job children: the per-job NetworkPolicies (coordinator and workers), server-side applied
# (create/patch) with the other children; garbage collected with the job.
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["create", "patch"]
{{- end }}
# Pods: watched only (list/watch), to wait until every pod of an old generation is gone before
# the next one starts (never two generations at once) and to report crash loops. The operator
# never creates, reads one by one or deletes pods.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch"]
# Events: Normal events for lifecycle steps and Warning events for failures, on StreamJobs and
# Savepoints (create); kube-runtime's recorder patches an event it emits again within its
# folding window instead of creating a new one (patch).
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
