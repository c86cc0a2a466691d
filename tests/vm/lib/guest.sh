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
# Control lines to the harness (port rdmasock.ctl), each "<vm-id> <word> ...":
#   msg TEXT     harness prints "vm: TEXT" (only with -v for "debug")
#   ready        device ACTIVE, about to run the command
#   fail TEXT    setup failed; the harness exits 125
#   exit N       the command finished with status N

set -u
CTL=/run/rdmasock-vm/ctl
RUN=/run/rdmasock-vm
# shellcheck source=/dev/null
. "$CTL/guest.conf"

# ------------------------------------------------------------ control port

# find_port NAME: print the /dev node of the virtio-serial port NAME.
find_port() {
    local p i
    for ((i = 0; i < 100; i++)); do
        for p in /sys/class/virtio-ports/*; do
            [[ -r $p/name && $(<"$p/name") == "$1" ]] && { echo "/dev/${p##*/}"; return 0; }
        done
        sleep 0.05
    done
    return 1
}

CTL_PORT=$(find_port rdmasock.ctl) || { echo "stage2: no control port" >/dev/console; exit 125; }
OUT_PORT=$(find_port rdmasock.out) || OUT_PORT=/dev/console
ERR_PORT=$(find_port rdmasock.err) || ERR_PORT=/dev/console
exec 9>"$CTL_PORT"

ctl() { printf '%s %s\n' "$VM_ID" "$*" >&9; }
say() { ctl "msg $*"; }
debug() { [[ $VM_VERBOSE -eq 0 ]] || ctl "msg $*"; }

fatal() {
    ctl "fail $*"
    echo 125 >"$CTL/status"
    exit 125
}

# run CMD...: run a setup command; on failure report its output and stop.
run() {
    local out
    out=$("$@" 2>&1) || fatal "'$*' failed: ${out//$'\n'/ }"
}

# ------------------------------------------------------------ modules

# The guest kernel's modules live in the harness cache, visible through the
# host root.  Kernel auto-loading (and tests that modprobe) go through this
# wrapper, since the host has no /lib/modules for the guest kernel.
setup_modprobe() {
    mkdir -p "$RUN"
    printf '#!/bin/sh\nexec /usr/bin/kmod modprobe -d %q "$@"\n' "$VM_KROOT" >"$RUN/modprobe"
    chmod 0755 "$RUN/modprobe"
    [[ -d $VM_KROOT/lib/modules ]] && echo "$RUN/modprobe" >/proc/sys/kernel/modprobe
}

# ------------------------------------------------------------ network

# iface_by_mac MAC: print the network interface with that address.
iface_by_mac() {
    local i
    for i in /sys/class/net/*; do
        [[ $(<"$i/address") == "$1" ]] && { echo "${i##*/}"; return 0; }
    done
    return 1
}

# wait_active DEV: wait (bounded) until port 1 of DEV is ACTIVE.
wait_active() {
    local i
    for ((i = 0; i < 200; i++)); do
        [[ $(rdma link show "$1/1" 2>/dev/null) == *"state ACTIVE"* ]] && return 0
        sleep 0.05
    done
    return 1
}

setup_network() {
    run ip link set lo up
    local netdev
    if [[ $VM_NET == veth ]]; then
        # One host, loopback RDMA: rxe on one end of a veth pair.
        run ip link add va type veth peer name vb
        run ip addr add "$VM_ADDR/24" dev va
        run ip link set va up
        run ip link set vb up
        netdev=va
    else
        # Two VMs joined by a qemu socket network.
        netdev=$(iface_by_mac "$VM_MAC") || fatal "no interface with MAC $VM_MAC"
        run ip addr add "$VM_ADDR/24" dev "$netdev"
        run ip link set "$netdev" up
    fi
    run rdma link add "$VM_DEV" type rxe netdev "$netdev"
    wait_active "$VM_DEV" || fatal "$VM_DEV did not become ACTIVE: $(rdma link show 2>&1)"
    debug "$VM_DEV ACTIVE on $netdev ($VM_ADDR)"

    if [[ $VM_NORDMA -eq 1 ]]; then
        # A "host without RDMA": a namespace reached over its own veth pair.
        # rxe (kernel 6.1) only serves the initial namespace, so nothing in
        # "nordma" answers RoCE.  With an rxe device on the near end (nd0),
        # rdma_cm requests to 10.77.1.2 go out and are never answered.
        run ip netns add nordma
        run ip link add nd0 type veth peer name nd1 netns nordma
        run ip addr add 10.77.1.1/24 dev nd0
        run ip link set nd0 up
        run ip -n nordma link set lo up
        run ip -n nordma addr add 10.77.1.2/24 dev nd1
        run ip -n nordma link set nd1 up
        if [[ $VM_NORDMA_RXE -eq 1 ]]; then
            run rdma link add rxe1 type rxe netdev nd0
            wait_active rxe1 || fatal "rxe1 did not become ACTIVE"
        fi
        debug "namespace nordma: 10.77.1.2 (via nd0 10.77.1.1)"
    fi
}

# ------------------------------------------------------------ main

setup_modprobe
hostname "rdmasock-vm$VM_ID" 2>/dev/null
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
