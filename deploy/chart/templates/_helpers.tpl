{{/* Names, labels and the pieces several templates share. */}}

{{/* The chart name, or nameOverride. */}}
{{- define "inrun.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name of every resource: fullnameOverride, else the release name, with the chart
name appended unless the release name already contains it. At most 63 characters (a
Kubernetes name and label value).
*/}}
{{- define "inrun.fullname" -}}
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

{{/* chart-version, for the helm.sh/chart label. */}}
{{- define "inrun.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* What selects the host's pods: never changes across upgrades. */}}
{{- define "inrun.selectorLabels" -}}
app.kubernetes.io/name: {{ include "inrun.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The labels of every resource. */}}
{{- define "inrun.labels" -}}
helm.sh/chart: {{ include "inrun.chart" . }}
{{ include "inrun.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: inrun
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The ServiceAccount the host runs as. */}}
{{- define "inrun.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "inrun.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The image reference: repository, then @digest or :tag (default appVersion). */}}
{{- define "inrun.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* "true" when the chart turns leader election on (`--leader-elect`): by default. */}}
{{- define "inrun.leaderElection" -}}
{{- if .Values.leaderElection.enabled }}true{{ end }}
{{- end }}

{{/* "true" when replicas share the CRs (`--sharding`). */}}
{{- define "inrun.sharding" -}}
{{- if .Values.sharding.enabled }}true{{ end }}
{{- end }}

{{/* The sharding ring's name (`--sharding-ring`): the full name, cut to 40 characters. */}}
{{- define "inrun.ringName" -}}
{{- include "inrun.fullname" . | trunc 40 | trimSuffix "-" }}
{{- end }}

{{/*
The Lease's name (`--leader-elect-lease`): the full name, so two releases in one namespace
hold two Leases. Passed whether or not the chart turns election on, since the Blueprint's
`runtime.leaderElection.enabled` turns it on too.
*/}}
{{- define "inrun.leaseName" -}}
{{- include "inrun.fullname" . }}
{{- end }}

{{/*
The Deployment's strategy: `strategy` as given, else RollingUpdate with a surge pod when
leader election is on (it stands by until the old pod releases the Lease) and Recreate
when it is off (the old pod is gone before the new one starts, so two never reconcile).
*/}}
{{- define "inrun.strategy" -}}
{{- if .Values.strategy }}
{{- toYaml .Values.strategy }}
{{- else if or (include "inrun.leaderElection" .) (include "inrun.sharding" .) -}}
type: RollingUpdate
rollingUpdate:
  maxUnavailable: 0
  maxSurge: 1
{{- else -}}
type: Recreate
{{- end }}
{{- end }}

{{/* "true" when the PodDisruptionBudget is rendered: as set, else with more than one replica. */}}
{{- define "inrun.podDisruptionBudget" -}}
{{- if kindIs "bool" .Values.podDisruptionBudget.enabled }}
{{- ternary "true" "" .Values.podDisruptionBudget.enabled }}
{{- else }}
{{- ternary "true" "" (gt (int .Values.replicaCount) 1) }}
{{- end }}
{{- end }}

{{/* "true" when the host runs the chart's own Blueprint (files/blueprint.yaml). */}}
{{- define "inrun.ownBlueprint" -}}
{{- if and .Values.blueprint.enabled (empty .Values.blueprint.content) (empty .Values.blueprint.existingConfigMap) }}true{{ end }}
{{- end }}

{{/* The Blueprint ConfigMap's text: blueprint.content (text or mapping), else the chart's. */}}
{{- define "inrun.blueprintText" -}}
{{- if empty .Values.blueprint.content }}
{{- .Files.Get "files/blueprint.yaml" }}
{{- else if kindIs "string" .Values.blueprint.content }}
{{- .Values.blueprint.content }}
{{- else }}
{{- toYaml .Values.blueprint.content }}
{{- end }}
{{- end }}

{{/*
The documents of a YAML stream (text), as a list of mappings; comment-only documents are
dropped. `what` names the source in the error of a document that does not parse.
Called with (dict "text" TEXT "what" NAME); returns {"docs": [...]} as YAML.
*/}}
{{- define "inrun.documents" -}}
{{- $docs := list }}
{{- range $i, $chunk := regexSplit "(?m)^---[ \t]*$" .text -1 }}
{{- $doc := fromYaml $chunk }}
{{- if hasKey $doc "Error" }}
{{- fail (printf "%s: document %d is not YAML: %s" $.what $i (get $doc "Error")) }}
{{- end }}
{{- if $doc }}
{{- $docs = append $docs $doc }}
{{- end }}
{{- end }}
{{- toYaml (dict "docs" $docs) }}
{{- end }}

{{/* Refuses values that would deploy a host that cannot work, naming what to set. */}}
{{- define "inrun.validate" -}}
{{- if not (or .Values.blueprint.enabled .Values.tenants.enabled .Values.blueprintResources.enabled) }}
{{- fail "nothing to serve: enable blueprint, tenants or blueprintResources" }}
{{- end }}
{{- if and .Values.tenants.enabled .Values.tenants.existingConfigMap .Values.tenants.blueprints }}
{{- fail "tenants: give blueprints or existingConfigMap, not both" }}
{{- end }}
{{- if and .Values.blueprint.content .Values.blueprint.existingConfigMap }}
{{- fail "blueprint: give content or existingConfigMap, not both" }}
{{- end }}
{{- if and (include "inrun.sharding" .) (include "inrun.leaderElection" .) }}
{{- fail "sharding.enabled with leaderElection.enabled: sharded replicas all reconcile, and leader election would idle all but one; set leaderElection.enabled=false" }}
{{- end }}
{{- if not (or (include "inrun.leaderElection" .) (include "inrun.sharding" .)) }}
{{- if gt (int .Values.replicaCount) 1 }}
{{- fail (printf "replicaCount is %d with leaderElection.enabled=false: every replica would reconcile and write at once; keep leader election on, turn sharding on, or run one replica" (int .Values.replicaCount)) }}
{{- end }}
{{- if and .Values.strategy (ne (default "RollingUpdate" .Values.strategy.type) "Recreate") }}
{{- fail "strategy.type is RollingUpdate (Kubernetes' default when unset) with leaderElection.enabled=false: the new pod would reconcile beside the old one during every upgrade; use strategy.type=Recreate (or leave strategy empty), or keep leader election on" }}
{{- end }}
{{- end }}
{{- if and .Values.rbac.create (not .Values.rbac.generated) (not (include "inrun.ownBlueprint" .)) }}
{{- fail "rbac.generated is empty, and the chart's RBAC is only for its own Blueprint: give what `inrun generate rbac -b YOUR-BLUEPRINT -n NAMESPACE` prints (--set-file rbac.generated=FILE), or rbac.create=false" }}
{{- end }}
{{- if and .Values.crds.enabled .Values.blueprint.enabled (not .Values.crds.generated) (not (include "inrun.ownBlueprint" .)) }}
{{- fail "crds.generated is empty, and the chart's CRDs are only for its own Blueprint: give what `inrun generate crds -b YOUR-BLUEPRINT` prints (--set-file crds.generated=FILE), or crds.enabled=false" }}
{{- end }}
{{- end }}

{{/*
The tenants' ServiceAccounts the APF objects name, as `namespace name` (`*`: every one in
that namespace; a space sorts before any character of a name, so sorting these sorts by
namespace, then name): those the host may impersonate by the RBAC the chart renders (a
Role granting `impersonate` on serviceaccounts, by name or all; one generated for the
host's own namespace is rendered in the release namespace, as rbac.yaml does), then
`apf.tenantNamespaces` and `apf.tenantServiceAccounts`.
Returns {"accounts": [...]} as YAML.
*/}}
{{- define "inrun.tenantAccounts" -}}
{{- $accounts := list }}
{{- if and .Values.rbac.create .Values.rbac.generated }}
{{- $docs := (include "inrun.documents" (dict "text" .Values.rbac.generated "what" "rbac.generated") | fromYaml).docs }}
{{- $home := list }}
{{- range $docs }}
{{- if has .kind (list "ClusterRoleBinding" "RoleBinding") }}
{{- range .subjects }}
{{- $home = append $home (default "" .namespace) }}
{{- end }}
{{- end }}
{{- end }}
{{- range $docs }}
{{- if eq .kind "Role" }}
{{- $ns := .metadata.namespace }}
{{- if has $ns $home }}
{{- $ns = $.Release.Namespace }}
{{- end }}
{{- range (default list .rules) }}
{{- if and (has "" (default list .apiGroups)) (has "serviceaccounts" (default list .resources)) (has "impersonate" (default list .verbs)) }}
{{- if .resourceNames }}
{{- range .resourceNames }}
{{- $accounts = append $accounts (printf "%s %s" $ns .) }}
{{- end }}
{{- else }}
{{- $accounts = append $accounts (printf "%s *" $ns) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- range .Values.apf.tenantNamespaces }}
{{- $accounts = append $accounts (printf "%s *" .) }}
{{- end }}
{{- range .Values.apf.tenantServiceAccounts }}
{{- $accounts = append $accounts (replace "/" " " .) }}
{{- end }}
{{- toYaml (dict "accounts" ($accounts | uniq | sortAlpha)) }}
{{- end }}
