#!/usr/bin/env bash
# `make test` as a new user runs it on a fresh clone, with the test servers treated as
# absent, timed, ending with the sum of cargo's `test result:` lines.
#
#   scripts/fresh-test.sh                   # a fresh clone of HEAD, make test (cold: ~30 min on 2 cores)
#   CARGO_TARGET_DIR=$PWD/target scripts/fresh-test.sh   # the same, reusing a warm build
#   scripts/fresh-test.sh --install-only    # only make's first step, the install path (a minute or two)
#   scripts/fresh-test.sh --check-only      # only the paths that install nothing (seconds)
#   ... --here                              # this checkout as it is instead of a clone of HEAD
#
# How the test servers are made absent: `make test` installs the Debian packages that
# tests/services/missing.sh reports missing (through tests/services/install.sh). This
# script sets INRUN_SERVICES_ASSUME_MISSING=1, which makes missing.sh report all of them
# missing, so make's first step runs the whole install path (apt-get update, then
# apt-get install of every package) before any build. On a machine where they were never
# installed, that is what happens without the variable; on one where they are, apt-get
# has nothing to download, so the run proves the path and the tests, not the download.
# Nothing is removed from the machine. The Go tools' caches (~/.cache/inrun) are reused
# when present; see tests/controlplane/build.sh and tests/tools/build-helm.sh to move them.
#
# --check-only runs no build and installs nothing. In the clone it checks that:
#   - tests/services/missing.sh answers (prints what this machine lacks);
#   - `make -j4 test` for a user who can neither be root nor use passwordless sudo
#     (INRUN_SERVICES_ASSUME_NO_ROOT=1, with everything assumed missing) stops at once with
#     the one message naming the packages and `sudo tests/services/install.sh`, having
#     started no other target (make --trace) and called none of cargo, rustup, go,
#     python3, node, npm, clang or apt-get (stand-ins on PATH that fail and record);
#   - run as root with setpriv and a `nobody` user, the same for a real non-root user with
#     no variable for it (here `sudo -n true` must fail for nobody).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

mode=test here=0
for arg in "$@"; do
  case "$arg" in
    --check-only) mode=check ;;
    --install-only) mode=install ;;
    --here) here=1 ;;
    *)
      echo "usage: $0 [--check-only|--install-only] [--here]" >&2
      exit 2
      ;;
  esac
done

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

if [[ $here == 1 ]]; then
  cd "$repo"
  where="this checkout"
else
  git clone -q "$repo" "$work/inrun"
  cd "$work/inrun"
  where="a fresh clone of HEAD"
fi
export INRUN_SERVICES_ASSUME_MISSING=1

