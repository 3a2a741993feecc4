#!/usr/bin/env bash
# Re-fetch the dashboard's vendored JavaScript (src/hetflow/share/ui/vendor/) from npm at exactly the
# versions listed in vendor/README.md, check each tarball's sha512 integrity, and copy the minified
# builds and licenses. The files are committed: the page never needs the network; this script only
# makes the vendoring reproducible (`make ui-vendor`). Needs node + npm.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
dest="$here/src/hetflow/share/ui/vendor"
DAGRE=@dagrejs/dagre@3.1.3
DAGRE_SHA='sha512-X4aUTwOReZvthaZWOVHqlJ52/ZdhZFEM4+Lh/uR4XooUSLE6p71bcy7MPGzYnNUcNh+nj+i/qJQpCMIdQnSmrg=='
GRAPHLIB=@dagrejs/graphlib@4.0.6  # bundled inside dagre.min.js; only its license is copied
GRAPHLIB_SHA='sha512-Hjv7hbfmSBMP4nVXMFt4gusqWWHghQF0qNT4V5KHo4Jatvd+2L5VHKFnnIjXVuDnaHIRz7ZuHSnlf0RuZkOwWA=='
CHART=chart.js@4.6.1
CHART_SHA='sha512-hJyniucsFmq//EvXYvJ6c6mahPoI3kaxdjVH8awTaJ/fDNWeSqqqArixMJWkWNN6fcYvPU3HneSANFNYtRi61g=='

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
fetch() {  # fetch SPEC SHA DIR: npm pack SPEC, check its integrity, unpack it into DIR
  local tgz got
  tgz="$(npm pack --silent "$1" 2>/dev/null | tail -n 1)"
  got="sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)"
  if [ "$got" != "$2" ]; then echo "vendor-ui: $1: integrity $got, expected $2" >&2; exit 1; fi
  mkdir -p "$3" && tar xzf "$tgz" -C "$3"
}
fetch "$DAGRE" "$DAGRE_SHA" dagre
fetch "$GRAPHLIB" "$GRAPHLIB_SHA" graphlib
fetch "$CHART" "$CHART_SHA" chart
mkdir -p "$dest"
# drop the sourceMappingURL comment: the maps are not vendored
grep -v '^//# sourceMappingURL=' dagre/package/dist/dagre.min.js > "$dest/dagre.min.js"
grep -v '^//# sourceMappingURL=' chart/package/dist/chart.umd.min.js > "$dest/chart.umd.min.js"
{ cat dagre/package/LICENSE; printf '\n---- @dagrejs/graphlib (bundled in dagre.min.js) ----\n\n'; cat graphlib/package/LICENSE; } \
  > "$dest/dagre.LICENSE"
cp chart/package/LICENSE.md "$dest/chart.js.LICENSE"
echo "vendor-ui: $DAGRE, $CHART -> $dest"
ls -l "$dest"
