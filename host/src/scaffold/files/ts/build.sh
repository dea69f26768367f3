#!/usr/bin/env bash
# Builds @NAME@.wasm: tsc type-checks src/ (a type error stops here) and compiles it into
# dist/, then componentize-js builds dist/app.js against the WIT the inrun-sdk package
# ships. The first run installs package.json's dependencies (`npm install`); needs node
# and npm.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
if [[ ! -d node_modules/typescript || package.json -nt node_modules ]]; then
  npm install --no-audit --no-fund --loglevel=error </dev/null
  touch node_modules
fi
rm -rf dist
node node_modules/typescript/bin/tsc -p tsconfig.json </dev/null
# componentize-js through the SDK's componentize.mjs: the same command line, with the
# strings the plugin hands to the host encoded natively (much cheaper per call).
# http and fetch-event would import wasi:http, which the host does not provide.
node node_modules/inrun-sdk/componentize.mjs dist/app.js \
  --wit node_modules/inrun-sdk/wit/0.2.0 --world-name reconciler --disable http fetch-event \
  --out "@NAME@.wasm" </dev/null
echo "built @NAME@.wasm"
