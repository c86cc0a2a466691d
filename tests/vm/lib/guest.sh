#!/bin/bash
# Stage 2 of the rdmasock VM: runs chrooted in the host's root (read-only 9p,
# or an overlay), with the host's bash, iproute2 and rdma-core.
#
# Sets up the network and the soft-RoCE device, tells the harness "ready",
# waits for its go-ahead (two-VM mode), runs the command the harness wrote
# to cmd.sh with its stdout/stderr on the virtio-serial ports the harness
# streams, and reports the exit status.  Copied by tests/vm/run into the
# per-run control share, mounted at /run/rdmasock-vm/ctl.
#
# Every exec costs ~0.1 s under TCG (binaries come over 9p), so setup uses
# bash builtins and sysfs where it can and one "ip -batch" for the network.
#
# Control lines to the harness (port rdmasock.ctl), each "<vm-id> <word> ...":
#   msg TEXT     harness prints "vm: TEXT"
#   ready        device ACTIVE, about to run the command
#   fail TEXT    setup failed; the harness exits 125
#   exit N       the command finished with status N

set -u
CTL=/run/rdmasock-vm/ctl
LOG=/run/rdmasock-vm/setup.log
# shellcheck source=/dev/null
. "$CTL/guest.conf"

# ------------------------------------------------------------ control port

# find_port NAME: set PORT to the /dev node of the virtio-serial port NAME.
find_port() {
    local p i
    for ((i = 0; i < 100; i++)); do
        for p in /sys/class/virtio-ports/*; do
            if [[ -r $p/name && $(<"$p/name") == "$1" ]]; then
                PORT=/dev/${p##*/}
                return 0
            fi
        done
        sleep 0.05
    done
    return 1
}

find_port rdmasock.ctl || { echo "stage2: no control port" >/dev/console; exit 125; }
exec 9>"$PORT"
find_port rdmasock.out && OUT_PORT=$PORT || OUT_PORT=/dev/console
find_port rdmasock.err && ERR_PORT=$PORT || ERR_PORT=/dev/console

ctl() { printf '%s %s\n' "$VM_ID" "$*" >&9; }
debug() { [[ $VM_VERBOSE -eq 0 ]] || ctl "msg $*"; }

fatal() {
    ctl "fail $*"
    echo 125 >"$CTL/status"
    exit 125
}

# run CMD...: run a setup command; on failure report its output and stop.
run() {
    "$@" >"$LOG" 2>&1 || fatal "'$*' failed: $(tr '\n' ' ' <"$LOG")"
}

# ------------------------------------------------------------ network

# iface_by_mac MAC: set IFACE to the network interface with that address.
iface_by_mac() {
    local i
    for i in /sys/class/net/*; do
        if [[ $(<"$i/address") == "$1" ]]; then
            IFACE=${i##*/}
            return 0
        fi
    done
    return 1
}

# wait_active DEV: wait (bounded, 10 s) until port 1 of DEV is ACTIVE.
wait_active() {
    local i f=/sys/class/infiniband/$1/ports/1/state
    for ((i = 0; i < 200; i++)); do
        [[ -r $f && $(<"$f") == *ACTIVE* ]] && return 0
        sleep 0.05
    done
    return 1
}

# add_rxe NAME NETDEV: a soft-RoCE device on NETDEV, waited for.
add_rxe() {
    run rdma link add "$1" type rxe netdev "$2"
    wait_active "$1" || fatal "$1 did not become ACTIVE"
}

setup_network() {
    local netdev batch=/run/rdmasock-vm/ip.batch
    {
        echo "link set lo up"
        if [[ $VM_NET == veth ]]; then
            # One host, loopback RDMA: rxe on one end of a veth pair.
            echo "link add va type veth peer name vb"
            echo "addr add $VM_ADDR/24 dev va"
            echo "link set va up"
            echo "link set vb up"
            netdev=va
        else
            # Two VMs joined by a qemu socket network.
            iface_by_mac "$VM_MAC" || fatal "no interface with MAC $VM_MAC"
            netdev=$IFACE
            echo "addr add $VM_ADDR/24 dev $netdev"
            echo "link set $netdev up"
        fi
        if [[ $VM_NORDMA -eq 1 ]]; then
            # A "host without RDMA": namespace nordma behind its own veth
            # pair.  rxe (kernel 6.1) serves only the initial namespace, so
            # nothing in nordma answers RoCE.
            echo "netns add nordma"
            echo "link add nd0 type veth peer name nd1 netns nordma"
            echo "addr add 10.77.1.1/24 dev nd0"
            echo "link set nd0 up"
        fi
    } >"$batch"
    run ip -batch "$batch"
    if [[ $VM_NORDMA -eq 1 ]]; then
        printf '%s\n' "link set lo up" "addr add 10.77.1.2/24 dev nd1" "link set nd1 up" >"$batch"
        run ip -n nordma -batch "$batch"
    fi
    add_rxe "$VM_DEV" "$netdev"
    debug "$VM_DEV ACTIVE on $netdev ($VM_ADDR)"
    if [[ $VM_NORDMA -eq 1 && $VM_NORDMA_RXE -eq 1 ]]; then
        # With rxe1 on the near end, rdma_cm requests to 10.77.1.2 go out
        # and are never answered (without it they fail at once: no device).
        add_rxe rxe1 nd0
        debug "namespace nordma: 10.77.1.2 via nd0/rxe1 (10.77.1.1)"
    fi
}

# ------------------------------------------------------------ main

# The host has no /lib/modules for the guest kernel: kernel module
# auto-loading goes through a wrapper (written by the harness) that points
# modprobe at the cached kernel tree.
[[ -x $CTL/modprobe ]] && echo "$CTL/modprobe" >/proc/sys/kernel/modprobe
echo "rdmasock-vm$VM_ID" >/proc/sys/kernel/hostname
setup_network

ctl ready
if [[ $VM_WAIT_GO -eq 1 ]]; then
    # The harness creates "go" once the peer VM runs its command.
    until [[ -e $CTL/go ]]; do sleep 0.05; done
fi

# The command, its environment and directory were written by the harness.
# It gets no stdin.  env -i: only what cmd.sh exports reaches it.
env -i HOME=/root TERM=dumb LANG=C.UTF-8 /bin/bash "$CTL/cmd.sh" \
    </dev/null >"$OUT_PORT" 2>"$ERR_PORT"
rc=$?

sync
echo "$rc" >"$CTL/status"
[[ $VM_KEEP_KLOG -eq 0 ]] || dmesg >"$CTL/dmesg" 2>&1
ctl "exit $rc"
exit 0
