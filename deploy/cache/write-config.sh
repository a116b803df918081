#!/bin/sh
# Write the cache nodes' redis.conf files with `seneca cache-node --write-config` (the same code
# that runs a node natively): node.conf for a single node, cluster.conf for a node of a cluster.
# Run by the compose file's cache-config service; the tests run it natively too.
#
#   SECRETS_DIR      loader_password and admin_password files (default /run/secrets)
#   CONFIG_DIR       where the files go (default /config)
#   CACHE_MAXMEMORY  cache size per node (default 8GB)
#   CACHE_PORT       port inside the container (default 6379); CACHE_BIND (default 0.0.0.0)
#   TLS_CERT, TLS_KEY, TLS_CA  serve TLS only (single node), with these PEM files
set -eu
secrets=${SECRETS_DIR:-/run/secrets}
out=${CONFIG_DIR:-/config}
set -- --maxmemory "${CACHE_MAXMEMORY:-8GB}" --port "${CACHE_PORT:-6379}" \
  --bind "${CACHE_BIND:-0.0.0.0}" \
  --loader-password-file "$secrets/loader_password" \
  --admin-password-file "$secrets/admin_password"
seneca cache-node "$@" --cluster-enabled --write-config "$out/cluster.conf"
if [ -n "${TLS_CERT:-}" ]; then
  set -- "$@" --tls-cert "$TLS_CERT" --tls-key "${TLS_KEY:?TLS_KEY is needed with TLS_CERT}"
  if [ -n "${TLS_CA:-}" ]; then set -- "$@" --tls-ca "$TLS_CA"; fi
fi
seneca cache-node "$@" --write-config "$out/node.conf"
