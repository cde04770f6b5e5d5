{{/*
The loopwire services, in the order they are rendered.
*/}}
{{- define "loopwire.serviceNames" -}}
{{- list "router" "llm" "tools" "memory" "transcripts" | toJson -}}
{{- end -}}

{{- define "loopwire.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Full name of the release's objects. Kept to 50 characters so that "<fullname>-<service>"
(the longest service is "transcripts") still fits a DNS label.
*/}}
{{- define "loopwire.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Name of one service's objects: (list $ "router").
*/}}
{{- define "loopwire.componentName" -}}
{{- $root := index . 0 -}}
{{- printf "%s-%s" (include "loopwire.fullname" $root) (index . 1) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "loopwire.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Selector labels: stable for the life of a release, so never add changing values here.
*/}}
{{- define "loopwire.selectorLabels" -}}
app.kubernetes.io/name: {{ include "loopwire.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/*
Labels of every object.
*/}}
{{- define "loopwire.labels" -}}
helm.sh/chart: {{ include "loopwire.chart" . }}
{{ include "loopwire.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: loopwire
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
Labels and selector labels of one service's objects: (list $ "router").
*/}}
{{- define "loopwire.componentLabels" -}}
{{- $root := index . 0 -}}
{{ include "loopwire.labels" $root }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "loopwire.componentSelectorLabels" -}}
{{- $root := index . 0 -}}
{{ include "loopwire.selectorLabels" $root }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "loopwire.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/*
The image of one service's pods: (list $ "llm"). With executors.enabled the llm pods run
the image with the coding agents (the Dockerfile's `agents` target).
*/}}
{{- define "loopwire.serviceImage" -}}
{{- $root := index . 0 -}}
{{- if and (eq (index . 1) "llm") $root.Values.executors.enabled -}}
{{- $image := $root.Values.executors.image -}}
{{- $tag := $image.tag | default (printf "%s-agents" ($root.Values.image.tag | default $root.Chart.AppVersion)) -}}
{{- printf "%s:%s" ($image.repository | default $root.Values.image.repository) $tag -}}
{{- else -}}
{{- include "loopwire.image" $root -}}
{{- end -}}
{{- end -}}

{{- define "loopwire.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "loopwire.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
The Secret and key that hold the Anthropic API key; empty when there is none.
*/}}
{{- define "loopwire.anthropicSecretName" -}}
{{- if .Values.anthropic.existingSecret -}}
{{- .Values.anthropic.existingSecret -}}
{{- else if .Values.anthropic.apiKey -}}
{{- printf "%s-anthropic" (include "loopwire.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "loopwire.anthropicSecretKey" -}}
{{- if .Values.anthropic.existingSecret -}}
{{- .Values.anthropic.existingSecretKey -}}
{{- else -}}
api-key
{{- end -}}
{{- end -}}

{{/*
Effective settings of one service: (list $ "router") -> YAML. serviceDefaults, with each
key the service sets replacing the default; maps are merged one level deep so that
`autoscaling: {enabled: true}` keeps the default bounds. hasKey (not mergeOverwrite) so
that false and 0 set on a service win over a true or non-zero default.
*/}}
{{- define "loopwire.serviceConfig" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- $defaults := $root.Values.serviceDefaults -}}
{{- $svc := index $root.Values.services $name | default dict -}}
{{- $out := dict -}}
{{- range $key, $value := $defaults -}}
{{- if not (hasKey $svc $key) -}}
{{- $_ := set $out $key $value -}}
{{- else if and (kindIs "map" $value) (kindIs "map" (index $svc $key)) -}}
{{- $merged := deepCopy $value -}}
{{- range $k, $v := index $svc $key -}}
{{- $_ := set $merged $k $v -}}
{{- end -}}
{{- $_ := set $out $key $merged -}}
{{- else -}}
{{- $_ := set $out $key (index $svc $key) -}}
{{- end -}}
{{- end -}}
{{- range $key, $value := $svc -}}
{{- if not (hasKey $out $key) -}}
{{- $_ := set $out $key $value -}}
{{- end -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/*
Fail early on values that cannot work together.
*/}}
{{- define "loopwire.validate" -}}
{{- $natsAuth := list -}}
{{- range $mode := list "userPasswordSecret" "credentialsSecret" "tokenSecret" -}}
{{- if (index $.Values.nats $mode).name -}}{{- $natsAuth = append $natsAuth (printf "nats.%s" $mode) -}}{{- end -}}
{{- end -}}
{{- if gt (len $natsAuth) 1 -}}
{{- fail (printf "%s are exclusive: set one way of authenticating to NATS" (join " and " $natsAuth)) -}}
{{- end -}}
{{- if and .Values.nats.tlsSecret.name (ne (empty .Values.nats.tlsSecret.certKey) (empty .Values.nats.tlsSecret.keyKey)) -}}
{{- fail "nats.tlsSecret.certKey and nats.tlsSecret.keyKey go together" -}}
{{- end -}}
{{- if and (not .Values.redis.url) (not .Values.redis.urlSecret.name) -}}
{{- fail "set redis.url or redis.urlSecret.name" -}}
{{- end -}}
{{- if and (eq .Values.redis.mode "sentinel") (not .Values.redis.sentinel.hosts) -}}
{{- fail "redis.mode sentinel needs redis.sentinel.hosts (host:port of each sentinel)" -}}
{{- end -}}
{{- end -}}
