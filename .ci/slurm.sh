#!/usr/bin/env bash
# A single-node SLURM cluster with accounting, on this machine, for trying and testing
# `--launcher submitit --cluster slurm` (make slurm-up / make slurm-down).
#
#   .ci/slurm.sh up      install what is missing (Debian/Ubuntu: slurm-wlm, slurmdbd, munge,
#                        mariadb-server), write the configuration, start munged, MariaDB,
#                        slurmdbd, slurmctld and slurmd, and wait for a node that takes jobs
#   .ci/slurm.sh down    stop the daemons that `up` started (by the PIDs it recorded), and
#                        only those
#   .ci/slurm.sh status  what runs, by PID, and what sinfo says
#
# Both are idempotent: `up` on a running cluster and `down` on a stopped one do nothing.
# The daemons run without systemd (policy-rc.d in containers stops the packages' own
# services from starting), each detached, with its PID kept in $STATE/pids. The
# configuration avoids cgroups (proctrack/linuxproc, task/none), so it runs in a container.
# /etc/slurm/slurm.conf is written only when missing or written by this script.
set -euo pipefail

STATE=${AVALANCHE_GSS_SLURM_STATE:-/var/lib/avalanche-gss-slurm}
PIDS=$STATE/pids
CONF=/etc/slurm/slurm.conf
DBD_CONF=/etc/slurm/slurmdbd.conf
MARK="# written by avalanche-gss .ci/slurm.sh"
PACKAGES=(slurm-wlm slurmdbd munge mariadb-server)
DAEMONS=(munged mariadbd slurmdbd slurmctld slurmd)  # started in this order, stopped in reverse
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo

