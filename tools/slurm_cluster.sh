#!/usr/bin/env bash
# A throw-away single-node Slurm cluster on this machine, from Debian's packages (munge, slurmctld, slurmd), for
# trying the Slurm profile (tests/test_slurm.py). Needs root. Not for a shared machine: it writes /etc/slurm/slurm.conf.
#
#   tools/slurm_cluster.sh up      install the packages if missing, write slurm.conf, start munged, slurmctld, slurmd
#   tools/slurm_cluster.sh status  sinfo; exit 0 when the node is idle or busy
#   tools/slurm_cluster.sh down    stop the three daemons (the packages and slurm.conf stay)
#
# One partition, `debug`, holding this host with every CPU and 90% of the memory. No accounting database:
# use `--slurm-status-command squeue` (MinJobAge keeps finished jobs visible to squeue for 10 minutes).
set -euo pipefail

STATE=${GPT1_SLURM_STATE:-/var/lib/gpt1-slurm}
CONF=/etc/slurm/slurm.conf
NODE=$(hostname -s)

install_packages() {
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null && return
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends slurmctld slurmd slurm-client munge
}

write_config() {
    local cpus mem_mb
    cpus=$(nproc)
    mem_mb=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
    mkdir -p "$STATE/ctld" "$STATE/d" /var/log/slurm /etc/slurm
    cat >"$CONF" <<EOF
# Written by gpt1's tools/slurm_cluster.sh: a single-node test cluster.
ClusterName=gpt1
SlurmctldHost=$NODE
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MpiDefault=none
ReturnToService=2
MinJobAge=600
# Jobs run at the nice value of their sbatch: a Snakemake started under nice keeps a test cluster polite.
PropagatePrioProcess=1
NodeName=$NODE CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
}

start_munge() {
    mkdir -p /run/munge /var/lib/munge /var/log/munge
    chown munge:munge /run/munge /var/lib/munge /var/log/munge
    [ -s /etc/munge/munge.key ] || mungekey --create
    chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
    pgrep -u munge -x munged >/dev/null || runuser -u munge -- /usr/sbin/munged
}

wait_for_node() {
    local _
    for _ in $(seq 60); do
        if sinfo -h -N -o '%t' 2>/dev/null | grep -Eq '^(idle|mix|alloc)'; then
            sinfo
            return 0
        fi
        sleep 1
    done
    echo "slurm_cluster: the node did not come up within 60 s; see /var/log/slurm/" >&2
    sinfo >&2 || true
    return 1
}

up() {
    [ "$(id -u)" = 0 ] || { echo "slurm_cluster: needs root" >&2; exit 1; }
    install_packages
    write_config
    start_munge
    [ -f "$STATE/slurmctld.pid" ] && kill -0 "$(cat "$STATE/slurmctld.pid")" 2>/dev/null || slurmctld
    [ -f "$STATE/slurmd.pid" ] && kill -0 "$(cat "$STATE/slurmd.pid")" 2>/dev/null || slurmd
    wait_for_node
}

stop_pidfile() {
    local pidfile=$1 pid _
    [ -f "$pidfile" ] || return 0
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 30); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.5
    done
    rm -f "$pidfile"
}

down() {
    scancel --user="$(id -un)" 2>/dev/null || true
    stop_pidfile "$STATE/slurmd.pid"
    stop_pidfile "$STATE/slurmctld.pid"
    stop_pidfile /run/munge/munged.pid
}

status() {
    sinfo && sinfo -h -N -o '%t' | grep -Eq '^(idle|mix|alloc)'
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    status) status ;;
    *) echo "usage: $0 up|status|down" >&2; exit 2 ;;
esac
