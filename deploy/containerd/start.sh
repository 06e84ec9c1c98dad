#!/usr/bin/env bash
# Start podbus's own containerd (deploy/containerd/config.toml) unless it already answers.
# Usage: deploy/containerd/start.sh   (as root; log in /var/log/podbus-containerd.log)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
sock=/run/podbus/containerd/containerd.sock
if ctr --address "$sock" version >/dev/null 2>&1; then
  echo "containerd already answers on $sock"
  exit 0
fi
mkdir -p /run/podbus/containerd /var/lib/podbus/containerd
log=/var/log/podbus-containerd.log
(setsid containerd --config "$here/config.toml" >>"$log" 2>&1 &)
for _ in $(seq 50); do
  if ctr --address "$sock" version >/dev/null 2>&1; then
    echo "containerd answers on $sock (log: $log)"
    exit 0
  fi
  sleep 0.2
done
echo "containerd did not start; last lines of $log:" >&2
tail -20 "$log" >&2
exit 1