case "$mode" in
  check)
    fail=0
    echo "--- tests/services/missing.sh on this machine"
    if now="$(INRUN_SERVICES_ASSUME_MISSING='' tests/services/missing.sh)"; then
      echo "nothing missing"
    else
      echo "missing: $now"
    fi

    # Stand-ins that record the call and fail: nothing past the install step may run.
    stand="$work/stand-ins"
    calls="$work/calls"
    mkdir -p "$stand"
    : >"$calls"
    for tool in cargo rustup go python python3 pip pip3 node npm npx clang apt-get apt; do
      printf '#!/bin/sh\necho "%s $*" >>"%s"\necho "%s called: make test went past its first step" >&2\nexit 127\n' \
        "$tool" "$calls" "$tool" >"$stand/$tool"
      chmod +x "$stand/$tool"
    done
    chmod -R a+rX "$work"
    chmod a+w "$calls"
    expect_stop() { # label, then the command that runs make
      local label=$1 out rc=0 start=$SECONDS
      shift
      echo "--- make -j4 test, $label"
      out="$("$@" 2>&1)" || rc=$?
      echo "$out" | sed 's/^/  | /'
      local took=$((SECONDS - start)) problems=()
      [[ $rc != 0 ]] || problems+=("make exited 0")
      grep -q "not installed: postgresql redis-server prometheus docker-registry apache2-utils openssl chromium\." <<<"$out" ||
        problems+=("no message naming every package")
      grep -qF 'sudo tests/services/install.sh' <<<"$out" || problems+=("no install command in the message")
      # --trace: "Makefile:N: target 'T' does not exist" or "... update target 'T' due to: ...".
      local others
      others="$(grep -oE "^Makefile:[0-9]+: (update )?target '[^']+'" <<<"$out" |
        grep -oE "'[^']+'" | grep -vxE "'(test-services|test)'" | tr '\n' ' ' || true)"
      [[ -z $others ]] || problems+=("make started other targets: $others")
      grep -qE "^Makefile:[0-9]+: .*target 'test-services'" <<<"$out" ||
        problems+=("make --trace shows no test-services")
      [[ ! -s $calls ]] || problems+=("called: $(tr '\n' ';' <"$calls")")
      : >"$calls"
      if ((${#problems[@]})); then
        echo "FAIL ($label, ${took}s): ${problems[*]}"
        fail=1
      else
        echo "ok ($label): stopped with exit $rc in ${took}s, before any build"
      fi
    }
    expect_stop "INRUN_SERVICES_ASSUME_NO_ROOT=1" \
      env PATH="$stand:$PATH" INRUN_SERVICES_ASSUME_NO_ROOT=1 make -j4 --trace test </dev/null
    as_nobody=()
    if [[ $(id -u) == 0 ]] && command -v setpriv >/dev/null 2>&1 && id nobody >/dev/null 2>&1; then
      as_nobody=(setpriv --reuid="$(id -u nobody)" --regid="$(id -g nobody)" --clear-groups)
    fi
    if ((${#as_nobody[@]})) && "${as_nobody[@]}" test -r Makefile -a -x tests/services/missing.sh; then
      # The real sudo, if any: nobody is allowed no passwordless sudo.
      expect_stop "as the user nobody" "${as_nobody[@]}" \
        env -i PATH="$stand:$PATH" HOME="$work" INRUN_SERVICES_ASSUME_MISSING=1 \
        make -j4 --trace test </dev/null
    else
      echo "--- as a real non-root user: skipped (needs root, setpriv, a nobody user, and this tree readable by nobody)"
    fi
    exit "$fail"
    ;;
  install)
    start=$SECONDS
    make test-services </dev/null
    echo "make test-services in $where, every package assumed missing: $((SECONDS - start))s"
    if now="$(INRUN_SERVICES_ASSUME_MISSING='' tests/services/missing.sh)"; then
      echo "afterwards nothing is missing"
    else
      echo "afterwards still missing: $now"
      exit 1
    fi
    ;;
  test)
    if [[ $here == 0 ]]; then
      export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$work/target}"
      where="$where (CARGO_TARGET_DIR=$CARGO_TARGET_DIR)"
    fi
    log="$(mktemp "${TMPDIR:-/tmp}/fresh-test.XXXXXX.log")"
    start=$SECONDS
    rc=0
    make test </dev/null 2>&1 | tee "$log" || rc=$?
    took=$((SECONDS - start))
    # cargo prints one `test result: ok. N passed; M failed; K ignored; ...` per binary.
    read -r passed failed ignored binaries < <(awk '/^test result:/ {
        for (i = 1; i <= NF; i++) {
          if ($(i + 1) ~ /^passed;?$/) p += $i
          if ($(i + 1) ~ /^failed;?$/) f += $i
          if ($(i + 1) ~ /^ignored;?$/) g += $i
        }
        n++
      } END { print p + 0, f + 0, g + 0, n + 0 }' "$log")
    echo "make test in $where, test servers assumed missing: exit $rc in $((took / 60))m $((took % 60))s"
    echo "$passed passed, $failed failed, $ignored ignored ($binaries test binaries); log: $log"
    exit "$rc"
    ;;
esac
