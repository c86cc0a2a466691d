# shellcheck shell=bash
# Host-side helpers for tests/vm/run: messages, package checks, the cached
# Debian kernel and the initramfs.  Sourced by tests/vm/run; not executable.
#
# Everything cached lives under $VM_CACHE (default /var/cache/rdmasock-vm):
#   kernel/<version>/boot/vmlinuz-<version>   unpacked linux-image package
#   kernel/<version>/lib/modules/<version>/   its modules, depmod'ed
#   kernel/<version>/.complete                written last: the unpack finished
#   initrd-<version>-<key>.cpio               busybox + modules + stage-1 init
#   .lock                                     flock(1) serialising cache updates

# ---------------------------------------------------------------- messages

# vm_say TEXT...: a harness line on stderr, prefixed "vm:".
vm_say() { printf 'vm: %s\n' "$*" >&2; }

# vm_debug TEXT...: like vm_say, only with -v.
vm_debug() { [[ ${VM_VERBOSE:-0} -eq 0 ]] || printf 'vm: %s\n' "$*" >&2; }

# vm_die TEXT...: report a harness failure and exit 125.
vm_die() {
    printf 'vm: error: %s\n' "$*" >&2
    exit 125
}

# vm_now_us: microseconds since the epoch, into the variable named by $1
# (no subshell, so it is cheap inside the supervision loop).
vm_now_us() {
    local t=${EPOCHREALTIME//[.,]/}
    printf -v "$1" '%s' "$t"
}

# vm_fmt_secs US: microseconds as seconds with one decimal, e.g. "12.3".
vm_fmt_secs() {
    local us=$1
    printf '%d.%d' $((us / 1000000)) $((us % 1000000 / 100000))
}

# vm_sq STRING: STRING single-quoted for a POSIX shell (busybox ash reads
# the stage-1 configuration, so bash's printf %q is not used there).
vm_sq() {
    local s=${1//\'/\'\\\'\'}
    printf "'%s'" "$s"
}

# ---------------------------------------------------------------- packages

# Packages the harness needs on the host, each with a file (glob) that
# proves it is installed.  busybox-static provides the initramfs' only binary; the
# RDMA tools are run by the guest straight from the host's root.
VM_HOST_PACKAGES=(
    "qemu-system-x86:/usr/bin/qemu-system-x86_64"
    "busybox-static:/bin/busybox"
    "cpio:/usr/bin/cpio"
    "rdma-core:/usr/sbin/rdma-ndd"
    "ibverbs-providers:/usr/lib/*/libibverbs/librxe-rdmav*.so"
    "ibverbs-utils:/usr/bin/ibv_devinfo"
    "rdmacm-utils:/usr/bin/rping"
    "perftest:/usr/bin/ib_write_bw"
    "iproute2:/usr/bin/rdma"
    "kmod:/usr/bin/kmod"
    "xz-utils:/usr/bin/xz"
)

# vm_pkg_installed PKG: true if dpkg has PKG fully installed.
vm_pkg_installed() {
    [[ $(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) == "install ok installed" ]]
}

# vm_busybox_is_static: the initramfs needs a static busybox (the dynamic
# "busybox" package's binary would miss its libraries).
vm_busybox_is_static() {
    [[ -x /bin/busybox ]] && ! ldd /bin/busybox >/dev/null 2>&1
}

# vm_apt_get ARGS...: apt-get, non-interactive and bounded in time.
vm_apt_get() {
    DEBIAN_FRONTEND=noninteractive timeout 900 apt-get "$@"
}

# vm_ensure_packages: install whatever is missing with apt-get.
vm_ensure_packages() {
    local entry pkg probe missing=()
    for entry in "${VM_HOST_PACKAGES[@]}"; do
        pkg=${entry%%:*}
        probe=${entry#*:}
        if [[ $pkg == busybox-static ]]; then
            vm_busybox_is_static && continue
        elif compgen -G "$probe" >/dev/null || vm_pkg_installed "$pkg"; then
            continue
        fi
        missing+=("$pkg")
    done
    [[ ${#missing[@]} -eq 0 ]] && return 0
    [[ $(id -u) -eq 0 ]] || vm_die "missing packages (${missing[*]}) and not root to install them"
    vm_say "installing ${missing[*]}"
    local log=${VM_WORK:-/tmp}/apt-install.log
    if ! vm_apt_get install -y --no-install-recommends "${missing[@]}" >"$log" 2>&1; then
        vm_debug "apt-get install failed; running apt-get update and retrying"
        vm_apt_get update >>"$log" 2>&1 || true
        vm_apt_get install -y --no-install-recommends "${missing[@]}" >>"$log" 2>&1 ||
            { tail -n 20 "$log" >&2; vm_die "apt-get install ${missing[*]} failed"; }
    fi
    vm_busybox_is_static || vm_die "/bin/busybox is not the static busybox"
}

# ---------------------------------------------------------------- kernel

# vm_newest_apt_kernel: print the newest linux-image-6.1.0-N-amd64 package
# apt-cache knows (the plain flavour: no -rt, -cloud, -dbg, -unsigned).
# apt-cache can take seconds (Docker-style images disable apt's binary
# cache), so the answer is remembered until the package lists change.
vm_newest_apt_kernel() {
    local memo=$VM_CACHE/apt-newest-kernel lists=/var/lib/apt/lists name
    if [[ -s $memo && $memo -nt $lists ]]; then
        cat "$memo"
        return 0
    fi
    name=$(apt-cache pkgnames linux-image-6.1.0- 2>/dev/null |
        grep -E '^linux-image-6\.1\.0-[0-9]+-amd64$' | sort -V | tail -n 1) || true
    if [[ -n $name ]] && mkdir -p "$VM_CACHE" 2>/dev/null; then
        printf '%s\n' "$name" >"$memo.$$" && mv "$memo.$$" "$memo"
    fi
    printf '%s\n' "$name"
}

# vm_newest_cached_kernel: print the newest kernel version already unpacked.
vm_newest_cached_kernel() {
    local d
    for d in "$VM_CACHE"/kernel/*/.complete; do
        [[ -e $d ]] || continue
        d=${d%/.complete}
        printf '%s\n' "${d##*/}"
    done | sort -V | tail -n 1
}

# vm_lock_cache: take the cache lock (other harness runs may fill the cache
# at the same time).  The lock is held on fd VM_LOCK_FD until vm_unlock_cache.
vm_lock_cache() {
    mkdir -p "$VM_CACHE" || vm_die "cannot create cache directory $VM_CACHE"
    exec {VM_LOCK_FD}>"$VM_CACHE/.lock"
    flock -w 900 "$VM_LOCK_FD" || vm_die "timed out waiting for the lock on $VM_CACHE"
}

vm_unlock_cache() {
    [[ -n ${VM_LOCK_FD:-} ]] || return 0
    exec {VM_LOCK_FD}>&-
    VM_LOCK_FD=
}

# vm_fetch_kernel VERSION: download and unpack linux-image-VERSION into the
# cache (caller holds the lock).
vm_fetch_kernel() {
    local ver=$1 pkg="linux-image-$1" dest="$VM_CACHE/kernel/$1" dl
    vm_say "downloading $pkg (once; cached in $VM_CACHE)"
    dl=$(mktemp -d "$VM_CACHE/download.XXXXXX")
    # apt drops privileges to _apt for downloads when it can write there.
    chmod 0755 "$dl"
    chown _apt "$dl" 2>/dev/null || true
    if ! (cd "$dl" && vm_apt_get download "$pkg") >"$dl/apt.log" 2>&1; then
        tail -n 20 "$dl/apt.log" >&2
        rm -rf "$dl"
        return 1
    fi
    rm -rf "$dest"
    mkdir -p "$dest"
    if ! dpkg-deb -x "$dl"/"$pkg"_*.deb "$dest" ||
        ! depmod -b "$dest" "$ver" ||
        [[ ! -e $dest/boot/vmlinuz-$ver ]]; then
        rm -rf "$dl" "$dest"
        return 1
    fi
    rm -rf "$dl"
    touch "$dest/.complete"
}

# vm_prepare_kernel: set VM_KVER, VM_KROOT (unpacked package root) and
# VM_VMLINUZ, downloading the newest stock kernel when it is not cached.
# RDMASOCK_VM_KERNEL=VERSION pins a version (e.g. 6.1.0-56-amd64).
vm_prepare_kernel() {
    local want="" pkg cached
    if [[ -n ${RDMASOCK_VM_KERNEL:-} ]]; then
        want=$RDMASOCK_VM_KERNEL
    else
        pkg=$(vm_newest_apt_kernel)
        cached=$(vm_newest_cached_kernel)
        if [[ -z $pkg && -z $cached ]]; then
            vm_say "apt-cache knows no linux-image-6.1.0-*-amd64; running apt-get update"
            vm_apt_get update >"${VM_WORK:-/tmp}/apt-update.log" 2>&1 ||
                vm_die "apt-get update failed (see ${VM_WORK:-/tmp}/apt-update.log)"
            pkg=$(vm_newest_apt_kernel)
        fi
        want=${pkg#linux-image-}
        [[ -n $want ]] || want=$cached
        [[ -n $want ]] || vm_die "no linux-image-6.1.0-*-amd64 package found"
    fi
    if [[ ! -e $VM_CACHE/kernel/$want/.complete ]]; then
        vm_lock_cache
        if [[ ! -e $VM_CACHE/kernel/$want/.complete ]] && ! vm_fetch_kernel "$want"; then
            # Offline or the mirror moved on: fall back to any cached kernel.
            cached=$(vm_newest_cached_kernel)
            [[ -n $cached && -z ${RDMASOCK_VM_KERNEL:-} ]] ||
                vm_die "cannot download linux-image-$want"
            vm_say "download failed; using cached kernel $cached"
            want=$cached
        fi
        vm_unlock_cache
    fi
    VM_KVER=$want
    VM_KROOT=$VM_CACHE/kernel/$want
    VM_VMLINUZ=$VM_KROOT/boot/vmlinuz-$want
    vm_prepare_pvh
    vm_debug "kernel $VM_KVER ($VM_VMLINUZ)"
}

# vm_prepare_pvh: prefer the uncompressed vmlinux (an ELF with a PVH entry
# point, CONFIG_PVH=y) over the bzImage: qemu then starts the kernel
# directly, which saves decompressing ~60 MB of xz under TCG (about 3 s).
# The vmlinux is extracted once into the cache; RDMASOCK_VM_PVH=0 opts out.
vm_prepare_pvh() {
    local elf=$VM_KROOT/boot/vmlinux-$VM_KVER
    [[ ${RDMASOCK_VM_PVH:-1} != 0 ]] || return 0
    grep -qx 'CONFIG_PVH=y' "$VM_KROOT/boot/config-$VM_KVER" 2>/dev/null || return 0
    if [[ ! -s $elf ]]; then
        vm_lock_cache
        [[ -s $elf ]] || vm_extract_vmlinux "$VM_VMLINUZ" "$elf" ||
            vm_debug "cannot extract vmlinux; booting the bzImage"
        vm_unlock_cache
    fi
    [[ -s $elf ]] && VM_VMLINUZ=$elf
    return 0
}

# vm_extract_vmlinux BZIMAGE OUT: decompress the xz payload of BZIMAGE.
vm_extract_vmlinux() {
    local off
    off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$1" | head -n 1 | cut -d: -f1)
    [[ -n $off ]] || return 1
    tail -c +$((off + 1)) "$1" | xz -dc --single-stream >"$2.tmp" 2>/dev/null
    # Keep it only if it is an ELF file.
    if [[ $(head -c 4 "$2.tmp" | od -An -c | tr -d ' ') == '177ELF' ]]; then
        mv "$2.tmp" "$2"
        return 0
    fi
    rm -f "$2.tmp"
    return 1
}

# ---------------------------------------------------------------- initramfs

# Modules loaded by stage 1, in this order, each with its dependencies
# (resolved by modprobe --show-depends).  virtio + 9p come first so the host
# root can be mounted; crc32_generic must precede rdma_rxe (rxe fails with
# "failed to init crc32 algorithm err:-2" otherwise).
VM_MODULES=(
    virtio_pci 9pnet_virtio 9p virtio_console virtio_net overlay veth
    crc32_generic rdma_rxe rdma_ucm ib_umad
)

# vm_module_files: print the .ko paths to load, dependencies first, once each.
vm_module_files() {
    local m
    for m in "${VM_MODULES[@]}"; do
        modprobe -d "$VM_KROOT" -S "$VM_KVER" --show-depends "$m" ||
            vm_die "module $m not found in $VM_KVER"
    done | awk '$1 == "insmod" && !seen[$2]++ { print $2 }'
}

# vm_prepare_initrd: set VM_INITRD to a cached initramfs for VM_KVER built
# from lib/init, rebuilding it when the init script or busybox changed.
vm_prepare_initrd() {
    local files key stage
    files=$(vm_module_files) || exit 125
    key=$({ printf '%s\n' "$VM_KVER" "$files"; cat "$VM_LIB/init"; cat /bin/busybox; } |
        sha256sum | cut -c1-16)
    VM_INITRD=$VM_CACHE/initrd-$VM_KVER-$key.cpio
    [[ -s $VM_INITRD ]] && return 0
    vm_lock_cache
    if [[ ! -s $VM_INITRD ]]; then
        vm_debug "building $VM_INITRD"
        stage=$(mktemp -d "$VM_CACHE/initrd.XXXXXX")
        mkdir -p "$stage"/{bin,dev,proc,sys,modules,ctl,lower,rw,newroot}
        cp /bin/busybox "$stage/bin/busybox"
        cp "$VM_LIB/init" "$stage/init"
        chmod 0755 "$stage/init"
        local f
        while IFS= read -r f; do
            cp "$f" "$stage/modules/"
            printf '%s\n' "${f##*/}" >>"$stage/modules/order"
        done <<<"$files"
        # Old initramfs images of this kernel are stale now.
        rm -f "$VM_CACHE/initrd-$VM_KVER-"*.cpio
        (cd "$stage" && find . -mindepth 1 | LC_ALL=C sort |
            cpio -o -H newc --quiet -R 0:0) >"$VM_INITRD.tmp" &&
            mv "$VM_INITRD.tmp" "$VM_INITRD"
        rm -rf "$stage"
        [[ -s $VM_INITRD ]] || vm_die "building the initramfs failed"
    fi
    vm_unlock_cache
}
