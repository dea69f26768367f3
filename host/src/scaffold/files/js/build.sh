#!/usr/bin/env bash
# Builds @NAME@.wasm with componentize-js, against the WIT the inrun-sdk package ships.
# The first run installs package.json's dependencies (`npm install`); needs node and npm.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
if [[ ! -d node_modules/@bytecodealliance/componentize-js || package.json -nt node_modules ]]; then
  npm install --no-audit --no-fund --loglevel=error </dev/null
  touch node_modules
fi
# componentize-js through the SDK's componentize.mjs: the same command line, with the
# strings the plugin hands to the host encoded natively (much cheaper per call).
# http and fetch-event would import wasi:http, which the host does not provide.
node node_modules/inrun-sdk/componentize.mjs app.js \
  --wit node_modules/inrun-sdk/wit/0.2.0 --world-name reconciler --disable http fetch-event \
  --out "@NAME@.wasm" </dev/null
echo "built @NAME@.wasm"
