# shellcheck shell=bash
# Shared by podman.sh and slurm.sh (sourced; set ME to the script's name first).

die() { echo "$ME: error: $*" >&2; exit 1; }
note() { echo "$ME: $*" >&2; }

# wait_until SECONDS COMMAND...: poll COMMAND every 50 ms until it succeeds; 1 on deadline.
wait_until() {
    local limit=$1; shift
    local deadline=$(( ${EPOCHREALTIME/./} + limit * 1000000 ))
    until "$@"; do
        (( ${EPOCHREALTIME/./} < deadline )) || return 1
        sleep 0.05
    done
}

# gone PID: true once PID has exited; a zombie counts as gone (daemons are re-parented to pid 1,
# which may take a while to reap them, and kill -0 still succeeds on a zombie)
gone() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    stat=${stat##*) }
    [[ ${stat:0:1} == Z ]]
}
