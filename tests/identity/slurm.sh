#!/usr/bin/env bash
# Real single-node Slurm fixture for gpudash's workload-identity tests.
#
#   slurm.sh start DIR              munged + slurmctld + slurmd of a one-node cluster (node =
#                                   `hostname -s`, partition "gpu"), config/state/logs in DIR;
#                                   waits until sinfo shows the node idle; prints DIR/slurm.conf
#                                   (export SLURM_CONF=<that> to use squeue/scontrol yourself)
#   slurm.sh job USER ACCOUNT [SRUN-ARGS...]
#                                   srun, as USER (created if missing), a job in partition gpu
#                                   running `sleep`; prints the host pid of that sleep once it
#                                   runs.  ACCOUNT "" = no --account.  SRUN-ARGS go to srun
#                                   (e.g. --job-name train).
#   slurm.sh stop [DIR]             cancel the jobs, stop the daemons, remove the job cgroups
#
# The commands after `start` find DIR in $GPUDASH_SLURM_DIR, else in the file
# ${TMPDIR:-/tmp}/gpudash-slurm.dir that `start` writes.  Must run as root.  DIR is made
# world-traversable (chmod 755), since the job's user must reach slurm.conf and munge's socket.
# Knobs: GPUDASH_SLURM_TIMEOUT (seconds, default 30), GPUDASH_SLURM_PORT (slurmctld's port,
# slurmd uses the next one; default 6817), GPUDASH_SLURM_PROCTRACK (cgroup, the default:
# proctrack/cgroup + task/cgroup, or linuxproc: proctrack/linuxproc + task/none, no job cgroups),
# GPUDASH_SLEEP (the job's sleep, default 3600 s).
set -euo pipefail

TIMEOUT=${GPUDASH_SLURM_TIMEOUT:-30}
POINTER=${TMPDIR:-/tmp}/gpudash-slurm.dir
PORT=${GPUDASH_SLURM_PORT:-6817}
PROCTRACK=${GPUDASH_SLURM_PROCTRACK:-cgroup}
NODE=$(hostname -s)

ME=slurm.sh
# shellcheck source=tests/identity/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"



resolve_dir() {   # sets DIR from $1, $GPUDASH_SLURM_DIR or the pointer file
    DIR=${1:-${GPUDASH_SLURM_DIR:-}}
    if [[ -z $DIR && -f $POINTER ]]; then
        DIR=$(<"$POINTER")
        [[ -d $DIR ]] || { rm -f "$POINTER"; DIR=; }   # stale: its directory was deleted
    fi
    [[ -n $DIR ]] || return 1
    DIR=$(cd "$DIR" 2>/dev/null && pwd) || die "directory '$DIR' does not exist"
    export SLURM_CONF=$DIR/slurm.conf
}

daemon_pid() {   # daemon_pid NAME: pid of DIR's live NAME (munged, slurmctld, slurmd), 1 if none
    local pid comm
    [[ -f $DIR/$1.pid ]] || return 1
    pid=$(<"$DIR/$1.pid")
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
    [[ $comm == "$1" ]] && ! gone "$pid" || return 1
    echo "$pid"
}

