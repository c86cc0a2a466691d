#!/bin/bash
# tests/vm/selftest.sh: smoke test of the soft-RoCE VM harness.  Exits 0 only
# when RDMA really worked: the rxe device is ACTIVE, rping client and server
# exchanged every ping, and ib_write_bw moved data with a non-zero bandwidth.
#
# On the host it re-runs itself through the harness:
#   tests/vm/selftest.sh [RUN-OPTIONS...]            one VM, loopback on rxe0
#   tests/vm/selftest.sh --two-vms [RUN-OPTIONS...]  VM 1 (client) <-> VM 2 (servers)
# Inside a VM (RDMASOCK_VM=1, e.g. "tests/vm/run -- tests/vm/selftest.sh") it
# runs the checks.  With --nordma-ns it also checks that rdma_cm to the
# namespace without RDMA gets no answer.  Lines are prefixed "selftest:".

set -euo pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")
HERE=$(dirname "$SELF")
PINGS=5
BW_SIZE=65536
BW_ITERS=2000
RPING_PORT=7471
BW_PORT=18515

say() { printf 'selftest: %s\n' "$*"; }

fail() {
    say "FAIL: $*"
    exit 1
}

# elapsed START_US: seconds since START_US, one decimal.
now_us() { printf -v "$1" '%s' "${EPOCHREALTIME//[.,]/}"; }
elapsed() {
    local now
    now_us now
    printf '%d.%d' $(((now - $1) / 1000000)) $(((now - $1) % 1000000 / 100000))
}

# retry SECS CMD...: run CMD until it succeeds or SECS have passed (the
# server side may not listen yet).
retry() {
    local secs=$1 start now
    shift
    now_us start
    while :; do
        "$@" && return 0
        now_us now
        (((now - start) / 1000000 < secs)) || return 1
        sleep 0.3
    done
}

# ------------------------------------------------------------ checks

check_device() {
    local dev=$1 out
    ibv_devices | grep -qw "$dev" || fail "ibv_devices does not list $dev"
    out=$(ibv_devinfo -d "$dev") || fail "ibv_devinfo -d $dev failed"
    [[ $out == *PORT_ACTIVE* ]] || fail "$dev port is not PORT_ACTIVE: $out"
    [[ $(rdma link show "$dev/1") == *"state ACTIVE"* ]] || fail "rdma link: $dev/1 not ACTIVE"
    [[ -c /dev/infiniband/rdma_cm ]] || fail "no /dev/infiniband/rdma_cm"
    say "PASS device $dev ACTIVE ($(rdma link show "$dev/1" | grep -o 'netdev [^ ]*'))"
}

# rping_client ADDR LOG: one rping run of $PINGS pings, verbose, to LOG.
rping_client() {
    timeout 30 rping -c -a "$1" -p "$RPING_PORT" -C "$PINGS" -S 64 -v >"$2" 2>&1
}

# check_rping_client ADDR: client side; the server runs elsewhere.
check_rping_client() {
    local addr=$1 log=/tmp/selftest-rping-client.log start n
    now_us start
    retry 60 rping_client "$addr" "$log" || { cat "$log"; fail "rping client to $addr failed"; }
    n=$(grep -c '^ping data: rdma-ping-' "$log" || true)
    [[ $n -eq $PINGS ]] || { cat "$log"; fail "rping client got $n of $PINGS pings"; }
    say "PASS rping client -> $addr: $n pings ($(elapsed "$start")s)"
}

# rping_server ADDR LOG: serve exactly $PINGS pings.
rping_server() {
    timeout 120 rping -s -a "$1" -p "$RPING_PORT" -C "$PINGS" -v >"$2" 2>&1
}

check_rping_server_log() {
    local log=$1 rc=$2 n
    n=$(grep -c '^server ping data: rdma-ping-' "$log" || true)
    [[ $rc -eq 0 && $n -eq $PINGS ]] || { cat "$log"; fail "rping server: status $rc, $n of $PINGS pings"; }
    say "PASS rping server: $n pings"
}

# bw_client ADDR LOG: one ib_write_bw client run to LOG.
bw_client() {
    timeout 120 ib_write_bw -d "$DEV" -p "$BW_PORT" -s "$BW_SIZE" -n "$BW_ITERS" \
        --report_gbits "$1" >"$2" 2>&1
}

bw_server() {
    timeout 180 ib_write_bw -d "$DEV" -p "$BW_PORT" -s "$BW_SIZE" -n "$BW_ITERS" \
        --report_gbits >"$1" 2>&1
}

