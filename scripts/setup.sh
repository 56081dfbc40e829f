#!/usr/bin/env bash
# Set kbench up on this machine, then run the main job or the test suite:
#   scripts/setup.sh main [host.compare options]   system tools, .venv with the main job's packages, then a sweep
#                                                  (CPU rows, MCU rows from the board twin, GPU rows if there is one)
#   scripts/setup.sh test [pytest options]         the same plus the test tools, then the whole test suite
# Idempotent: a tool already present is not installed again, and pip runs only when pyproject.toml changed.
set -euo pipefail

mode=${1:-}
case "$mode" in
  main|test) shift ;;
  *) echo "usage: scripts/setup.sh main|test [options passed on]" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."

say() { echo "kbench setup: $*" >&2; }

# Another apt may hold the package locks (on a fresh Ubuntu, unattended upgrades do for minutes after boot): apt-get
# would exit 100 at once, so wait for them, up to APT_WAIT_S seconds, saying so once. apt-get waits for dpkg's lock
# itself with DPkg::Lock::Timeout (apt >= 1.9.11; older ones ignore it), but not every apt waits so for the lists lock
# of `apt-get update`, so both are also tried here first: POSIX record locks, taken as apt takes them, without waiting.
APT_WAIT_S=600
apt_wait=(-o "DPkg::Lock::Timeout=$APT_WAIT_S")
apt_locks=(/var/lib/apt/lists/lock /var/lib/dpkg/lock-frontend /var/lib/dpkg/lock)
apt_busy() {
  command -v python3 >/dev/null || return 1
  "${sudo[@]}" python3 -c '
import errno, fcntl, os, sys
for path in sys.argv[1:]:
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        continue  # no lock file yet: nobody holds it
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EAGAIN):
            sys.exit(0)
    finally:
        os.close(fd)
sys.exit(1)' "${apt_locks[@]}"
}
wait_for_apt() {
  local waited=0
  while apt_busy; do
    if [ "$waited" = 0 ]; then
      say "another apt or dpkg holds the package lock (unattended upgrades?); waiting for it, up to ${APT_WAIT_S} s"
    fi
    [ "$waited" -ge "$APT_WAIT_S" ] && break  # apt-get then says who holds it and exits
    sleep 2
    waited=$((waited + 2))
  done
  [ "$waited" = 0 ] || say "the package lock is free after ${waited} s"
}

# System tools from Debian's packages: the Cortex-M4 compiler (native module, board twin), valgrind (cache
# simulation when the CPU has no usable hardware counters), yosys (gate counts of the datapath's RTL; its ABC step
# works in Debian's build, not in the yowasp wheel) and verilator (codesign/rtl/compiled.py: the RTL compiled to C++,
# for heads too large for Amaranth's Python simulator; its builds need g++ and make, which the package does not pull).
need=()
command -v arm-none-eabi-gcc >/dev/null || need+=(gcc-arm-none-eabi libnewlib-arm-none-eabi)
command -v valgrind >/dev/null || need+=(valgrind)
command -v yosys >/dev/null || need+=(yosys)
command -v verilator >/dev/null || need+=(verilator)
command -v g++ >/dev/null || need+=(g++)
command -v make >/dev/null || need+=(make)
command -v node >/dev/null || need+=(nodejs npm)  # the twin's VM: MicroPython's WebAssembly port runs under Node
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then sudo=()
  elif command -v sudo >/dev/null; then sudo=(sudo)
  else sudo=(none)
  fi
  if [ "${sudo[0]:-}" = none ] || ! command -v apt-get >/dev/null; then
    say "cannot install ${need[*]} (needs apt-get as root or with sudo); install them yourself." \
        "Without them the MCU build, --cpu-cache-sim, codesign synth and the RTL's compiled simulator report" \
        "themselves unavailable."
  else
    say "installing ${need[*]} with apt-get"
    wait_for_apt
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${apt_wait[@]}" update -qq
    wait_for_apt
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${apt_wait[@]}" install -y -qq --no-install-recommends \
      "${need[@]}" >/dev/null
  fi
fi

python=${PYTHON:-python3}
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || { say "needs Python >= 3.10 ($python is older)"; exit 1; }
# System site-packages stay visible: a machine that already has numpy, CuPy or pytest does not download them again.
[ -x .venv/bin/python ] || "$python" -m venv --system-site-packages .venv

extras=mcu,rtl
[ "$mode" = test ] && extras=mcu,rtl,cluster,dev
if command -v nvidia-smi >/dev/null && cuda=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: \([0-9]*\).*/\1/p' | head -1) && [ -n "$cuda" ]; then
  if .venv/bin/python -c 'import cupy' 2>/dev/null; then :
  elif [ "$cuda" -ge 13 ]; then extras=$extras,gpu-cuda13
  else extras=$extras,gpu
  fi
fi
# The stamp records pyproject.toml's hash and the extras installed with it; pip runs only when one is missing.
stamp=.venv/kbench.stamp
hash=$(sha256sum pyproject.toml | cut -d' ' -f1)
old_hash= old_extras=
[ -f "$stamp" ] && read -r old_hash old_extras < "$stamp"
[ "${old_hash:-}" = "$hash" ] || old_extras=
extras=$(printf '%s\n' ${old_extras//,/ } ${extras//,/ } | sort -u | paste -sd, -)
if [ "${old_hash:-}" != "$hash" ] || [ "$extras" != "${old_extras:-}" ]; then
  say "installing kbench[$extras] into .venv"
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[$extras]"
  echo "$hash $extras" > "$stamp"
fi

# The main job includes MCU rows: from the board twin unless a board (--serial) or a target list was given.
# Each option in either form: --serial PORT or --serial=PORT, --targets LIST or --targets=LIST.
twin=no
if [ "$mode" = test ]; then twin=yes
else
  add_sim=yes
  previous=
  for arg in "$@"; do
    case "$arg" in
      --sim) twin=yes; add_sim=no ;;
      --serial|--serial=*|--targets|--targets=*|--workload=list|-h|--help) add_sim=no ;;
      list) if [ "$previous" = --workload ]; then add_sim=no; fi ;;  # it prints the table and takes nothing beside
    esac
    previous=$arg
  done
  if [ "$add_sim" = yes ]; then twin=yes; set -- --sim "$@"; fi
fi

# The board twin (the main job's MCU rows, and the tests) runs the board's MicroPython code under MicroPython's
# WebAssembly port from npm, where Node is present; without it the twin's rows are skipped with the reason. A main
# job that uses no twin (a board, or targets without it) does not wait for npm.
wasm=@micropython/micropython-webassembly-pyscript@1.27.0
wasm_entry=.cache/mpy-wasm/node_modules/@micropython/micropython-webassembly-pyscript/micropython.mjs
if [ "$twin" = yes ] && command -v npm >/dev/null && [ ! -f "$wasm_entry" ]; then
  say "installing $wasm into .cache/mpy-wasm"
  npm install --silent --no-audit --no-fund --prefix .cache/mpy-wasm "$wasm" >/dev/null 2>&1 \
    || say "npm could not install $wasm; the twin's rows and tests will say so and skip"
fi
if [ "$mode" = main ]; then exec .venv/bin/python -m host.compare "$@"; fi

exec .venv/bin/python -m pytest "$@"