ctld_up() { scontrol ping 2>/dev/null | grep -q 'is UP'; }
fatal_in() { grep -q 'fatal:' "$DIR/$1.log" 2>/dev/null; }   # the daemon gave up
ctld_up_or_fatal() { ctld_up || fatal_in slurmctld; }
idle_or_fatal() { node_idle || fatal_in slurmctld || fatal_in slurmd; }
port_busy() { (exec 3<> "/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
node_state() { sinfo -h -n "$NODE" -o %T 2>/dev/null; }
node_idle() { [[ $(node_state) == idle ]]; }
munge_ok() { munge -n -S "$DIR/munge.sock" 2>/dev/null | unmunge -S "$DIR/munge.sock" >/dev/null 2>&1; }

fail_with_logs() {   # fail_with_logs MESSAGE: print the message and the logs' error lines, exit 1
    note "$1"
    local f
    for f in munged.log slurmctld.log slurmd.log; do
        [[ -f $DIR/$f ]] || continue
        note "--- last error lines of $DIR/$f:"
        { grep -iE 'error|fatal|fail' "$DIR/$f" | grep -vE 'pmix|MPI: Cannot create context' | tail -n 12; } >&2 || true
    done
    exit 1
}

write_config() {
    local hw
    hw=$(slurmd -C 2>/dev/null | head -n 1) || true
    # the hardware as slurmd sees it (CPUs, sockets, cores, threads), so the node is not drained;
    # RealMemory low on purpose: memory is no consumable resource here
    hw=$(sed -E 's/^NodeName=[^ ]+ //; s/ RealMemory=[0-9]+//' <<< "$hw")
    [[ $hw == CPUs=* ]] || hw="CPUs=$(nproc)"
    local proctrack=proctrack/cgroup task=task/cgroup acct=jobacct_gather/cgroup
    if [[ $PROCTRACK == linuxproc ]]; then
        proctrack=proctrack/linuxproc task=task/none acct=jobacct_gather/linux
    fi
    cat > "$DIR/slurm.conf" <<EOF
# written by tests/identity/slurm.sh
ClusterName=gpudash
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/munge.sock
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=$proctrack
TaskPlugin=$task
JobAcctGatherType=$acct
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
KillWait=2
MinJobAge=5
NodeName=$NODE NodeAddr=127.0.0.1 $hw State=UNKNOWN
PartitionName=gpu Nodes=$NODE Default=YES MaxTime=INFINITE OverSubscribe=FORCE:64 State=UP
EOF
    # read by slurmd/slurmstepd from slurm.conf's directory
    cat > "$DIR/cgroup.conf" <<EOF
CgroupPlugin=autodetect
CgroupMountpoint=/sys/fs/cgroup
ConstrainCores=yes
ConstrainRAMSpace=yes
ConstrainDevices=yes
EOF
    chmod 644 "$DIR/slurm.conf" "$DIR/cgroup.conf"
}

cmd_start() {
    [[ $# -eq 1 ]] || die "usage: slurm.sh start DIR"
    [[ $(id -u) -eq 0 ]] || die "must run as root"
    [[ $PROCTRACK =~ ^(cgroup|linuxproc)$ ]] \
        || die "GPUDASH_SLURM_PROCTRACK must be cgroup or linuxproc, not '$PROCTRACK'"
    local b
    for b in munged munge unmunge slurmctld slurmd sinfo srun scontrol squeue scancel runuser; do
        command -v "$b" >/dev/null || die "$b is not installed (apt-get install munge slurm-wlm)"
    done
    mkdir -p "$1"
    resolve_dir "$1"
    if daemon_pid munged >/dev/null && daemon_pid slurmctld >/dev/null && daemon_pid slurmd >/dev/null \
            && node_idle; then
        echo "$DIR" > "$POINTER"
        echo "$SLURM_CONF"
        return
    fi
    stop_daemons   # whatever half of an earlier start is still there
    local port
    for port in "$PORT" $((PORT + 1)); do
        ! port_busy "$port" || die "port $port is in use (another Slurm? set GPUDASH_SLURM_PORT)"
    done
    chmod 755 "$DIR"
    local d=$DIR
    while [[ $d != / ]]; do   # the job's user must traverse to slurm.conf and munge.sock
        [[ $(( 0$(stat -c %a "$d") & 1 )) -eq 1 ]] || die "$d is not traversable by other users (needs o+x)"
        d=$(dirname "$d")
    done
    mkdir -p "$DIR/state" "$DIR/spool" "$DIR/jobs"
    local log
    for log in munged slurmctld slurmd; do   # a fresh log: fatal_in reads it
        [[ -f $DIR/$log.log ]] && mv -f "$DIR/$log.log" "$DIR/$log.log.old"
    done
    if [[ ! -s $DIR/munge.key ]]; then
        head -c 1024 /dev/urandom > "$DIR/munge.key"
        chmod 400 "$DIR/munge.key"
    fi
    write_config

    # munged forks and returns once its socket is ready; --force: it runs as root, in /tmp
    munged --force --key-file="$DIR/munge.key" --socket="$DIR/munge.sock" \
        --pid-file="$DIR/munged.pid" --log-file="$DIR/munged.log" --seed-file="$DIR/munged.seed" \
        2>> "$DIR/munged.log" || fail_with_logs "munged did not start"
    wait_until "$TIMEOUT" munge_ok || fail_with_logs "munge credentials do not work"
    # -c: start from a clean state (no jobs or node states of an earlier run in this DIR)
    slurmctld -c -f "$SLURM_CONF" 2>> "$DIR/slurmctld.log" || fail_with_logs "slurmctld did not start"
    # slurmd registers at once and retries only after a second: start it once slurmctld answers
    wait_until "$TIMEOUT" ctld_up_or_fatal || true
    ctld_up || fail_with_logs "slurmctld does not answer (scontrol ping)"
    slurmd -c -f "$SLURM_CONF" 2>> "$DIR/slurmd.log" || fail_with_logs "slurmd did not start"
    if ! wait_until "$TIMEOUT" idle_or_fatal || ! node_idle; then
        local why
        why="node $NODE is '$(node_state)', not idle, after ${TIMEOUT}s"
        daemon_pid slurmctld >/dev/null || why="slurmctld exited"
        daemon_pid slurmd >/dev/null || why="slurmd exited"
        fail_with_logs "$why"
    fi
    echo "$DIR" > "$POINTER"
    echo "$SLURM_CONF"
}

job_pid() {   # job_pid JOBID: the pid of the job's sleep, once the task has exec'd it
    local pid
    for pid in $(scontrol listpids "$1" 2>/dev/null | awk 'NR > 1 { print $1 }'); do
        [[ $(cat "/proc/$pid/comm" 2>/dev/null) == sleep ]] && { echo "$pid"; return 0; }
    done
    return 1
}

cmd_job() {
    [[ $# -ge 2 ]] || die "usage: slurm.sh job USER ACCOUNT [SRUN-ARGS...]"
    local user=$1 account=$2; shift 2
    resolve_dir || die "no cluster directory: run 'slurm.sh start DIR' first (or set GPUDASH_SLURM_DIR)"
    if ! daemon_pid slurmctld >/dev/null || ! daemon_pid slurmd >/dev/null; then
        die "the Slurm daemons of $DIR are not running: run 'slurm.sh start $DIR'"
    fi
    if ! id -u "$user" >/dev/null 2>&1; then
        useradd --no-create-home --shell /usr/sbin/nologin --user-group "$user" \
            || die "useradd $user failed"
        note "created user $user (uid $(id -u "$user"))"
    fi
    # --chdir /: the caller's directory may be closed to USER (slurmstepd would complain)
    local args=(--partition gpu --nodes 1 --ntasks 1 --job-name gpudash-identity --chdir / --unbuffered)
    [[ -n $account ]] && args+=(--account "$account")
    local out
    out=$(mktemp "$DIR/jobs/srun.XXXXXX")
    chmod 644 "$out"
    # The task prints its job id, then becomes the sleep (same pid).  srun (the client) stays
    # in the background, in its own session; the step ends if it dies.
    # shellcheck disable=SC2016  # $SLURM_JOB_ID and $0 are for the job's shell
    setsid runuser -u "$user" -- env SLURM_CONF="$SLURM_CONF" \
        srun "${args[@]}" "$@" /bin/sh -c 'echo "gpudash-job $SLURM_JOB_ID"; exec sleep "$0"' \
        "${GPUDASH_SLEEP:-3600}" > "$out" 2>&1 < /dev/null &
    local srun_pid=$!
    echo "$srun_pid" > "$out.pid"
    local jobid='' pid=''
    # shellcheck disable=SC2317
    got_jobid() { jobid=$(sed -n 's/^gpudash-job \([0-9][0-9]*\)$/\1/p' "$out" | head -n 1); [[ -n $jobid ]]; }
    # shellcheck disable=SC2317
    started_or_failed() { got_jobid || gone "$srun_pid"; }
    wait_until "$TIMEOUT" started_or_failed || true
    if ! got_jobid; then
        if gone "$srun_pid"; then note "srun failed; it said:"
        else note "the job did not start within ${TIMEOUT}s; srun said:"; fi
        tail -n 20 "$out" >&2
        kill -9 -- "-$srun_pid" 2>/dev/null || true   # the process group setsid made
        exit 1
    fi
    # shellcheck disable=SC2317
    got_pid() { pid=$(job_pid "$jobid"); }
    wait_until "$TIMEOUT" got_pid || die "job $jobid runs, but scontrol listpids shows no sleep"
    local env key
    env=$(tr '\0' '\n' < "/proc/$pid/environ")
    for key in SLURM_JOB_ID SLURM_JOB_USER SLURM_JOB_PARTITION ${account:+SLURM_JOB_ACCOUNT}; do
        grep -q "^$key=" <<< "$env" || die "the environment of job $jobid's pid $pid lacks $key"
    done
    # for stop, should slurmctld be gone by then: the sleep and its slurmstepd
    echo "$pid $(ps -o ppid= -p "$pid" | tr -d ' ')" > "$out.task"
    note "job $jobid: pid $pid, user $user${account:+, account $account} (srun output: $out)"
    echo "$pid"
}

stop_daemons() {
    local pid name
    # the jobs first: slurmstepd removes a job's cgroups when its tasks end
    if daemon_pid slurmctld >/dev/null; then
        scancel --partition gpu 2>/dev/null || true
        # (a zombie slurmstepd is done: pid 1 reaps it only after a while here)
        # shellcheck disable=SC2317,SC2009
        no_jobs() { [[ -z $(squeue -h -o %i 2>/dev/null) ]] && ! ps -C slurmstepd -o stat= | grep -qv '^Z'; }
        wait_until 15 no_jobs || note "jobs still there after 15s: $(squeue -h 2>&1 | tr '\n' ' ')"
    fi
    for name in slurmd slurmctld munged; do
        pid=$(daemon_pid "$name") || continue
        kill "$pid" 2>/dev/null || true
        if ! wait_until 10 gone "$pid"; then
            note "$name ($pid) ignored SIGTERM for 10s; SIGKILL"
            kill -9 "$pid" 2>/dev/null || true
        fi
    done
    # job processes left over when scancel could not run (slurmctld already gone)
    local f
    for f in "$DIR"/jobs/*.task; do
        [[ -f $f ]] || continue
        for pid in $(<"$f"); do
            if [[ $(cat "/proc/$pid/comm" 2>/dev/null) =~ ^(sleep|slurmstepd)$ ]] && ! gone "$pid"; then
                note "killing leftover job process $pid ($(cat "/proc/$pid/comm"))"
                kill -9 "$pid" 2>/dev/null || true
            fi
        done
        rm -f "$f"
    done
    # srun clients exit by themselves once their step is gone; stragglers (their daemons died
    # first) would wait for slurmctld for minutes: SIGKILL the runuser and srun processes of
    # the process group that `job` started (setsid: the group's id is the runuser's pid)
    local pgids=() p g c
    for f in "$DIR"/jobs/*.pid; do
        [[ -f $f ]] || continue
        pgids+=("$(<"$f")")
        rm -f "$f"
    done
    if (( ${#pgids[@]} )); then
        while read -r p g c; do
            if [[ $c =~ ^(runuser|srun)$ && " ${pgids[*]} " == *" $g "* ]]; then
                kill -9 "$p" 2>/dev/null || true
            fi
        done < <(ps -eo pid=,pgid=,comm=)
    fi
    rm -f "$DIR/munge.sock" "$DIR/munge.sock.lock"
    # empty job cgroups left behind (slurm_<node> on Debian's multiple-slurmd build, else slurm)
    local c
    for c in /sys/fs/cgroup/*/slurm_"$NODE" /sys/fs/cgroup/*/slurm; do
        [[ -d $c ]] || continue
        find "$c" -depth -mindepth 1 -type d -exec rmdir {} + 2>/dev/null || true
        rmdir "$c" 2>/dev/null || true
    done
}

cmd_stop() {
    [[ $# -le 1 ]] || die "usage: slurm.sh stop [DIR]"
    if ! resolve_dir "${1:-}"; then note "nothing to stop (no cluster directory known)"; return; fi
    stop_daemons
    if [[ -f $POINTER && $(<"$POINTER") == "$DIR" ]]; then rm -f "$POINTER"; fi
}

case ${1:-} in
    start) shift; cmd_start "$@" ;;
    job) shift; cmd_job "$@" ;;
    stop) shift; cmd_stop "$@" ;;
    *) die "usage: slurm.sh start DIR | job USER ACCOUNT [SRUN-ARGS...] | stop [DIR]" ;;
esac