# bw_result LOG: print the average bandwidth (Gbit/s) from an ib_write_bw log.
bw_result() {
    awk -v size="$BW_SIZE" '$1 == size && NF >= 5 { print $4 }' "$1" | tail -n 1
}

check_bw_client() {
    local addr=$1 log=/tmp/selftest-bw-client.log gbps mbps
    retry 60 bw_client "$addr" "$log" || { cat "$log"; fail "ib_write_bw client to $addr failed"; }
    gbps=$(bw_result "$log")
    [[ -n $gbps ]] || { cat "$log"; fail "no ib_write_bw result"; }
    mbps=$(awk -v g="$gbps" 'BEGIN { printf "%d", g * 1000 }')
    [[ $mbps -gt 0 ]] || { cat "$log"; fail "ib_write_bw bandwidth is $gbps Gbit/s"; }
    say "PASS ib_write_bw $BW_SIZE B x $BW_ITERS -> $addr: $mbps Mbit/s"
}

# check_nordma: rdma_cm towards the namespace without RDMA gets no answer.
check_nordma() {
    local addr=$RDMASOCK_VM_NORDMA_ADDR ns=$RDMASOCK_VM_NORDMA_NS rc=0 start
    ip netns exec "$ns" ip -br addr show | grep -q "$addr/" ||
        fail "namespace $ns does not have $addr"
    # Plain IP works: a TCP connect to a closed port there is refused.
    local out
    out=$(timeout 5 bash -c "exec 3<>/dev/tcp/$addr/9" 2>&1) || true
    [[ $out == *refused* ]] || fail "no IP connectivity to $addr: $out"
    now_us start
    timeout 5 rping -c -a "$addr" -C 1 >/tmp/selftest-nordma.log 2>&1 || rc=$?
    [[ $rc -ne 0 ]] || fail "rping to $addr (namespace without RDMA) succeeded"
    if [[ $rc -eq 124 ]]; then
        say "PASS rdma_cm to $addr ($ns) got no answer (killed by timeout after $(elapsed "$start")s)"
    else
        say "PASS rdma_cm to $addr ($ns) failed with status $rc after $(elapsed "$start")s:" \
            "$(tr '\n' ' ' </tmp/selftest-nordma.log)"
    fi
}

# ------------------------------------------------------------ roles

# One VM: client and server on the same rxe device (rxe loopback).
run_single() {
    local addr=$RDMASOCK_VM_ADDR rc=0 spid
    check_device "$DEV"

    rping_server "$addr" /tmp/selftest-rping-server.log &
    spid=$!
    check_rping_client "$addr"
    wait "$spid" || rc=$?
    check_rping_server_log /tmp/selftest-rping-server.log "$rc"

    bw_server /tmp/selftest-bw-server.log &
    spid=$!
    check_bw_client "$addr"
    rc=0
    wait "$spid" || rc=$?
    [[ $rc -eq 0 ]] || { cat /tmp/selftest-bw-server.log; fail "ib_write_bw server: status $rc"; }

    if [[ -n ${RDMASOCK_VM_NORDMA_NS:-} ]]; then
        check_nordma
    fi
}

# VM 2 of --two-vms: serve one rping run, then one ib_write_bw run.
run_peer_server() {
    local addr=$RDMASOCK_VM_ADDR rc=0
    check_device "$DEV"
    rping_server "$addr" /tmp/selftest-rping-server.log || rc=$?
    check_rping_server_log /tmp/selftest-rping-server.log "$rc"
    bw_server /tmp/selftest-bw-server.log || { cat /tmp/selftest-bw-server.log; fail "ib_write_bw server failed"; }
    say "PASS ib_write_bw server: $(bw_result /tmp/selftest-bw-server.log) Gbit/s"
}

# VM 1 of --two-vms: the clients, towards VM 2.
run_peer_client() {
    check_device "$DEV"
    check_rping_client "$RDMASOCK_VM_PEER"
    check_bw_client "$RDMASOCK_VM_PEER"
}

main() {
    if [[ ${RDMASOCK_VM:-} != 1 ]]; then
        # On the host: boot the VM(s) and run this script there.
        if [[ ${1:-} == --two-vms ]]; then
            shift
            exec "$HERE/run" --two-vms "$@" --peer-cmd "$(printf '%q' "$SELF") --peer-server" \
                -- "$SELF"
        fi
        exec "$HERE/run" "$@" -- "$SELF"
    fi
    DEV=${RDMASOCK_VM_DEV:-rxe0}
    if [[ ${1:-} == --peer-server ]]; then
        run_peer_server
    elif [[ -n ${RDMASOCK_VM_PEER:-} ]]; then
        run_peer_client
    else
        run_single
    fi
    say "OK"
}

main "$@"
