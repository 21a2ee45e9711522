#!/usr/bin/env bash
# Re-vendors xterm.js and its fit addon into the web console's embedded
# assets (internal/console/assets/vendor/xterm). Run it at development time
# only (it needs npm and the npm registry); CI never runs it: the output is
# committed. Usage: scripts/update-xterm.sh [XTERM_VERSION [FIT_VERSION]]
set -euo pipefail
xterm=${1:-6.0.0}
fit=${2:-0.11.0}
root=$(cd "$(dirname "$0")/.." && pwd)
dst=$root/internal/console/assets/vendor/xterm
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
npm pack --silent "@xterm/xterm@$xterm" "@xterm/addon-fit@$fit" >/dev/null
mkdir x f
tar xzf xterm-xterm-"$xterm".tgz -C x
tar xzf xterm-addon-fit-"$fit".tgz -C f
mkdir -p "$dst"
# The source-map comments go: the maps are not shipped, and a browser's
# developer tools would ask the daemon for them.
sed '/^\/\/# sourceMappingURL=/d' x/package/lib/xterm.js >"$dst/xterm.js"
sed '/^\/\/# sourceMappingURL=/d' f/package/lib/addon-fit.js >"$dst/addon-fit.js"
cp x/package/css/xterm.css "$dst/xterm.css"
cp x/package/LICENSE "$dst/LICENSE"
cp f/package/LICENSE "$dst/LICENSE.addon-fit"
printf '@xterm/xterm %s\n@xterm/addon-fit %s\n' "$xterm" "$fit" >"$dst/VERSION"
echo "vendored @xterm/xterm $xterm and @xterm/addon-fit $fit into $dst"