say() { echo "slurm.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }

# The PID this script recorded for a daemon, if that process still runs that program.
alive() {
    local name=$1 pid
    pid=$($SUDO cat "$PIDS/$name" 2>/dev/null) || return 1
    [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] || return 1
    [ "$(cat "/proc/$pid/comm")" = "$name" ] && echo "$pid"
}

install_missing() {
    local missing=() p
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get to install them"
    say "installing ${missing[*]}"
    local start=$SECONDS
    $SUDO apt-get update -qq >/dev/null
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null
    say "installed in $((SECONDS - start)) s"
}

write_configs() {
    if [ -e "$CONF" ] && ! $SUDO grep -qF "$MARK" "$CONF"; then
        die "$CONF exists and was not written by this script; not touching it"
    fi
    local node mem
    node=$(slurmd -C | head -n 1)
    [[ $node == NodeName=* ]] || die "slurmd -C did not describe this node: $node"
    # Leave the operating system 1 GB: RealMemory must not exceed what slurmd measures.
    mem=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$node")
    node=$(sed "s/RealMemory=[0-9]*/RealMemory=$((mem > 2048 ? mem - 1024 : mem))/" <<<"$node")
    local gres="" gpus
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
    if [ "${gpus:-0}" -gt 0 ]; then
        gres="Gres=gpu:$gpus"
        printf '%s\nAutoDetect=off\nName=gpu File=/dev/nvidia[0-%d]\n' "$MARK" $((gpus - 1)) \
            | $SUDO tee /etc/slurm/gres.conf >/dev/null
    fi
    $SUDO mkdir -p "$STATE"/{ctld,spool,log} "$PIDS" /etc/slurm
    $SUDO chown slurm:slurm "$STATE"/ctld "$STATE"/log
    $SUDO tee "$CONF" >/dev/null <<EOF
$MARK
ClusterName=avalanche
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=slurm
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MailProg=/bin/true
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
MinJobAge=60
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobCompType=jobcomp/none
${gres:+GresTypes=gpu}
$node NodeAddr=127.0.0.1 State=UNKNOWN $gres
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
    $SUDO tee "$DBD_CONF" >/dev/null <<EOF
$MARK
AuthType=auth/munge
DbdHost=localhost
SlurmUser=slurm
PidFile=$STATE/slurmdbd.pid
LogFile=$STATE/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageLoc=slurm_acct_db
StorageUser=slurm
StoragePass=slurm
EOF
    $SUDO chown slurm:slurm "$DBD_CONF"
    $SUDO chmod 600 "$DBD_CONF"
}

# Start the daemon "$@" detached (its own session, no terminal); once its PID file ($2)
# appears, record the PID it holds.
start_detached() {
    local name=$1 pidfile=$2
    shift 2
    $SUDO rm -f "$pidfile"
    $SUDO setsid "$@" </dev/null >>"$STATE/log/$name.out" 2>&1 &
    wait_for "$name" 30 $SUDO test -s "$pidfile"
    $SUDO cp "$pidfile" "$PIDS/$name"
}

# Wait up to $2 seconds for the command after it to succeed.
wait_for() {
    local what=$1 limit=$2 i
    shift 2
    for ((i = 0; i < limit * 4; i++)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.25
    done
    die "$what did not come up in $limit s (logs: $STATE/log)"
}

start_munge() {
    alive munged >/dev/null && return 0
    if pgrep -x munged >/dev/null; then
        say "munged already runs (not started here): using it"
        return 0
    fi
    [ -s /etc/munge/munge.key ] || $SUDO runuser -u munge -- mungekey --create
    $SUDO install -d -o munge -g munge -m 0755 /run/munge  # gone at every reboot
    # munged forks: its PID file names the daemon.
    $SUDO runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/munged.pid
    wait_for munged 10 test -s /run/munge/munged.pid
    $SUDO cp /run/munge/munged.pid "$PIDS/munged"
}

start_mariadb() {
    alive mariadbd >/dev/null && return 0
    if pgrep -x mariadbd >/dev/null; then
        say "mariadbd already runs (not started here): using it"
    else
        $SUDO install -d -o mysql -g mysql -m 0755 /run/mysqld  # its PID file and socket
        [ -d /var/lib/mysql/mysql ] || $SUDO mariadb-install-db --user=mysql >/dev/null
        # Its PID file in /run/mysqld: mariadbd runs as mysql and cannot write one in a
        # folder of root's.
        start_detached mariadbd /run/mysqld/mysqld.pid /usr/sbin/mariadbd --user=mysql \
            --pid-file=/run/mysqld/mysqld.pid --socket=/run/mysqld/mysqld.sock
        wait_for MariaDB 30 $SUDO mariadb -e "SELECT 1"
    fi
    $SUDO mariadb -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurm';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"
}

up() {
    if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null; then
        die "needs root (or sudo) to install packages and start the daemons"
    fi
    install_missing
    local start=$SECONDS
    write_configs
    start_munge
    start_mariadb
    alive slurmdbd >/dev/null || start_detached slurmdbd "$STATE/slurmdbd.pid" \
        /usr/sbin/slurmdbd -D
    wait_for slurmdbd 30 $SUDO sacctmgr -n show cluster
    # The cluster known to accounting before slurmctld starts: its jobs are then recorded.
    $SUDO sacctmgr -n -P show cluster format=cluster | grep -qx avalanche \
        || $SUDO sacctmgr -i add cluster avalanche >/dev/null
    alive slurmctld >/dev/null || start_detached slurmctld "$STATE/slurmctld.pid" \
        /usr/sbin/slurmctld -D
    alive slurmd >/dev/null || start_detached slurmd "$STATE/slurmd.pid" /usr/sbin/slurmd -D
    wait_node
    say "up in $((SECONDS - start)) s: $(sinfo -h -o '%N %T %c CPUs %m MB')"
}

# Wait for a node that takes jobs: idle, or busy with jobs already (mixed, allocated,
# completing: `up` while a sweep runs); a node down, drained or not responding (its state
# marked `*`) does not count.
wait_node() {
    wait_for "a node that takes jobs (idle, or busy: mixed, allocated)" 60 \
        bash -c 'sinfo -h -o %T | grep -qxE "idle|mixed|allocated|completing"'
}

down() {
    local i name pid stopped=0
    for ((i = ${#DAEMONS[@]} - 1; i >= 0; i--)); do
        name=${DAEMONS[i]}
        if pid=$(alive "$name"); then
            $SUDO kill -TERM "$pid"
            for _ in $(seq 100); do [ -e "/proc/$pid" ] || break; sleep 0.1; done
            if [ -e "/proc/$pid" ]; then
                say "$name ($pid) did not stop in 10 s: killing it"
                $SUDO kill -KILL "$pid"
            fi
            stopped=$((stopped + 1))
        fi
        $SUDO rm -f "$PIDS/$name"
    done
    say "stopped $stopped daemon(s)"
}

status() {
    local name pid
    for name in "${DAEMONS[@]}"; do
        if pid=$(alive "$name"); then echo "$name: $pid"; else echo "$name: not started here"; fi
    done
    sinfo 2>&1 || true
}

# Sourced (by a test), it only defines the functions above.
[[ ${BASH_SOURCE[0]} != "$0" ]] && return 0

case ${1:-} in
    up) up ;;
    down) down ;;
    status) status ;;
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
