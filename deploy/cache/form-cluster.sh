#!/bin/sh
# Form a Redis Cluster of the given cache nodes (host:port ...) unless they already are one.
# Run by the compose file's cluster-init service (as the admin user); the tests run it too.
#   SECRETS_DIR  holds admin_password (default /run/secrets)
set -eu
export REDISCLI_AUTH="$(cat "${SECRETS_DIR:-/run/secrets}/admin_password")"
first=${1%:*}
first_port=${1##*:}
if redis-cli --user admin -h "$first" -p "$first_port" cluster info | grep -q cluster_state:ok; then
  echo "the cluster is formed already"
  exit 0
fi
nodes=""
for node in "$@"; do  # redis-cli wants addresses: resolve service names
  host=${node%:*}
  port=${node##*:}
  ip=$(getent hosts "$host" | awk '{print $1; exit}')
  nodes="$nodes ${ip:-$host}:$port"
done
# shellcheck disable=SC2086
redis-cli --user admin --cluster create $nodes --cluster-replicas 0 --cluster-yes
until redis-cli --user admin -h "$first" -p "$first_port" cluster info | grep -q cluster_state:ok; do
  sleep 0.5
done
echo "cluster formed: $*"
